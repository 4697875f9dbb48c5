"""Warnings about runs that complete but may not mean what the user thinks.

Each is printed once (stderr, `warning: ...`) and recorded in summary.json under
`warnings`. Messages name the command-line flags.
"""

from __future__ import annotations

import dataclasses
import sys

import pandas as pd

from pagesim.config import Config
from pagesim.options import readable
from pagesim.specs import GIB

REJECTED_SHARE = 0.10  # warn when more than this share of requests is rejected
SWAP_SPACE = next(f.default for f in dataclasses.fields(Config) if f.name == "swap_space")  # where no command line
# says what was typed (the dashboard), a value other than this one counts as given


def config_warnings(config: Config, trace, swept=(), typed=None) -> list[str]:
    """Before the run: options the trace or the model make pointless. `swept`: the options a sweep varies (a sweep over
    preemption modes gives its recompute runs the swap space of its swap runs). `typed`: the options given on the
    command line (cli.typed_dests: `--swap-space 4` is given though 4 is the default); None without one."""
    out = []
    swap_given = ("swap_space" in typed or "swap_space" in swept) if typed is not None else config.swap_space != SWAP_SPACE
    if config.enable_prefix_caching and not {"prefix_hash_ids", "prompt_token_ids"} & set(trace.df.columns):
        out.append("--enable-prefix-caching is on, but the trace has neither prefix_hash_ids nor prompt_token_ids: "
                   "no request can hit another's cached prefix (prefix_cache_hit_rate stays 0; only a preempted "
                   "request's recomputation finds its own blocks, prefix_cache_recompute_hit_rate)")
    if config.preemption_mode == "swap" and config.num_cpu_blocks == 0:
        out.append(f"--preemption-mode swap with --swap-space {readable(config.swap_space)} GiB holds no host block "
                   f"({readable(config.block_bytes)} bytes each): nothing can be swapped out")
    if config.preemption_mode != "swap" and swap_given and config.swap_space != 0 and "preemption_mode" not in swept:
        out.append(f"--swap-space {readable(config.swap_space)} GiB has no effect with --preemption-mode "
                   f"{config.preemption_mode}: a preempted request's blocks are freed and recomputed, never swapped "
                   "(--preemption-mode swap uses it)")
    if config.policy == "priority" and "priority" not in trace.df.columns:
        out.append("--policy priority, but the trace has no priority field: every request has priority 0, so it "
                   "schedules as fcfs (trace synth --priority-levels K adds one)")
    limit, df = config.resolved_max_model_len, trace.df
    cut = (df["prompt_len"] < limit) & (df["prompt_len"] + df["output_len"] > limit)
    if cut.any():  # (a prompt of limit tokens or more is rejected, with its reason)
        k, lost = int(cut.sum()), int((df["prompt_len"] + df["output_len"] - limit)[cut].sum())
        out.append(f"{readable(k)} of {readable(len(df))} requests ({k / len(df):.1%}) have prompt + output beyond "
                   f"max_model_len {readable(limit)} (--max-model-len): their outputs are cut there, as vLLM cuts "
                   f"them ({readable(lost)} output tokens fewer than the trace's); requests.parquet's output_len is "
                   "the cut length")
    if config.kv_offloading_size and config.num_offload_blocks == 0:
        out.append(f"--kv-offloading-size {readable(config.kv_offloading_size)} GiB holds no host block "
                   f"({readable(config.block_bytes)} bytes each): the host tier is off")
    if config.num_gpu_blocks is not None:  # a cache of a given size (else sized to fit, by the utilization)
        kv, weights = config.num_gpu_blocks * config.block_bytes, config.weight_bytes_per_gpu
        memory = config.gpu_spec.memory_bytes
        if kv + weights > memory:
            tp = config.tensor_parallel_size
            out.append(f"the KV cache's {readable(config.num_gpu_blocks)} blocks (--num-gpu-blocks; {kv / GIB:.1f} GiB a GPU) "
                       f"and {config.model}'s weights ({weights / GIB:.1f} GiB a GPU at --tensor-parallel-size {tp}) "
                       f"exceed one {config.gpu}'s {memory / GIB:.1f} GiB: no such GPU holds this deployment, so the "
                       "run describes a larger one (fewer blocks or a larger --tensor-parallel-size would fit)")
    if config.max_num_batched_tokens < config.max_num_seqs:  # vLLM's SchedulerConfig refuses this at start-up
        out.append(f"--max-num-batched-tokens {readable(config.max_num_batched_tokens)} is below --max-num-seqs "
                   f"{readable(config.max_num_seqs)}, which vLLM refuses at start-up: at most "
                   f"{readable(config.max_num_batched_tokens)} of the {readable(config.max_num_seqs)} sequences can run "
                   "in one step, so the run describes a configuration vLLM would not serve (raise the first or lower the second)")
    window = config.model_spec.max_position_embeddings
    if config.max_model_len is not None and config.max_model_len > window:
        out.append(f"--max-model-len {readable(config.max_model_len)} is larger than {config.model}'s window "
                   f"({readable(window)} tokens): the model was not trained for such lengths")
    return out


