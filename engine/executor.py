"""The GPU executor: runs the shared scheduler's step plans on the real model and paged KV cache.

`GPUExecutor.execute(plan) -> seconds` is the engine's side of pagesim.loop.run_step. One step:

0. forget the requests that ended since the last plan (`plan.finished_req_ids`);
1. block copies (`plan.blocks_to_copy`: a fork's copy of the parent's last blocks);
2. swap-outs GPU -> CPU, then swap-ins CPU -> GPU (engine.kernels.swap: a pinned block-major CPU
   cache, one zero-copy kernel per direction, no host sync); then the host offload tier's
   stores and loads (engine/host_tier.py);
3. one forward pass over the packed batch, prefill chunks first, then one token per decoding
   sequence; a token at position pos of a request is stored at slot
   block_ids[pos // block_size] * block_size + pos % block_size;
4. logits (and the greedy argmax) only for the sequences whose step reaches the end of their
   tokens (num_computed_tokens + num_new_tokens == request.num_tokens): they sample.

Copies come before swap-outs, not after: the scheduler hands out a fork's copies with the plan
after the fork, and in that step the new sample (the most recently added running request) is the
first swap victim; its swap-out must carry the copied block. The order is otherwise free: the
scheduler never swaps in during a step that preempts, and a copy's blocks are held by the parent
and the sample when the plan is made, so no swap-in targets them; the forward pass, the only
writer of freed blocks, comes last.

The executor keeps each request's tokens (prompt ids from engine.tokens, then the tokens it
generates); it never changes scheduler state, which `Scheduler.finish_step` updates from the same
plan. A forked sample starts from its parent's tokens; a request preempted with recompute keeps
its tokens and re-feeds them.

Decode-only steps run at a padded batch size (the next of 1, 2, 4, ..., 256, up to max_num_seqs;
padding rows have slot -1 and context_len 0), replayed from a CUDA graph captured at start, or
eagerly with the same shapes when graphs are off or on the CPU. Steps with prefill tokens (and
decode-only steps above the largest decode graph) whose packed token count T fits a token bucket
(pagesim.cost.graphs.mixed_graph_token_sizes: 16, 32, ..., 1024, 1152, ..., 4096) run padded to the bucket, piecewise:
the forward pass between attentions (embed + layer 0's norm/QKV/RoPE/store; then per layer o_proj,
norm, MLP and the next layer's norm/QKV/RoPE/store; last o_proj, MLP and the final norm) replays one
CUDA graph per piece, all captured at start over static buffers sized for the largest bucket, and
each layer's attention runs eagerly between them at the step's real counts (the prefill launch for
the chunks, the decode launch for the decode rows), built once per step and re-issued per layer with the
layer's cache and scales (engine.kernels.launch: no Triton argument binding per layer). Padding tokens
have slot -1 (nothing stored), position 0, and their rows are never read. On the CPU or with graphs off the same padded pieces run
eagerly. Steps beyond the largest bucket run eagerly at their exact size. Block tables are always cdiv(max_model_len, block_size) wide, so
kernel shapes depend only on the batch size. The contiguous baseline needs nothing special: its
block tables are runs of consecutive block ids (a row gets the blocks its step's tokens reach, not the whole
reservation: `_table_rows`).

Timing: `execute` returns the wall time of the whole step (perf_counter, ending after a device
synchronisation), host-side preparation included, as a live engine would see it;
`last_gpu_time_s` is the same step's device time between two CUDA events (None on the CPU),
`last_move_gpu_time_s` the part of it the step's block moves took before the forward (0 without moves),
`last_queue_host_s` the host's time from the first of the two events to the step's work all queued (moves issued,
inputs prepared and uploaded, kernels launched or a graph replayed): the GPU is idle when a step starts, so the event
is stamped at once and that much of the device time can be the device waiting for the host (bench/host_phases.py),
and `last_sm_clock_mhz` the SM clock NVML reported while the step ran (engine.sm_clock; None on the CPU or without NVML).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from engine.host_tier import HostTier
from engine.kernels import copy_blocks, default_num_splits, paged_decode_attention
from engine.kernels.prefill import default_prefill_kernel
from engine.kernels.swap import cpu_cache_shape, measure_swap_bandwidth, swap_in, swap_out
from engine.sm_clock import cuda_sm_clock
from engine.model import AttentionMetadata, LlamaModel, kv_cache_shape, kv_cache_torch_dtype
from engine.tokens import prompt_token_ids
from pagesim.config import Config
# one rule each, shared with the cost model that prices the graphs
from pagesim.cost.graphs import graph_batch_sizes, mixed_graph_token_sizes, runs_decode_graph, runs_mixed_graph
from pagesim.utils import cdiv
from pagesim.request import Request
from pagesim.specs import ModelSpec


# ---- sizing the KV cache from the real device ---------------------------------------------------
def kv_block_bytes(spec: ModelSpec, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one block in the engine's cache (every layer, K and V), at the cache's dtype."""
    return int(np.prod(kv_cache_shape(spec, 1, block_size))) * torch.empty((), dtype=dtype).element_size()


