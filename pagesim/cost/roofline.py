"""The analytic cost model: two rooflines, one for the matmuls and one for attention, one after the other.

    forward = max(weight bytes / mem_rate, dense flops / flop_rate)      the linear layers and LM head
            + max(K/V bytes / mem_rate, attention flops / flop_rate)     attention and the K/V writes
            + step_overhead_s + seq_overhead_s * sequences
    mem_rate = hbm_bandwidth * mem_efficiency, flop_rate = bf16_flops * compute_efficiency
    weight bytes    = every matrix once per step (the embedding table is only gathered: left out)
    dense flops     = tokens * (flops_per_token - LM head) + sequences * LM head (2 per multiply-add;
                      logits only for the rows that sample: at most one per sequence)
    K/V bytes       = kv_bytes_per_token * (prefill_context_tokens + decode_context_tokens   read
                                            + num_prefill_tokens + num_decode_seqs)          written
                      at the cache's dtype (kv_cache_dtype fp8: 1 byte per element; dequantised in registers,
                      the attention FLOPs stay bf16's)
    attention flops = 4 * head_dim * num_heads * num_layers per (query, key) pair (QK^T and PV):
                      prefill_attn_pairs + decode_context_tokens
    step    = forward (0 without tokens) + swapped blocks * block_bytes / (pcie_bandwidth * pcie_efficiency)
              + copied blocks * 2 * block_bytes / mem_rate
              + loaded blocks * block_bytes / (pcie_bandwidth * pcie_efficiency)      host tier -> GPU
    with a host tier, forward becomes max(forward, stored blocks * block_bytes / (pcie_bandwidth * pcie_efficiency)):
    stores (GPU -> host) run on a side stream under the step's compute; loads precede the prefill that needs them

Tensor parallelism (tensor_parallel_size = tp > 1, Megatron-style as in vLLM): each GPU reads 1/tp of
the weights, does 1/tp of the matmul and attention FLOPs and holds its share of the KV heads
(Config.block_bytes); every layer then all-reduces its attention output and its MLP output, 2 per
layer, each of tokens * hidden_size * dtype_bytes, in a ring over NVLink:
    all-reduce = ALLREDUCE_LATENCY_S + 2 * (tp - 1) / tp * bytes / (nvlink_bandwidth * NVLINK_EFFICIENCY)
The GPUs run in lockstep, so the step is one GPU's time plus the all-reduces.

Why two rooflines and not one max over the whole step: attention and the matmuls are separate
kernels that run one after the other in every layer, so a decode batch's K/V streaming does not hide
under a prefill chunk's matmuls (one max over the summed bytes and FLOPs would make a step of 1024
prefill tokens + 128 decodes at 4k context ~40% cheaper than it is). Transfers are serialised with
the forward pass (added). Activations are left out: in decode they are a few MB per layer and stay in
the 50 MB L2; in a large prefill the step is compute-bound and their traffic (the SwiGLU's
elementwise passes, ~3% of the matmul time at 8192 tokens) hides under the matmuls. A step with transfers but no tokens still pays the step overhead.
StepFeatures.max_decode_context is not used: a roofline sees totals, so a batch with one long sequence
among short ones costs what a uniform batch of the same total context costs.

The efficiencies are ceilings measured on an H200 (see the constants), so the model is an
attainable bound, optimistic where kernels fall short of them: small batches pay per-kernel latency,
and the weight-to-compute knee is soft. Measured on an H200, Llama-3-8B's dense matmuls alone
(CUDA-graph replay) take 1.23x the first max() at 1 token, 1.3-1.5x at 32-192 tokens, 1.05x at 512
and 0.99-1.02x from 1024 to 8192 tokens. A profile fitted on the real engine closes that gap.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, count, islice

import numpy as np

from pagesim.config import Config
from pagesim.cost.features import StepFeatures

# A device-to-device copy of 4 GiB (torch copy_) moved 4.24 TB/s, bytes read + written, of an
# H200's 4.8 TB/s datasheet: 0.88.
MEM_EFFICIENCY = 0.9
# Llama-3-8B's own dense matmuls (fused QKV, O, gate/up, down, LM head; bf16, CUDA-graph replay)
# ran at 679-703 TFLOP/s for 1024-8192 tokens = 0.69-0.71 of 989; an 8192^3 square GEMM reaches
# 769-798 (0.8), but the model's shapes are what a step runs.
COMPUTE_EFFICIENCY = 0.7
# Pinned-memory copies of 1 GiB: 41.6 GB/s host->device, 54.3 GB/s device->host of PCIe 5 x16's
# 64 GB/s; mean ~48 GB/s = 0.75.
PCIE_EFFICIENCY = 0.75
# NCCL's ring all-reduce reaches ~80% of the NVLink per-direction figure at large messages (assumed,
# not measured here); a small all-reduce costs ~10 us of launch and synchronisation (assumed).
NVLINK_EFFICIENCY = 0.8
ALLREDUCE_LATENCY_S = 10e-6
# Host work a step cannot hide in an engine that replays decode steps as CUDA graphs: scheduling,
# building the block tables and slot mapping, copying them to the GPU, sampling, reading the tokens
# back; each is tens of microseconds in vLLM-class engines. Kernel latency inside the step
# (~0.8 ms at batch 1 for Llama-3-8B, measured) is NOT in it: it belongs to a calibrated profile.
STEP_OVERHEAD_S = 200e-6
# Per-sequence host work (input rows, output processing) hides behind the GPU in engines that
# overlap the host with the device; 0 by default, an override for engines that do not.
SEQ_OVERHEAD_S = 0.0
# decode_run_times evaluates runs up to this many steps on Python floats (bit for bit numpy's result).
SMALL_RUN = 48
EXACT_INTS = 2**53  # every integer below it is a float, exactly
# decode_run_until times this many steps or more on arrays (numpy's per-call cost is then below the floats' per-step one)
NUMPY_RUN = 32


def _bytes_read(first: int, step: int, num: int):
    """first, first + step, ... (num of them), as floats when all are below EXACT_INTS (a float count adds them
    exactly: the same numbers), else as ints. A float divides by a float at once, where an int that does not fit
    a machine digit is converted first (~100 instructions a step of a decode run)."""
    if first + step * num < EXACT_INTS:
        return islice(count(float(first), float(step)), num)
    return range(first, first + step * num, step)


def _kv_read_durations(dense: float, first: int, step: int, num: int, mem_rate: float, overhead: float,
                       out: np.ndarray | None = None) -> np.ndarray:
    """dense + b / mem_rate + overhead for the bytes b = first, first + step, ... (num of them) on arrays: a K/V-bound
    decode run's step durations, element for element the float expression (the bytes exact as floats below
    EXACT_INTS, else int64 as the products are), for decode_run_times and decode_run_until alike; into `out` if given."""
    dtype = np.float64 if first + step * num < EXACT_INTS else np.int64
    out = np.divide(np.arange(first, first + step * num, step, dtype=dtype), mem_rate, out=out)
    out += dense  # x + dense: dense + x (IEEE addition commutes)
    out += overhead
    return out


def _larger(a: float, b: float) -> float:
    """max(a, b) of two numbers, as the builtin picks it (b only if b > a), without its argument parsing: ~700
    instructions a call on Python 3.11, where this call costs ~250."""
    return b if b > a else a


class RooflineCostModel:
    def __init__(self, config: Config, *, mem_efficiency: float = MEM_EFFICIENCY,
                 compute_efficiency: float = COMPUTE_EFFICIENCY, pcie_efficiency: float = PCIE_EFFICIENCY,
                 step_overhead_s: float = STEP_OVERHEAD_S, seq_overhead_s: float = SEQ_OVERHEAD_S):
        m, g = config.model_spec, config.gpu_spec
        tp = config.tensor_parallel_size
        self.model, self.gpu, self.tensor_parallel_size = m.name, g.name, tp
        self.mem_efficiency, self.compute_efficiency, self.pcie_efficiency = mem_efficiency, compute_efficiency, pcie_efficiency
        self.step_overhead_s, self.seq_overhead_s = step_overhead_s, seq_overhead_s
        self.mem_rate = g.hbm_bandwidth * mem_efficiency  # bytes/s
        self.flop_rate = g.bf16_flops * compute_efficiency  # FLOP/s
        lm_head = 2 * m.vocab_size * m.hidden_size
        # Per GPU: 1/tp of every matrix and of the query heads, its share of the KV heads.
        self.weight_read_bytes = m.flops_per_token // 2 * m.dtype_bytes / tp  # every parameter but the embedding table
        self.kv_bytes = m.kv_bytes_per_token_at(config.kv_dtype_bytes) * m.kv_heads_per_gpu(tp) // m.num_kv_heads  # fp8: half
        self.dense_flops = (m.flops_per_token - lm_head) / tp  # per token
        self.lm_head_flops = lm_head / tp  # per sampled sequence (an upper bound for prefill chunks)
        self.attn_flops = 4 * m.head_dim * m.num_heads * m.num_layers / tp  # per (query, key) pair
        # All-reduces: 2 per layer; seconds per step and per token.
        if tp > 1:
            ring = 2 * (tp - 1) / tp / (g.nvlink_bandwidth * NVLINK_EFFICIENCY)
            self.allreduce_s = 2 * m.num_layers * ALLREDUCE_LATENCY_S
            self.allreduce_s_per_token = 2 * m.num_layers * m.hidden_size * m.dtype_bytes * ring
        else:
            self.allreduce_s = self.allreduce_s_per_token = 0.0
        self.swap_s_per_block = config.block_bytes / (g.pcie_bandwidth * pcie_efficiency)
        self.copy_s_per_block = 2 * config.block_bytes / self.mem_rate
        self.load_s_per_block = self.store_s_per_block = self.swap_s_per_block  # host tier: the same PCIe link
        # Decode attention is the K/V read whatever the context when (c + n) * kv_bytes / mem_rate exceeds
        # c * attn_flops / flop_rate for every c >= 0 by more than rounding can move either (all GQA models
        # here, by ~40x): decode_run_times then skips the comparison.
        self._decode_kv_bound = self.kv_bytes * self.flop_rate > self.attn_flops * self.mem_rate * (1 + 1e-6)
        # decode_run_until's dense term by batch size, for the batches it times (those whose steps are the K/V read
        # plus constants: no all-reduce, no per-sequence overhead): as a float, and as a 0-d array for its array pass
        self._run_dense: dict[int, tuple[float, np.ndarray]] = {}
        # ... whose other constant operands are 0-d arrays too: a ufunc converts a Python float operand anew at each
        # call (~1.5k instructions of the ~5k a call; the same float64 operations)
        self._run_rates = np.array(self.mem_rate), np.array(self.step_overhead_s)

    def _forward_time(self, tokens, seqs, kv_read, pairs, maximum=_larger):
        """Works on numbers and on numpy arrays alike (`maximum`: np.maximum for arrays), with the same operations in
        the same order."""
        dense = maximum(self.weight_read_bytes / self.mem_rate,
                        (tokens * self.dense_flops + seqs * self.lm_head_flops) / self.flop_rate)
        attention = maximum((kv_read + tokens) * self.kv_bytes / self.mem_rate, pairs * self.attn_flops / self.flop_rate)
        allreduce = self.allreduce_s + tokens * self.allreduce_s_per_token
        return dense + attention + allreduce + self.step_overhead_s + seqs * self.seq_overhead_s

    def step_time(self, f: StepFeatures) -> float:
        t = ((f.num_swap_out_blocks + f.num_swap_in_blocks) * self.swap_s_per_block + f.num_copy_blocks * self.copy_s_per_block
             + f.num_load_blocks * self.load_s_per_block)
        store = f.num_store_blocks * self.store_s_per_block
        tokens = f.num_prefill_tokens + f.num_decode_seqs
        if tokens:
            t += _larger(store, self._forward_time(tokens, f.num_prefill_seqs + f.num_decode_seqs,
                                                   f.prefill_context_tokens + f.decode_context_tokens,
                                                   f.prefill_attn_pairs + f.decode_context_tokens))
        elif t or store:
            t += store + self.step_overhead_s
        return t

    prices_sharing = False  # repeated reads of shared blocks cost their bytes (StepFeatures.decode_shared_tokens)
    governor = None  # steps at the datasheet's rates, whatever the clock (cost/governor.py is a fitted profile's)
    prefill_grid = None  # nor the prefill kernel's schedule (StepFeatures.prefill_makespan)

    def decode_run_times(self, num_seqs: int, context_start: int, k: int, max_context_start: int,
                         shared: int = 0, since: int = 0, prefill_tokens: int = 0) -> np.ndarray:
        """Durations of k pure-decode steps; step j reads context_start + num_seqs * (j + 1) keys.

        max_context_start (the longest sequence's cached tokens at the start), shared (reads of
        shared blocks), since and prefill_tokens (the first step's steps_since_prefill and
        last_prefill_tokens) are ignored: a roofline counts
        bytes and FLOPs, not how they are spread over the sequences or cached, nor the GPU's state after
        a prefill (an attainable bound; the engine's serial per-sequence decode programs, L2 and the
        slower steps after a prefill are the profile's business).
        """
        if num_seqs == 0:
            return np.zeros(k)
        n = num_seqs
        dense = max(self.weight_read_bytes / self.mem_rate, (n * self.dense_flops + n * self.lm_head_flops) / self.flop_rate)
        allreduce = self.allreduce_s + n * self.allreduce_s_per_token
        kvb, mem_rate, attn, flop_rate = self.kv_bytes, self.mem_rate, self.attn_flops, self.flop_rate
        overhead, seq_overhead = self.step_overhead_s, n * self.seq_overhead_s
        if self._decode_kv_bound and not allreduce and not seq_overhead:
            # _forward_time's sums with attention = the K/V read of c + n keys (iterated as c2 = c + n) and
            # the two terms that are +0.0 left out (adding +0.0 to a positive float changes no bit).
            if k <= SMALL_RUN:  # numpy's per-call cost dominates short runs: the same operations on floats
                return np.array([dense + c2 * kvb / mem_rate + overhead
                                 for c2 in range(context_start + 2 * n, context_start + n * (k + 2), n)])
            return _kv_read_durations(dense, (context_start + 2 * n) * kvb, n * kvb, k, mem_rate, overhead)
        if k <= SMALL_RUN:
            # max(a, b) written out (a builtin call per step was a tenth of a run's cost); the same value
            return np.array([dense + (a if (a := (c + n) * kvb / mem_rate) >= (b := c * attn / flop_rate) else b)
                             + allreduce + overhead + seq_overhead
                             for c in range(context_start + n, context_start + n * (k + 1), n)])
        ctx = context_start + n * np.arange(1, k + 1, dtype=np.int64)
        return self._forward_time(n, n, ctx, ctx, np.maximum)

    def decode_run_until(self, num_seqs: int, context_start: int, k: int, now: float, cut: float,
                         window: int) -> tuple[list[float], list[float], float] | None:
        """The steps of a decode run (decode_run_times' durations) that start before `cut`, the first always,
        at most k, timed from `now`: (start times, durations, end of the last); each start is the previous
        plus its duration, as a step-by-step clock adds them. One pass up to the cut on Python floats (lists), or on
        arrays from NUMPY_RUN steps on, the same floats as decode_run_times'; None when more than `window` steps may
        start before cut (durations grow, so the first bounds how many) or when the durations need the max() (the
        caller then uses decode_run_times)."""
        n = num_seqs
        dense = self._run_dense.get(n)
        if dense is None:
            if not n or not self._decode_kv_bound or self.allreduce_s + n * self.allreduce_s_per_token or n * self.seq_overhead_s:
                return None
            dense = max(self.weight_read_bytes / self.mem_rate, (n * self.dense_flops + n * self.lm_head_flops) / self.flop_rate)
            dense = self._run_dense[n] = dense, np.array(dense)
        dense, dense_array = dense
        kvb, mem_rate, overhead = self.kv_bytes, self.mem_rate, self.step_overhead_s
        c2 = context_start + 2 * n  # the keys read by the first step plus its new tokens' (decode_run_times)
        first = dense + c2 * kvb / mem_rate + overhead  # decode_run_times' expression, in its order
        if k > window and cut - now > (window - 1) * first:  # every step lasts at least the first: maybe a long run
            return None
        # Every step lasts at least the first, so at most `most` start before cut (+2: rounding); their durations
        # in one comprehension, their starts by a sequential sum (accumulate, as a step-by-step clock adds them).
        # The comprehension runs over the bytes c * kvb themselves (kv_bytes is an int: the same integers, so the
        # same floats), one multiplication a step fewer (_bytes_read).
        w = k if k < window else window
        span = (cut - now) / first  # inf without a cut
        most = w if span >= w else int(span) + 2
        b2, db = c2 * kvb, n * kvb
        num = w if w <= most else most
        if num >= NUMPY_RUN:
            # Many steps: the same durations on arrays, written after `now`, and the starts by cumsum (it adds
            # sequentially); start times and durations handed back as arrays. (The second pass: rounding beyond the
            # margin, all the window's steps timed.)
            rate, step_overhead = self._run_rates
            for count in (num, w) if num < w else (num,):
                times = np.empty(count + 1)
                times[0], durations = now, times[1:]
                _kv_read_durations(dense_array, b2, db, count, rate, step_overhead, out=durations)
                times = times.cumsum()  # the method: np.cumsum adds ~5k instructions of Python-level dispatch
                m = int(times.searchsorted(cut)) or 1
                if m < len(times):
                    return times[:m], durations[:m], float(times[m])
            return (times[:-1], durations, float(times[-1])) if w == k else None
        durations = [dense + b / mem_rate + overhead for b in _bytes_read(b2, db, num)]
        times = list(accumulate(durations, initial=now))
        m = bisect_left(times, cut, 1)  # the first step ending at or after cut is the last
        if m == len(times) and len(durations) < w:  # (rounding beyond the margin: time all the window's steps)
            durations = [dense + b / mem_rate + overhead for b in _bytes_read(b2, db, w)]
            times = list(accumulate(durations, initial=now))
            m = bisect_left(times, cut, 1)
        if m < len(times):
            return times[:m], durations[:m], times[m]
        return (times[:-1], durations, times[-1]) if w == k else None

    def describe(self) -> dict:
        return {"kind": "roofline", "model": self.model, "gpu": self.gpu,
                "tensor_parallel_size": self.tensor_parallel_size, "mem_efficiency": self.mem_efficiency,
                "compute_efficiency": self.compute_efficiency, "pcie_efficiency": self.pcie_efficiency,
                "step_overhead_s": self.step_overhead_s, "seq_overhead_s": self.seq_overhead_s}
