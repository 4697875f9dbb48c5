"""Engine configuration, with the names vLLM users already know.

One `Config` describes a run: the model and GPU it stands for, the KV-cache
geometry, the scheduler's budgets and the memory-management policy (paged, or
one of the contiguous reserve-ahead baselines that paging replaced).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np

from pagesim.errors import OptionError
from pagesim.options import readable
from pagesim.specs import DEFAULT_GPU, GIB, GPUSpec, ModelSpec, get_gpu, get_model

PREEMPTION_MODES = ("recompute", "swap")
POLICIES = ("fcfs", "priority")  # vLLM's SchedulerConfig.policy
KV_LAYOUTS = ("paged", "contiguous")
RESERVE_POLICIES = ("max", "pow2", "oracle")
# Bytes per K/V element of each cache dtype; "auto" stores the model's own dtype (None here).
KV_CACHE_DTYPE_BYTES = {"auto": None, "fp8": 1}


@dataclass(slots=True)
class Config:
    model: str = "llama-3-8b"
    gpu: str = DEFAULT_GPU
    block_size: int = 16
    num_gpu_blocks: int | None = None  # None: derived from gpu_memory_utilization
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    # As vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN: a max_model_len beyond the model's window is refused unless set.
    allow_long_max_model_len: bool = False
    tensor_parallel_size: int = 1  # GPUs per replica: weights and KV heads are split over them
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    preemption_mode: str = "recompute"
    policy: str = "fcfs"  # vLLM's scheduling policy: "fcfs", or "priority" (the trace's priority, lower first)
    swap_space: float = 4.0  # GiB of CPU memory for swapped-out blocks
    watermark: float = 0.0  # fraction of GPU blocks kept free when admitting new requests (vLLM's default: 0)
    kv_cache_dtype: str = "auto"  # "auto": the model's dtype; "fp8": e4m3 with per-layer K and V scales (vLLM)
    kv_offloading_size: float = 0.0  # GiB of host memory for the prefix cache's CPU tier (vLLM native offloading); 0: off
    # Memory-management policy: "paged", or "contiguous" with a reserve policy.
    kv_layout: str = "paged"
    reserve_policy: str = "max"
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()

    # ---- derived values -------------------------------------------------
    @property
    def model_spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def gpu_spec(self) -> GPUSpec:
        return get_gpu(self.gpu)

    @property
    def resolved_max_model_len(self) -> int:
        return self.max_model_len or self.model_spec.max_position_embeddings

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one cached K or V element: 1 for fp8, else the model's dtype."""
        return KV_CACHE_DTYPE_BYTES.get(self.kv_cache_dtype) or self.model_spec.dtype_bytes

    @property
    def block_bytes(self) -> int:
        """Bytes of one KV block on one GPU: its share of the KV heads (all of them without tensor parallelism)."""
        m = self.model_spec
        return m.kv_bytes_per_block(self.block_size, self.kv_dtype_bytes) * m.kv_heads_per_gpu(self.tensor_parallel_size) // m.num_kv_heads

    @property
    def weight_bytes_per_gpu(self) -> int:
        """Weights each GPU holds: every matrix (and the embedding) split over the tensor-parallel GPUs."""
        return -(-self.model_spec.weight_bytes // self.tensor_parallel_size)

    @property
    def usable_gpu_blocks(self) -> int:
        """Blocks that can hold KV: paged reserves block 0 as vLLM's null block; the contiguous baseline uses all."""
        return self.resolved_num_gpu_blocks - (1 if self.kv_layout == "paged" else 0)

    @property
    def resolved_num_gpu_blocks(self) -> int:
        """`num_gpu_blocks` if given, else (GPU memory x utilization - weights per GPU) / block bytes per GPU
        (validate() checks >= 1)."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        budget = self.gpu_spec.memory_bytes * self.gpu_memory_utilization - self.weight_bytes_per_gpu
        return int(budget // self.block_bytes)

    def gpu_memory_utilization_range(self) -> tuple[float, float] | None:
        """(lowest, highest) gpu_memory_utilization whose KV cache (resolved_num_gpu_blocks, solved for the
        utilization) is 1 to MAX_SIMULATED_BLOCKS blocks of this model, GPU, block size and tensor parallelism; the
        highest is exclusive below 1. None when no utilization in (0, 1] is."""
        memory, weights, block = self.gpu_spec.memory_bytes, self.weight_bytes_per_gpu, self.block_bytes
        low = (weights + block) / memory
        high = min(1.0, (weights + (MAX_SIMULATED_BLOCKS + 1) * block) / memory)
        return (low, high) if low <= high else None

    @property
    def num_cpu_blocks(self) -> int:
        return host_blocks(self.swap_space, self.block_bytes)

    @property
    def num_offload_blocks(self) -> int:
        """Blocks of the host tier behind the GPU prefix cache (0: no tier)."""
        return host_blocks(self.kv_offloading_size, self.block_bytes)

    @property
    def run_name(self) -> str:
        return "paged" if self.kv_layout == "paged" else f"contiguous-{self.reserve_policy}"

    def replace(self, **changes) -> "Config":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["resolved_num_gpu_blocks"] = self.resolved_num_gpu_blocks
        d["resolved_max_model_len"] = self.resolved_max_model_len
        d["num_cpu_blocks"] = self.num_cpu_blocks
        d["num_offload_blocks"] = self.num_offload_blocks
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    # ---- validation -------------------------------------------------------
    def validate(self) -> None:
        """Types, ranges and consistency; raises OptionError naming the field (the CLI shows it as the flag)."""
        self.model_spec, self.gpu_spec  # unknown names raise UserError
        for name in INT_FIELDS:
            value = getattr(self, name)
            if value is None and name in OPTIONAL_FIELDS:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                _fail(f"{{{name}}} must be an integer, got {value!r}")
            setattr(self, name, int(value))
        for name in FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                _fail(f"{{{name}}} must be a finite number, got {value!r}")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                _fail(f"{{{name}}} must be true or false, got {getattr(self, name)!r}")
        window = self.model_spec.max_position_embeddings
        checks = [
            (self.block_size >= 1, f"{{block_size}} must be a positive integer, got {self.block_size}"),
            (self.block_size <= window, f"{{block_size}} {self.block_size:,} is larger than {self.model}'s whole window ({window:,} tokens)"),
            (self.num_gpu_blocks is None or self.num_gpu_blocks >= 1, f"{{num_gpu_blocks}} must be at least 1, got {self.num_gpu_blocks}"),
            (0 < self.gpu_memory_utilization <= 1, f"{{gpu_memory_utilization}} must be in (0, 1], got {self.gpu_memory_utilization}"),
            (self.max_model_len is None or self.max_model_len >= 1, f"{{max_model_len}} must be at least 1, got {self.max_model_len}"),
            (
                self.max_model_len is None or self.allow_long_max_model_len or self.max_model_len <= window,
                f"{{max_model_len}} {self.max_model_len} exceeds {self.model}'s window of {window:,} positions "
                "(max_position_embeddings)",
                "; use a model with a longer window (e.g. llama-3.1-8b) or allow it explicitly ({allow_long_max_model_len})",
            ),
            (self.tensor_parallel_size >= 1, f"{{tensor_parallel_size}} must be at least 1, got {self.tensor_parallel_size}"),
            (self.tensor_parallel_size < 1 or self.model_spec.num_heads % self.tensor_parallel_size == 0,
             f"{{tensor_parallel_size}} {self.tensor_parallel_size} must divide {self.model}'s "
             f"{self.model_spec.num_heads} attention heads"),
            (self.tensor_parallel_size == 1 or self.gpu_spec.nvlink_bandwidth > 0,
             f"{{tensor_parallel_size}} > 1 needs a GPU with NVLink; {self.gpu} has none in its spec"),
            (self.max_num_seqs >= 1, f"{{max_num_seqs}} must be at least 1, got {self.max_num_seqs}"),
            (self.max_num_batched_tokens >= 1, f"{{max_num_batched_tokens}} must be at least 1, got {self.max_num_batched_tokens}"),
            (self.preemption_mode in PREEMPTION_MODES, f"{{preemption_mode}} must be one of {PREEMPTION_MODES}"),
            (self.policy in POLICIES, f"{{policy}} must be one of {POLICIES}"),
            (self.swap_space >= 0, f"{{swap_space}} must be a non-negative number of GiB, got {self.swap_space}"),
            (0 <= self.watermark < 1, f"{{watermark}} must be in [0, 1), got {self.watermark}"),
            (self.kv_cache_dtype in KV_CACHE_DTYPE_BYTES, f"{{kv_cache_dtype}} must be one of {tuple(KV_CACHE_DTYPE_BYTES)}"),
            (self.kv_offloading_size >= 0, f"{{kv_offloading_size}} must be a non-negative number of GiB, got {self.kv_offloading_size}"),
            (self.kv_offloading_size == 0 or self.enable_prefix_caching,
             "{kv_offloading_size} needs {enable_prefix_caching}: the host tier is keyed by prefix-cache block hashes"),
            (self.kv_layout in KV_LAYOUTS, f"{{kv_layout}} must be one of {KV_LAYOUTS}"),
            (self.reserve_policy in RESERVE_POLICIES, f"{{reserve_policy}} must be one of {RESERVE_POLICIES}"),
            (
                self.enable_chunked_prefill or self.max_num_batched_tokens >= self.resolved_max_model_len,
                "without chunked prefill, {max_num_batched_tokens} must be at least {max_model_len} "
                f"({self.max_num_batched_tokens} < {self.resolved_max_model_len})",
            ),
        ]
        for ok, message, *advice in checks:
            if not ok:
                _fail(message, *advice)
        self._check_block_counts()

    def _check_block_counts(self) -> None:
        """The simulator holds a Python object per block: counts beyond MAX_SIMULATED_BLOCKS would exhaust memory."""
        limit = SIMULATED_BLOCKS_LIMIT
        if self.num_gpu_blocks is not None and self.num_gpu_blocks > MAX_SIMULATED_BLOCKS:
            _fail(f"{{num_gpu_blocks}} {readable(self.num_gpu_blocks)}: the simulator holds {limit}")
        if self.num_gpu_blocks is None:
            blocks = self.resolved_num_gpu_blocks
            if blocks < 1:
                tp = f" per GPU at tensor_parallel_size {self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else ""
                _fail(f"model {self.model} ({self.weight_bytes_per_gpu / GIB:.1f} GiB of weights{tp}) leaves no KV-cache memory "
                      f"on {self.gpu} at {{gpu_memory_utilization}} {self.gpu_memory_utilization}",
                      ": raise it or pass {num_gpu_blocks}")
            if blocks > MAX_SIMULATED_BLOCKS:
                _fail(f"{self.model} on {self.gpu} at {{gpu_memory_utilization}} {self.gpu_memory_utilization} with "
                      f"{{block_size}} {self.block_size} gives {blocks:,} GPU blocks; the simulator holds {limit}",
                      ": pass {num_gpu_blocks}, a larger {block_size} or a smaller {gpu_memory_utilization}")
        if self.preemption_mode == "swap" and self.num_cpu_blocks > MAX_SIMULATED_BLOCKS:
            _fail(f"{{swap_space}} {readable(self.swap_space)} GiB is {readable(self.num_cpu_blocks)} host blocks of {self.block_bytes:,} bytes; "
                  f"the simulator holds {limit}")
        if self.num_offload_blocks > MAX_SIMULATED_BLOCKS:  # the host tier holds a free list of its block ids
            _fail(f"{{kv_offloading_size}} {readable(self.kv_offloading_size)} GiB is {readable(self.num_offload_blocks)} host blocks of "
                  f"{self.block_bytes:,} bytes; the simulator holds {limit}")


INT_FIELDS = ("block_size", "num_gpu_blocks", "max_model_len", "tensor_parallel_size", "max_num_seqs",
              "max_num_batched_tokens", "seed")
OPTIONAL_FIELDS = ("num_gpu_blocks", "max_model_len")
FLOAT_FIELDS = ("gpu_memory_utilization", "swap_space", "watermark", "kv_offloading_size")
BOOL_FIELDS = ("enable_chunked_prefill", "enable_prefix_caching")
MAX_SIMULATED_BLOCKS = 4_000_000
BYTES_PER_SIMULATED_BLOCK = 190  # a Block (slots dataclass) plus its free-queue entry, measured with tracemalloc
SIMULATED_BLOCKS_LIMIT = (f"at most {MAX_SIMULATED_BLOCKS:,} blocks "  # what every block-count bound says (Config, sweep's
                          f"(~{MAX_SIMULATED_BLOCKS * BYTES_PER_SIMULATED_BLOCK / 1e9:.1f} GB of simulator memory)")  # kv_cache_gib)


def host_blocks(gib: float, block_bytes: int) -> int:
    """Blocks of `block_bytes` in `gib` GiB of host memory (swap space, the host tier). Beyond ~1.7e299 GiB the bytes
    overflow a double (inf // b is NaN): the count is then made from whole GiB, so a size that large is refused by
    the block cap like any other, not failed by int(NaN)."""
    nbytes = gib * GIB
    return int(nbytes // block_bytes) if math.isfinite(nbytes) else int(gib) * (GIB // block_bytes)


def _fail(template: str, advice: str = "") -> None:
    raise OptionError(template, prefix="invalid config: ", advice=advice)