def slo_warnings(config: Config, trace, slos) -> list[str]:
    """Before the run: a TPOT SLO that no request can be judged by. TPOT is the time between output tokens, so a
    request of one output token (its output cut at max_model_len) has none and meets the SLO (pagesim.slo): when no
    request has two, the SLO is met whatever the deployment, and goodput counts every finished request."""
    tpot = [s for s in slos if s.metric == "tpot"]
    if not tpot or not tpot_unjudged(config, trace):
        return []
    return [tpot_unjudged_warning(config, " and ".join(f"--slo {s}" for s in tpot), several=len(tpot) > 1)]


def tpot_unjudged(config: Config, trace) -> bool:
    """Whether no request of the trace has two output tokens within max_model_len, so none has a TPOT and a TPOT
    threshold judges nothing (slo_warnings; the dashboard's Serving view, whose TPOT SLO is per request)."""
    df = trace.df
    return not ((df["output_len"] >= 2) & (df["prompt_len"] + 2 <= config.resolved_max_model_len)).any()


def tpot_unjudged_warning(config: Config, named: str, several: bool = False) -> str:
    """tpot_unjudged's warning for the TPOT SLO(s) `named` ("--slo tpot_p99=0.05", or a page's control)."""
    holds = "these SLOs hold for every request and judge" if several else "the SLO holds for every request and judges"
    return (f"{named}: no request of the trace has two output tokens within max_model_len "
            f"{readable(config.resolved_max_model_len)} (--max-model-len), so none has a TPOT (the time between them): "
            f"{holds} nothing (ttft or e2e SLOs do)")


def baseline_warnings(config: Config, baselines) -> list[str]:
    """Before the run: options of the paged run that the contiguous baselines (--baseline) run without."""
    off = [flag for flag, on in (("--enable-prefix-caching", config.enable_prefix_caching),
                                 ("--kv-offloading-size", config.kv_offloading_size > 0)) if on]
    if not baselines or not off:
        return []
    return [f"{' and '.join(off)} {'apply' if len(off) > 1 else 'applies'} to the paged run only: the contiguous baselines "
            f"({', '.join(dict.fromkeys(baselines))}) reserve whole sequences and share no blocks, so they run "
            "without a prefix cache or host tier"]


def profile_warnings(config: Config, cost, subject: str = "--cost-model") -> list[str]:
    """Before the run: a profile cost model (`cost`, make_cost_model's) timed at another block size than the run's. Its
    kernel timings (decode attention walks the cache block by block) were measured at its calibration's block size
    only, and are applied unchanged at any other. A profile that records none (no config.block_size) is taken as
    timed at UNRECORDED_BLOCK_SIZE, calibrate's default, and the warning says so. `subject` names where the profile
    came from: the flag, or "profile" for validate's (a live run's own, or --cost-model)."""
    from pagesim.cost.profile import UNRECORDED_BLOCK_SIZE, ProfileCostModel

    if not isinstance(cost, ProfileCostModel):
        return []
    timed = cost.timed_block_size or UNRECORDED_BLOCK_SIZE
    if timed == config.block_size:
        return []
    record = ("its config.block_size" if cost.timed_block_size else
              f"it records no config.block_size: calibrate's default, {UNRECORDED_BLOCK_SIZE}, assumed")
    return [f"{subject} {cost.source} was timed at block size {timed} ({record}), but the run uses --block-size "
            f"{config.block_size}: its kernel timings, measured at {timed} tokens a block, are applied unchanged; "
            f"calibrate at this block size (calibrate --block-size {config.block_size}) or run at the "
            f"profile's (--block-size {timed})"]


def cluster_warnings(config: Config, replicas: int, router: str) -> list[str]:
    """Before the run: a --router that cannot act as named."""
    if replicas == 1 and router != "round-robin":
        return [f"--router {router} has no effect with --replicas 1: there is one engine to send requests to"]
    if replicas > 1 and router == "prefix-aware" and not config.enable_prefix_caching:
        return ["--router prefix-aware without --enable-prefix-caching: no replica caches a prefix, so it routes as "
                "least-outstanding-tokens"]
    return []


def result_warnings(run: str, requests: pd.DataFrame) -> list[str]:
    """After a run: every request rejected, or more than REJECTED_SHARE of them (with the most common reason)."""
    own = requests[requests["parent_id"] == ""] if "parent_id" in requests else requests
    rejected = own[own["state"] == "rejected"]
    n, k = len(own), len(rejected)
    if n == 0 or k == 0 or k <= REJECTED_SHARE * n:
        return []
    top = ""
    if "reason" in rejected and len(rejected):
        reasons = rejected["reason"].astype(str)
        kinds = reasons.str.replace(r"\d[\d,.]*", "#", regex=True)  # reasons of one kind differ in their figures
        kind = kinds.value_counts().index[0]
        alike = reasons[kinds == kind]
        example = alike.iloc[0] if alike.nunique() == 1 else f"figures differ by request; the first: {alike.iloc[0]}"
        top = f"; most often ({readable(len(alike))}): {example}"
    if k == n:
        return [f"{run}: every request ({readable(n)}) was rejected{top}"]
    return [f"{run}: {readable(k)} of {readable(n)} requests ({k / n:.1%}) were rejected{top}"]


def emit(warnings: list[str], seen: list[str]) -> None:
    """Print each warning not printed before and add it to `seen` (the list summary.json records)."""
    for text in warnings:
        if text not in seen:
            seen.append(text)
            print(f"warning: {text}", file=sys.stderr)