def activation_reserve_bytes(spec: ModelSpec, dtype: torch.dtype, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Device memory to leave for one step's activations besides the KV cache and the weights.

    The widest eager step has max_num_batched_tokens tokens live at once in: hidden, residual and
    the normed input [T, H], QKV [T, (Hq + 2 Hkv) D], attention output [T, Hq D], gate/up [T, 2I] and
    its activation [T, I]; plus logits for up to max_num_seqs sampling rows (dtype and fp32 copies,
    and the CUDA-graph logits buffer). Counted once with 25% headroom, once more for the mixed-step
    graphs' private pool (the same tensors at the largest token bucket, held by the graphs) and
    512 MiB for the CUDA context's allocator slack.
    """
    s, t = spec, max_num_batched_tokens
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = 3 * s.hidden_size + (s.num_heads + 2 * s.num_kv_heads) * s.head_dim + s.num_heads * s.head_dim
    per_token += 3 * s.intermediate_size
    logits = max_num_seqs * s.vocab_size * (elem + 4 + 4)
    graph_pool = mixed_graph_token_sizes(t)[-1] * per_token * elem
    return int(1.25 * (t * per_token * elem + logits)) + graph_pool + 512 * 2**20


def num_gpu_blocks_for_device(config: Config, model: LlamaModel) -> int:
    """KV blocks that fit in the device's free memory now (weights loaded) x gpu_memory_utilization.

    Free memory comes from torch.cuda.mem_get_info, so other tenants of a shared GPU are
    respected; the activation reserve (activation_reserve_bytes) is taken off first.
    """
    if model.device.type != "cuda":
        raise ValueError("num_gpu_blocks_for_device needs the model on a CUDA device; give num_gpu_blocks instead")
    torch.cuda.synchronize(model.device)
    free, _total = torch.cuda.mem_get_info(model.device)
    reserve = activation_reserve_bytes(model.spec, model.dtype, config.max_num_batched_tokens, config.max_num_seqs)
    budget = free * config.gpu_memory_utilization - reserve
    cache_dtype = kv_cache_torch_dtype(config.kv_cache_dtype, model.dtype)
    blocks = int(budget // kv_block_bytes(model.spec, config.block_size, cache_dtype))
    if blocks < 1:
        raise ValueError(
            f"no room for the KV cache: {free / 2**30:.1f} GiB free on {model.device} after the weights, "
            f"x gpu_memory_utilization {config.gpu_memory_utilization}, leaves less than the "
            f"{reserve / 2**30:.2f} GiB activation reserve plus one block"
        )
    return blocks


def config_for_device(config: Config, model: LlamaModel) -> Config:
    """`config` with num_gpu_blocks measured on the model's device, unless the user gave num_gpu_blocks."""
    if config.num_gpu_blocks is not None:
        return config
    return config.replace(num_gpu_blocks=num_gpu_blocks_for_device(config, model))


# ---- per-request token state ---------------------------------------------------------------------
@dataclass(slots=True)
class _Tokens:
    ids: np.ndarray  # int64, capacity prompt_len + output_len
    n: int  # tokens so far: the prompt, then the generated ones
    prompt_len: int
    num_samples: int  # the request's n (parallel sampling)
    table: np.ndarray | None = None  # int32: table_of[:table_n], the block table as block_row last read it
    table_of: list | None = None
    table_n: int = 0

    def block_row(self, block_ids: list[int], k: int, width: int) -> np.ndarray:
        """The first k entries of the request's block table (`block_ids`, k <= width) as int32, kept from step to
        step: a KV-cache manager grows a table in place (append, extend) or replaces it by a new list (freed,
        swapped in, forked; pagesim.kv_manager), so only the blocks added since the last step are converted
        (a whole table's list-to-array copy grew with the context: ~0.08 ms a decode step of 16 rows over 33k
        tokens on an H100 host, bench/host_phases.py)."""
        n = self.table_n
        if block_ids is not self.table_of or n > len(block_ids):
            if self.table is None:
                self.table = np.empty(width, dtype=np.int32)
            self.table_of, self.table_n = block_ids, 0
            n = 0
        if k > n:
            self.table[n:k] = block_ids[n:k]
            self.table_n = k
        return self.table[:k]

    def append(self, token: int) -> None:
        if self.n == len(self.ids):
            self.ids = np.concatenate([self.ids, np.empty(max(16, len(self.ids)), dtype=np.int64)])
        self.ids[self.n] = token
        self.n += 1


@dataclass(slots=True)
class _DecodeGraph:
    graph: object  # torch.cuda.CUDAGraph
    logits: torch.Tensor  # [g, vocab] fp32, static output
    tokens: torch.Tensor  # [g] int64, static output


def _pack_aligned(parts: list[np.ndarray], dtype) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """One host buffer holding each part at a 16-byte-aligned offset, and each part's (start, end).

    Triton specializes a kernel on whether each pointer argument is 16-byte aligned, so views into
    one packed upload must start aligned, or the number of prefills and decodes in a step would pick
    a kernel variant (built mid-run on its first appearance: a stall of up to a second).
    """
    align = 16 // np.dtype(dtype).itemsize
    spans, start = [], 0
    for part in parts:
        spans.append((start, start + len(part)))
        start += -(-len(part) // align) * align
    buf = np.zeros(max(start, 1), dtype=dtype)
    for part, (a, b) in zip(parts, spans):
        buf[a:b] = part
    return buf, spans


@contextmanager
def _capture(graph, pool):
    """torch.cuda.graph without its per-capture gc.collect and empty_cache (hundreds of piecewise captures at
    start; vLLM skips them the same way), which free nothing here: captures run back to back, pool shared."""
    from unittest.mock import patch

    with patch("gc.collect", lambda *a: 0), patch("torch.cuda.empty_cache", lambda: None):
        with torch.cuda.graph(graph, pool=pool):
            yield


def fill_with_noise(kv_cache: torch.Tensor, seed: int = 0) -> None:
    """Write the same normal noise (sd 2, the magnitude of the random model's K/V) into every block of the cache
    [layers, 2, blocks, block_size, kv_heads, head_dim], in its dtype (fp8 saturates nothing at that size)."""
    g = torch.Generator(device=kv_cache.device).manual_seed(seed)
    shape = list(kv_cache.shape)
    shape[2] = 1
    noise = torch.randn(shape, generator=g, device=kv_cache.device, dtype=torch.float32).mul_(2).to(kv_cache.dtype)
    kv_cache.copy_(noise.expand_as(kv_cache))


class GPUExecutor:
    """Executes step plans on a LlamaModel with a paged KV cache; see the module docstring."""

    def __init__(self, config: Config, model: LlamaModel | None = None, *, device: str | torch.device | None = None,
                 dtype: torch.dtype = torch.bfloat16, seed: int = 0, cuda_graphs: bool = True,
                 keep_logits: bool = False, mixed_graphs: bool = True):
        if model is None:
            device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            model = LlamaModel.random(config.model_spec, device, dtype, seed)
        self.config = config
        self.model = model
        self.device = model.device
        self.is_cuda = self.device.type == "cuda"
        self.block_size = config.block_size
        self.num_gpu_blocks = config.resolved_num_gpu_blocks
        self.max_model_len = config.resolved_max_model_len
        model.ensure_positions(self.max_model_len)  # Config refuses a longer one unless allow_long_max_model_len
        self.max_blocks_per_seq = cdiv(self.max_model_len, self.block_size)
        self.vocab_size = model.spec.vocab_size

        self.kv_cache = model.allocate_kv_cache(self.num_gpu_blocks, self.block_size, config.kv_cache_dtype)
        # the attention kernel a prefill runs (summary.json and profiles record it: validate compares the two)
        self.prefill_kernel = default_prefill_kernel(self.kv_cache, config.model_spec.num_heads, model.dtype)
        self.cpu_cache: torch.Tensor | None = None
        if config.preemption_mode == "swap" and config.num_cpu_blocks > 0:
            shape = cpu_cache_shape(tuple(self.kv_cache.shape), config.num_cpu_blocks)  # block-major, pinned
            self.cpu_cache = torch.empty(shape, dtype=self.kv_cache.dtype, device="cpu", pin_memory=self.is_cuda)

        self.host_tier = HostTier(self.kv_cache, config.num_offload_blocks) if config.num_offload_blocks else None
        # swap-ins and host-tier loads through the copy engine where it reads this host's memory faster than the swap
        # kernel's own reads do (engine.kernels.swap: 31-34 against 45-55 GB/s on some hosts), timed once here as a
        # calibration times it (64 scattered blocks, ~10 ms), on the swap cache or host tier itself before any use
        self.swap_in_by: str | None = None  # "kernel" or "copies" once timed (swap_in_by_copies follows it)
        pinned = self.cpu_cache if self.cpu_cache is not None else getattr(self.host_tier, "cache", None)
        if self.is_cuda and pinned is not None and pinned.shape[0] >= 2:
            self.swap_in_by = measure_swap_bandwidth(self.kv_cache, repeats=3, cpu_cache=pinned)["swap_in_by"]
            if self.host_tier is not None:
                self.host_tier.by_copies = self.swap_in_by_copies

        self._tokens: dict[str, _Tokens] = {}
        self._fork_prefixes: dict[str, np.ndarray] = {}  # released parents' prompt + first token, for late forks
        self.keep_logits = keep_logits
        self.last_logits: dict[str, torch.Tensor] | None = {} if keep_logits else None
        self.last_gpu_time_s: float | None = None
        self.last_move_gpu_time_s: float | None = None  # of last_gpu_time_s, the block moves before the forward
        self.last_queue_host_s: float | None = None  # host time from the start event to the step's work queued
        self.last_sm_clock_mhz: int | None = None
        self._sm_clock = cuda_sm_clock(self.device) if self.is_cuda else None
        self.num_steps = 0
        self._noise_filled = False  # advance() fills the cache with noise once
        self.num_graph_steps = 0  # decode steps replayed from a CUDA graph
        self.num_graph_captures = 0  # CUDA graphs captured so far (all at start)
        self.num_mixed_padded_steps = 0  # prefill / mixed steps run padded to a token bucket, piecewise
        self.num_mixed_graph_steps = 0  # those of them replayed from the pieces' CUDA graphs

        # Decode-only steps: static buffers sized for the largest padded batch, shared by all graphs.
        self.decode_sizes = graph_batch_sizes(config.max_num_seqs)
        g, w = self.decode_sizes[-1], self.max_blocks_per_seq
        dev = self.device
        shapes = {"ids": ((g,), torch.int64), "pos": ((g,), torch.int64), "slots": ((g,), torch.int64),
                  "ctx": ((g,), torch.int32), "tables": ((g, w), torch.int32)}
        self._dec = {k: torch.zeros(shape, dtype=dt, device=dev) for k, (shape, dt) in shapes.items()}
        self._host = {k: torch.zeros(shape, dtype=dt, pin_memory=self.is_cuda) for k, (shape, dt) in shapes.items()}
        self._host_np = {k: t.numpy() for k, t in self._host.items()}
        self.graphs: dict[int, _DecodeGraph] = {}

        # Prefill and mixed steps up to the largest token bucket: padded, piecewise (mixed_graphs=False: exact, eager).
        self.mixed_sizes = mixed_graph_token_sizes(config.max_num_batched_tokens) if mixed_graphs else ()
        self.mixed_graphs: dict[int, list] = {}  # bucket -> one torch.cuda.CUDAGraph per piece
        if self.mixed_sizes:
            t, s = self.mixed_sizes[-1], model.spec
            self._mix = {"ids": torch.zeros(t, dtype=torch.int64, device=dev),
                         "pos": torch.zeros(t, dtype=torch.int64, device=dev),
                         "slots": torch.full((t,), -1, dtype=torch.int64, device=dev),
                         "q": torch.zeros((t, s.num_heads, s.head_dim), dtype=model.dtype, device=dev),
                         "o": torch.zeros((t, s.num_heads, s.head_dim), dtype=model.dtype, device=dev),
                         "res": torch.zeros((t, s.hidden_size), dtype=model.dtype, device=dev),
                         "out": torch.zeros((t, s.hidden_size), dtype=model.dtype, device=dev)}
            self._mix_host = torch.zeros((3, t), dtype=torch.int64, pin_memory=self.is_cuda)  # ids, pos, slots
        if self.is_cuda:
            self._ev_start = torch.cuda.Event(enable_timing=True)
            self._ev_end = torch.cuda.Event(enable_timing=True)
            self._ev_moved = torch.cuda.Event(enable_timing=True)
            if cuda_graphs:
                self._capture_graphs()

    @property
    def swap_in_by_copies(self) -> bool:
        """Swap-ins through the copy engine (the path timed faster at start), else by the swap kernel."""
        return self.swap_in_by == "copies"

    def describe(self) -> dict:
        """What ran the steps, for a run's summary.json."""
        return {
            "device": str(self.device),
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "prefill_kernel": self.prefill_kernel,
            "num_gpu_blocks": self.num_gpu_blocks,
            "num_cpu_blocks": 0 if self.cpu_cache is None else int(self.cpu_cache.shape[0]),
            "swap_in_by": self.swap_in_by,
            "cuda_graph_batch_sizes": sorted(self.graphs),
            "mixed_graph_token_sizes": sorted(self.mixed_graphs),
            "mixed_padded_token_sizes": list(self.mixed_sizes),
            "num_steps": self.num_steps,
            "num_graph_steps": self.num_graph_steps,
            "num_mixed_padded_steps": self.num_mixed_padded_steps,
            "num_mixed_graph_steps": self.num_mixed_graph_steps,
            "sm_clock_recorded": bool(self._sm_clock is not None and self._sm_clock.available),
        }

    # ---- tokens ----------------------------------------------------------------------------
    def tokens_of(self, request_id: str) -> list[int]:
        """The request's tokens so far: prompt ids, then the tokens it generated."""
        t = self._tokens[request_id]
        return t.ids[: t.n].tolist()

    def release(self, request_id: str) -> None:
        """Forget a finished request's tokens (execute() does it for the plan's finished_req_ids).

        A request with n > 1 keeps its prompt and first token, which a sample forked from it
        still needs if it first runs after its parent has finished. With keep_logits (tests),
        everything is kept for inspection.
        """
        if self.keep_logits:
            return
        t = self._tokens.pop(request_id, None)
        if t is not None and t.num_samples > 1:
            self._fork_prefixes[request_id] = t.ids[: t.prompt_len + 1].copy()
        if self.last_logits is not None:
            self.last_logits.pop(request_id, None)

    def _tokens_for(self, req: Request) -> _Tokens:
        t = self._tokens.get(req.request_id)
        if t is not None:
            if t.n != req.num_tokens:
                raise RuntimeError(f"request {req.request_id}: the executor holds {t.n} tokens but the scheduler "
                                   f"counts {req.num_tokens}; a step of this request ran without the executor")
            return t
        capacity = req.prompt_len + max(req.output_len, 1)
        ids = np.empty(capacity, dtype=np.int64)
        n = req.num_tokens
        if req.parent_id is not None:  # a forked sample: its parent's tokens at the fork
            parent = self._tokens.get(req.parent_id)
            src = parent.ids[: parent.n] if parent is not None else self._fork_prefixes.get(req.parent_id)
            if src is None or len(src) < n:
                raise RuntimeError(f"sample {req.request_id} needs the first {n} tokens of its parent "
                                   f"{req.parent_id}, which the executor does not hold")
            ids[:n] = src[:n]
        else:
            if req.num_output_tokens:
                raise RuntimeError(f"request {req.request_id} has {req.num_output_tokens} output tokens but the "
                                   "executor never ran it")
            ids[:n] = prompt_token_ids(req, self.vocab_size)
        t = self._tokens[req.request_id] = _Tokens(ids, n, req.prompt_len, req.n)
        return t

    # ---- one step ---------------------------------------------------------------------------
    def execute(self, plan) -> float:
        """Run one step plan; returns its wall duration in seconds (device work included)."""
        t0 = time.perf_counter()
        for request_id in plan.finished_req_ids:
            self.release(request_id)
        if self.is_cuda:
            self._ev_start.record()
        t_start = time.perf_counter()
        with torch.inference_mode():
            moves = self._move_blocks(plan)
            if moves and self.is_cuda:
                self._ev_moved.record()
            sampled = self._forward(plan) if plan.scheduled else None
            if self.host_tier is not None:
                self.host_tier.send()  # the stores' copies, issued once the forward is queued (HostTier)
            self.last_queue_host_s = time.perf_counter() - t_start
            if self.is_cuda:
                self._ev_end.record()
                self.last_sm_clock_mhz = self._sm_clock.read()  # while the GPU runs the step
            if sampled is not None:
                reqs, logits, tokens = sampled
                for req, token in zip(reqs, tokens.tolist()):  # .tolist() waits for the device
                    self._tokens[req.request_id].append(token)
                if self.last_logits is not None:
                    for i, req in enumerate(reqs):
                        self.last_logits[req.request_id] = logits[i].clone()
        if self.is_cuda:
            self._ev_end.synchronize()
            self.last_gpu_time_s = self._ev_start.elapsed_time(self._ev_end) / 1e3
            self.last_move_gpu_time_s = self._ev_start.elapsed_time(self._ev_moved) / 1e3 if moves else 0.0
        self.num_steps += 1
        return time.perf_counter() - t0

    def advance(self, plan) -> float:
        """Take the plan's step without computing it; returns its wall duration. For calibration steps that only
        build context (engine.calibration.run_calibration): the step's new tokens keep the K/V the cache holds (the
        first call fills the whole cache with noise of the computed values' size, once, so nothing reads unwritten
        memory) and each request that samples gets its last token again, so the requests go on exactly as computed
        ones."""
        t0 = time.perf_counter()
        if not self._noise_filled:
            self._noise_filled = True
            with torch.inference_mode():
                fill_with_noise(self.kv_cache)
        for request_id in plan.finished_req_ids:
            self.release(request_id)
        with torch.inference_mode():
            self._move_blocks(plan)
            if self.host_tier is not None:
                self.host_tier.send()
        for s in plan.scheduled:
            t = self._tokens_for(s.request)
            self._check(s, t)
            if s.num_computed_tokens + s.num_new_tokens == t.n:  # a decode, or a prefill's last chunk: samples
                t.append(int(t.ids[t.n - 1]))
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
        self.num_steps += 1
        return time.perf_counter() - t0

    def _move_blocks(self, plan) -> bool:
        """The plan's block moves (host tier, copies, swaps), queued before its forward; whether there were any."""
        if plan.blocks_to_load or plan.blocks_to_store:
            if self.host_tier is None:
                raise RuntimeError("the plan moves blocks to or from the host offload tier, but the executor has "
                                   "none (kv_offloading_size is 0)")
            self.host_tier.gather(self.kv_cache, plan.blocks_to_store)  # before the load can overwrite; sent after the forward
            self.host_tier.load(self.kv_cache, plan.blocks_to_load)
        if plan.blocks_to_copy:
            copy_blocks(self.kv_cache, torch.tensor(plan.blocks_to_copy, dtype=torch.int64))
        if plan.blocks_to_swap_out or plan.blocks_to_swap_in:
            if self.cpu_cache is None:
                raise RuntimeError("the plan swaps blocks but the executor has no CPU cache "
                                   "(preemption_mode is not 'swap' or swap_space is 0)")
            if plan.blocks_to_swap_out:
                swap_out(self.kv_cache, self.cpu_cache, torch.tensor(plan.blocks_to_swap_out, dtype=torch.int64))
            if plan.blocks_to_swap_in:
                swap_in(self.cpu_cache, self.kv_cache, torch.tensor(plan.blocks_to_swap_in, dtype=torch.int64),
                        self.swap_in_by_copies)
        return bool(plan.blocks_to_load or plan.blocks_to_store or plan.blocks_to_copy or plan.blocks_to_swap_out
                    or plan.blocks_to_swap_in)

    def _check(self, s, t: _Tokens) -> None:
        c, n = s.num_computed_tokens, s.num_new_tokens
        if n < 1 or c + n > t.n:
            raise RuntimeError(f"request {s.request_id}: step computes tokens {c}..{c + n - 1} but it has {t.n}")
        if len(s.request.block_ids) * self.block_size < c + n:
            raise RuntimeError(f"request {s.request_id}: {len(s.request.block_ids)} blocks cannot hold {c + n} tokens")

    def _forward(self, plan):
        prefills, decodes = [], []
        for s in plan.scheduled:
            t = self._tokens_for(s.request)
            self._check(s, t)
            (decodes if s.is_decode and s.num_new_tokens == 1 else prefills).append((s, t))
        prefill_tokens, largest = sum(s.num_new_tokens for s, _ in prefills), self.decode_sizes[-1]
        if runs_decode_graph(prefill_tokens, len(decodes), largest):  # pagesim.cost.graphs: the profile's rule too
            return self._decode_step(decodes)
        if runs_mixed_graph(prefill_tokens, len(decodes), largest, self.mixed_sizes[-1] if self.mixed_sizes else 0):
            total = prefill_tokens + len(decodes)
            return self._mixed_step(prefills, decodes, next(t for t in self.mixed_sizes if t >= total))
        return self._eager_step(prefills, decodes)

    def _table_rows(self, out: np.ndarray, steps) -> None:
        """Each step's block-table row: the blocks its tokens reach (the kernels read no further), into `out`'s
        zeroed rows, from the request's kept array (_Tokens.block_row). Not the request's whole table: a contiguous
        reservation holds max_model_len's blocks ahead (512 at 8,192 tokens)."""
        bs, w = self.block_size, self.max_blocks_per_seq
        for i, (s, t) in enumerate(steps):
            ids = s.request.block_ids
            k = min(cdiv(s.num_computed_tokens + s.num_new_tokens, bs), len(ids), w)
            out[i, :k] = t.block_row(ids, k, w)

    # ---- decode-only steps: padded, from a CUDA graph when one was captured ---------------------
    def _decode_step(self, decodes):
        b = len(decodes)
        g = next(size for size in self.decode_sizes if size >= b)
        bs = self.block_size
        h = self._host_np
        h["ids"][:g], h["pos"][:g], h["slots"][:g], h["ctx"][:g], h["tables"][:g] = 0, 0, -1, 0, 0
        for i, (s, t) in enumerate(decodes):
            pos = s.num_computed_tokens
            h["ids"][i], h["pos"][i], h["ctx"][i] = t.ids[pos], pos, pos + 1
            h["slots"][i] = s.request.block_ids[pos // bs] * bs + pos % bs
        self._table_rows(h["tables"], decodes)
        for k, buf in self._dec.items():  # pinned -> device, asynchronous; the step ends with a sync
            buf[:g].copy_(self._host[k][:g], non_blocking=True)
        graph = self.graphs.get(g)
        if graph is not None:
            graph.graph.replay()
            logits, tokens = graph.logits, graph.tokens
            self.num_graph_steps += 1
        else:
            logits, tokens = self._decode_forward(g)
        return [s.request for s, _ in decodes], logits[:b], tokens[:b]

    def _decode_forward(self, g: int):
        """Forward + logits + argmax of the first g rows of the decode buffers (what a graph captures)."""
        d = self._dec
        attn = AttentionMetadata(slot_mapping=d["slots"][:g], num_prefill_tokens=0, num_decode_tokens=g,
                                 context_lens_decode=d["ctx"][:g], block_tables_decode=d["tables"][:g])
        logits = self.model.compute_logits(self.model.forward(d["ids"][:g], d["pos"][:g], self.kv_cache, attn))
        return logits, logits.argmax(dim=-1)

    def _capture_graphs(self) -> None:
        """One graph per padded decode size, largest first, sharing one memory pool.

        Captured over padding only (slot -1, context 0): nothing is written to the cache.
        """
        for buf in self._dec.values():
            buf.zero_()
        self._dec["slots"].fill_(-1)
        pool = None
        with torch.inference_mode():
            for t in reversed(self.mixed_sizes):
                pool = self._capture_mixed(t, pool)
            for g in reversed(self.decode_sizes):
                self._decode_forward(g)  # warm-up: compiles kernels, settles cuBLAS workspaces
                torch.cuda.synchronize(self.device)
                graph = torch.cuda.CUDAGraph()
                with _capture(graph, pool):
                    logits, tokens = self._decode_forward(g)
                pool = graph.pool()
                self.graphs[g] = _DecodeGraph(graph, logits, tokens)
                self.num_graph_captures += 1
        torch.cuda.synchronize(self.device)

    def warm_transfers(self) -> int:
        """Run the swap kernel (engine.kernels.swap) in each direction a run can use, so that its first swap or
        host-tier load compiles nothing: GPU block 0 out to block 0 of the swap cache and back, and through the
        host tier (its bytes come back as they were; no run has used those host blocks yet). Returns the round
        trips made."""
        pair, trips = torch.tensor([[0, 0]], dtype=torch.int64), 0
        if self.cpu_cache is not None:
            swap_out(self.kv_cache, self.cpu_cache, pair)
            swap_in(self.cpu_cache, self.kv_cache, pair, self.swap_in_by_copies)
            trips += 1
        if self.host_tier is not None:
            self.host_tier.store(self.kv_cache, [(0, 0)])
            self.host_tier.load(self.kv_cache, [(0, 0)])
            trips += 1
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
        return trips

    def warm_decode_variants(self) -> int:
        """Launch the decode attention once for every split count an eager (mixed) step can use.

        A mixed step runs decode attention at its exact decode batch size b, and the split count
        (default_num_splits) picks kernel variants (the merge's padded split count, whether it is a
        multiple of 16); every b from 1 to max_num_seqs is covered here. Returns the variants launched.
        """
        spec, w = self.model.spec, self.max_blocks_per_seq
        seen = set()
        with torch.inference_mode():
            for b in range(1, self.config.max_num_seqs + 1):
                splits = default_num_splits(b, spec.num_kv_heads, w * self.block_size, self.device)
                if splits in seen:
                    continue
                seen.add(splits)
                q = torch.zeros((b, spec.num_heads, spec.head_dim), dtype=self.model.dtype, device=self.device)
                tables = torch.zeros((b, w), dtype=torch.int32, device=self.device)
                ctx = torch.ones((b,), dtype=torch.int32, device=self.device)
                paged_decode_attention(q, self.kv_cache[0, 0], self.kv_cache[0, 1], tables, ctx, self.model.scale,
                                       k_scale=self.model.k_scales[:1], v_scale=self.model.v_scales[:1])
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
        return len(seen)

    # ---- prefill and mixed steps -----------------------------------------------------------------
    def _capture_mixed(self, t: int, pool):
        """The pieces of bucket t, each a CUDA graph in the shared pool (over padding only: nothing is stored)."""
        for k in range(len(self.model.layers) + 1):  # warm-up: compiles kernels, settles cuBLAS workspaces
            self._mixed_piece(k, t)
        torch.cuda.synchronize(self.device)
        graphs = []
        for k in range(len(self.model.layers) + 1):
            graph = torch.cuda.CUDAGraph()
            with _capture(graph, pool):
                self._mixed_piece(k, t)
            pool = graph.pool()
            graphs.append(graph)
            self.num_graph_captures += 1
        self.mixed_graphs[t] = graphs
        return pool

    def _mixed_piece(self, k: int, t: int) -> None:
        """Piece k of the forward pass over the first t rows of the static buffers (see the module docstring):
        k = 0: embed + layer 0 up to attention; 0 < k < L: the rest of layer k-1 + layer k up to attention;
        k = L: the rest of the last layer + final norm. Reads ids/pos/slots, o and res; writes q and res, or out."""
        m, b = self.model, self._mix
        if k == 0:
            hidden, residual = m.embed[b["ids"][:t]], None
        else:
            hidden, residual = m.layer_output(k - 1, b["o"][:t], b["res"][:t])
        if k == len(m.layers):
            b["out"][:t].copy_(m.final_norm(hidden, residual))
            return
        q, residual = m.layer_input(k, hidden, residual, b["pos"][:t], self.kv_cache, b["slots"][:t])
        b["q"][:t].copy_(q)
        b["res"][:t].copy_(residual)

    def _mixed_step(self, prefills, decodes, t: int):
        """A step of at most t packed tokens, padded to t: the pieces' graphs (or the pieces, eagerly) with
        each layer's attention between them at the step's real sizes."""
        (ids, pos, slots), rows, reqs, attn = self._step_inputs(prefills, decodes, pad=True)
        n = len(ids)
        h = self._mix_host.numpy()
        h[0, :n], h[1, :n], h[2, :n] = ids, pos, slots
        h[0, n:t], h[1, n:t], h[2, n:t] = 0, 0, -1
        b = self._mix
        for i, name in enumerate(("ids", "pos", "slots")):  # pinned -> device, asynchronous; the step ends with a sync
            b[name][:t].copy_(self._mix_host[i, :t], non_blocking=True)
        graphs = self.mixed_graphs.get(t)
        # the step's attention launches, built once and issued per layer with the layer's cache and scales
        launches = self.model.attention_launches(b["q"][:t], self.kv_cache, attn, b["o"][:t])
        for k in range(len(self.model.layers) + 1):
            if k:
                layer = self.model.layer_cache(self.kv_cache, k - 1)
                for launch in launches:
                    launch(*layer)
            if graphs is not None:
                graphs[k].replay()
            else:
                self._mixed_piece(k, t)
        self.num_mixed_padded_steps += 1
        self.num_mixed_graph_steps += graphs is not None
        return self._sample(b["out"][:t], rows, reqs)

    def _eager_step(self, prefills, decodes):
        """A step beyond the largest token bucket (or any, with mixed_graphs=False): eager, at its exact size."""
        (input_ids, positions, _), rows, reqs, attn = self._step_inputs(prefills, decodes, pad=False)
        return self._sample(self.model.forward(input_ids, positions, self.kv_cache, attn), rows, reqs)

    def _sample(self, hidden, rows, reqs):
        if not reqs:
            return [], hidden.new_empty((0, self.vocab_size), dtype=torch.float32), rows
        logits = self.model.compute_logits(hidden[rows])
        return reqs, logits, logits.argmax(dim=-1)

    def _step_inputs(self, prefills, decodes, pad: bool):
        """The step's token rows (prefill chunks, then decodes) and attention metadata on the device.

        Returns ((ids, positions, slots), sample rows, sampling requests, AttentionMetadata); with pad the
        token rows stay host arrays (the caller writes them into its static buffers) and the metadata's
        slot_mapping is the static one."""
        bs, w = self.block_size, self.max_blocks_per_seq
        ids, pos, slots = [], [], []
        cu, ctx_p, ctx_d, sample_rows, reqs = [0], [], [], [], []
        for s, t in prefills:
            c, n = s.num_computed_tokens, s.num_new_tokens
            p = np.arange(c, c + n, dtype=np.int64)
            table = t.block_row(s.request.block_ids, cdiv(c + n, bs), w)
            ids.append(t.ids[c : c + n]), pos.append(p), slots.append(table[p // bs].astype(np.int64) * bs + p % bs)
            cu.append(cu[-1] + n)
            ctx_p.append(c + n)
            if c + n == t.n:
                sample_rows.append(cu[-1] - 1)
                reqs.append(s.request)
        num_prefill = cu[-1]
        d_ids, d_pos, d_slots = [], [], []  # one row per decode, made into arrays once
        for i, (s, t) in enumerate(decodes):
            c = s.num_computed_tokens
            d_ids.append(t.ids[c]), d_pos.append(c), d_slots.append(s.request.block_ids[c // bs] * bs + c % bs)
            ctx_d.append(c + 1)
            sample_rows.append(num_prefill + i)
            reqs.append(s.request)
        if decodes:
            ids.append(np.asarray(d_ids, dtype=np.int64)), pos.append(np.asarray(d_pos, dtype=np.int64))
            slots.append(np.asarray(d_slots, dtype=np.int64))
        tables_p = np.zeros((len(prefills), w), dtype=np.int32)
        tables_d = np.zeros((len(decodes), w), dtype=np.int32)
        self._table_rows(tables_p, prefills)
        self._table_rows(tables_d, decodes)
        tokens = (np.concatenate(ids), np.concatenate(pos), np.concatenate(slots))
        host64, at64 = _pack_aligned(([] if pad else list(tokens)) + [np.asarray(sample_rows)], np.int64)
        host32, at32 = _pack_aligned([np.asarray(cu), np.asarray(ctx_p), np.asarray(ctx_d), tables_p.ravel(),
                                      tables_d.ravel()], np.int32)
        dev64 = torch.from_numpy(host64).to(self.device, non_blocking=True)
        dev32 = torch.from_numpy(host32).to(self.device, non_blocking=True)
        parts64 = [dev64[a:b] for a, b in at64]
        rows = parts64.pop()
        if not pad:
            tokens = tuple(parts64)
        cu_t, ctx_p_t, ctx_d_t, tables_p_t, tables_d_t = (dev32[a:b] for a, b in at32)
        attn = AttentionMetadata(
            slot_mapping=self._mix["slots"] if pad else tokens[2], num_prefill_tokens=num_prefill,
            num_decode_tokens=len(decodes),
            cu_seqlens_q=cu_t, context_lens_prefill=ctx_p_t, block_tables_prefill=tables_p_t.view(-1, w),
            max_seqlen_q=max((s.num_new_tokens for s, _ in prefills), default=0),
            context_lens_decode=ctx_d_t, block_tables_decode=tables_d_t.view(-1, w))
        return tokens, rows, reqs, attn
