"""Model and GPU specifications: the shapes and rates the KV accounting and cost models need.

Figures come from the models' published configs (config.json on their model
cards) and the GPU vendors' datasheets. `memory_bytes` is the memory the
driver reports (what torch.cuda.get_device_properties shows), not the
marketing figure. `nvlink_bandwidth` is the NVLink figure per GPU and direction
(H100/H200 SXM: 900 GB/s both ways = 450 GB/s; A100 SXM: 600 GB/s = 300 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.errors import UserError

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """Llama 3.1's RoPE frequency scaling ("rope_type": "llama3" in config.json): wavelengths longer
    than original_max_position_embeddings / low_freq_factor are divided by `factor`, those shorter than
    original_max_position_embeddings / high_freq_factor are kept, and the band between is interpolated."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int = 2
    gated_mlp: bool = True  # SwiGLU (3 matrices) vs plain ReLU/GELU MLP (2)
    tie_embeddings: bool = False
    max_position_embeddings: int = 8192
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    rope_scaling: RopeScaling | None = None

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token across every layer, at the model's dtype."""
        return self.kv_bytes_per_token_at(self.dtype_bytes)

    def kv_bytes_per_token_at(self, dtype_bytes: int) -> int:
        """K and V of one token across every layer, stored at dtype_bytes per element (1: an fp8 cache)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    def kv_bytes_per_block(self, block_size: int, dtype_bytes: int | None = None) -> int:
        return self.kv_bytes_per_token_at(dtype_bytes or self.dtype_bytes) * block_size

    def kv_heads_per_gpu(self, tensor_parallel_size: int) -> int:
        """KV heads each GPU holds: split over the GPUs, replicated when there are more GPUs than heads (as vLLM)."""
        return max(1, self.num_kv_heads // tensor_parallel_size)

    @property
    def num_params(self) -> int:
        h, d = self.hidden_size, self.head_dim
        attn = h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        norms = 2 * h
        embed = self.vocab_size * h * (1 if self.tie_embeddings else 2)
        return self.num_layers * (attn + mlp + norms) + embed + h

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.dtype_bytes

    @property
    def flops_per_token(self) -> int:
        """Matmul FLOPs per token outside attention scores (2 per multiply-add); embedding lookup excluded."""
        return 2 * (self.num_params - self.vocab_size * self.hidden_size * (0 if self.tie_embeddings else 1))


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth: float  # bytes/s, datasheet
    bf16_flops: float  # dense FLOP/s, datasheet
    pcie_bandwidth: float  # bytes/s host<->device, one direction, datasheet
    sm_count: int = 0  # streaming multiprocessors (the engine's decode kernel sizes its grid to them); 0: unknown
    nvlink_bandwidth: float = 0.0  # bytes/s per GPU, one direction, datasheet (tensor parallelism); 0: none


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256),
        # Llama-3.1-8B: the Llama-3-8B shape with a 131,072-position window and llama3 RoPE scaling.
        ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_position_embeddings=131072,
                  rope_scaling=RopeScaling(8.0, 1.0, 4.0, 8192)),
        ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256),
        ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-6),
        ModelSpec("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6),
        ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, max_position_embeddings=32768, rope_theta=1000000.0),
        ModelSpec("opt-13b", 40, 5120, 40, 40, 128, 20480, 50272, gated_mlp=False, tie_embeddings=True, max_position_embeddings=2048),
        # A toy shape for CPU tests of the real engine.
        ModelSpec("toy", 2, 64, 4, 2, 16, 128, 256, max_position_embeddings=4096, rope_theta=10000.0),
    ]
}

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in [
        GPUSpec("h200", 143771 * 1024**2, 4.8e12, 989e12, 64e9, 132, 450e9),
        GPUSpec("h100", 81559 * 1024**2, 3.35e12, 989e12, 64e9, 132, 450e9),
        GPUSpec("a100-80gb", 81920 * 1024**2, 2.039e12, 312e12, 32e9, 108, 300e9),
    ]
}

DEFAULT_GPU = "h200"  # the card a run is simulated as unless told (Config.gpu, --gpu)


def gpu_for_device(device_name: str, memory_bytes: int) -> str | None:
    """The GPUS entry a CUDA device is (torch.cuda.get_device_name and its total memory), None for a device that is
    none of them. The specs are the SXM boards: "NVIDIA H200" -> h200, "NVIDIA H100 80GB HBM3" -> h100,
    "NVIDIA A100-SXM4-80GB" -> a100-80gb; the PCIe and NVL boards (other bandwidths, SM counts or power) are none."""
    name = device_name.upper()
    if "NVL" in name or "PCIE" in name:
        return None
    if "H200" in name:
        return "h200"
    if "H100" in name and ("HBM3" in name or "SXM" in name):
        return "h100"
    if "A100" in name and "SXM" in name and memory_bytes >= 70 * 1024**3:
        return "a100-80gb"
    return None


def _lookup(table: dict, name: str, what: str):
    key = name.lower()
    if key not in table:
        raise UserError(f"unknown {what} {name!r}; expected one of: {', '.join(sorted(table))}")
    return table[key]


def get_model(name: str) -> ModelSpec:
    return _lookup(MODELS, name, "model")


def get_gpu(name: str) -> GPUSpec:
    return _lookup(GPUS, name, "GPU")
