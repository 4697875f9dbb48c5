"""Cost models: how long a step takes in the simulator.

A cost model has `step_time(StepFeatures) -> seconds`, the vectorised
`decode_run_times(num_seqs, context_start, k, max_context_start) -> array of k
durations` for the simulator's fast path (equal to k step_time calls: step j,
0-based, has decode_context_tokens = context_start + num_seqs * (j + 1) and
max_decode_context = max_context_start + j + 1), and `describe() -> dict`.
Two implementations: RooflineCostModel (from the specs, no GPU needed) and
ProfileCostModel (fitted to timings from a real GPU by fit_profile).
"""

from __future__ import annotations

from pagesim.config import Config
from pagesim.cost.features import StepFeatures
from pagesim.cost.profile import ProfileCostModel, fit_profile
from pagesim.cost.roofline import RooflineCostModel
from pagesim.errors import UserError

__all__ = ["StepFeatures", "RooflineCostModel", "ProfileCostModel", "fit_profile", "make_cost_model"]


def same_shape(a: str, b: str) -> bool:
    """Two models whose step costs are the same: equal but for name, context window and RoPE scaling
    (Llama-3-8B and Llama-3.1-8B), so a profile fitted for one prices the other."""
    import dataclasses

    from pagesim.specs import get_model

    def shape(name):
        return dataclasses.replace(get_model(name), name="", max_position_embeddings=0, rope_scaling=None)

    return shape(a) == shape(b)


def make_cost_model(spec: str, config: Config):
    """'roofline', or the path of a profile JSON fitted for the config's model and GPU."""
    if spec == "roofline":
        return RooflineCostModel(config)
    profile = ProfileCostModel.from_json(spec, block_size=config.block_size)
    want = (config.model_spec.name, config.gpu_spec.name)
    if (same_shape(profile.model, want[0]), profile.gpu) != (True, want[1]):
        raise UserError(f"profile {spec}: fitted for {profile.model} on {profile.gpu}, but the config runs "
                        f"{want[0]} on {want[1]}; use a profile of that pair, or --cost-model roofline")
    if config.tensor_parallel_size != 1:
        raise UserError(f"profile {spec}: timed on one GPU (the engine runs tensor parallel size 1), but the config "
                        f"runs --tensor-parallel-size {config.tensor_parallel_size}; a profile does not scale to "
                        "tensor parallelism: use --cost-model roofline for it")
    if profile.kv_cache_dtype != config.kv_cache_dtype:
        raise UserError(f"profile {spec}: fitted with kv_cache_dtype={profile.kv_cache_dtype}, but the config runs "
                        f"--kv-cache-dtype {config.kv_cache_dtype}; use a profile timed with that cache dtype, "
                        "or --cost-model roofline")
    return profile
