"""Synthetic traces: arrival processes, length distributions, and presets that
approximate public workloads by their published summary statistics.

Same arguments and seed -> identical trace. Sources of every preset number are
in PRESETS' `source` strings and the README.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from pagesim.errors import OptionError, UserError
from pagesim.traces.blocks import BlockIds
from pagesim.traces.schema import MAX_INT, MAX_TIME, Trace, trace_from_frame

CV_RANGE = (0.01, 100.0)  # --cv: gamma inter-arrival gaps from near-periodic to bursts of simultaneous arrivals
MAX_CONTEXT = 8192  # a multiturn conversation ends before a later turn's prompt + output would exceed this
# A trace is built whole in memory (multiturn sorts its requests by arrival at the end): --num-requests is refused
# up front when the build would need more than MAX_SYNTH_BYTES, at these peak bytes per request (measured at 1e5-1e6
# requests, rounded up; kshot and multiturn keep a Python list of prefix hash ids per request).
BYTES_PER_REQUEST = {"independent": 600, "kshot": 6_000, "multiturn": 12_000}
MAX_SYNTH_BYTES = 8e9


@dataclass(frozen=True)
class LogNormal:
    """Integer lengths, lognormal with the given median, clipped to [1, max]; the shape is solved so the
    *clipped* mean equals `mean` (so the stated mean and median both hold). Needs median < mean < max."""

    mean: float
    median: float
    max: int

    def __post_init__(self):
        if not 0 < self.median < self.mean < self.max:
            raise UserError(f"lognormal lengths need 0 < median < mean < max, got {self.median}, {self.mean}, {self.max}")

    @cached_property
    def sigma(self) -> float:
        return _solve_sigma(self.mean, self.median, self.max)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.lognormal(math.log(self.median), self.sigma, n)
        return np.clip(np.round(x), 1, self.max).astype(np.int64)


def _clipped_mean(median: float, sigma: float, c: float) -> float:
    """E[min(X, c)] for X lognormal(ln median, sigma)."""
    phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    mu, lc = math.log(median), math.log(c)
    return math.exp(mu + sigma**2 / 2) * phi((lc - mu - sigma**2) / sigma) + c * (1 - phi((lc - mu) / sigma))


def _solve_sigma(mean: float, median: float, c: float) -> float:
    grid = np.arange(0.01, 6.0, 0.01)
    above = [s for s in grid if _clipped_mean(median, s, c) >= mean]
    if not above:
        raise UserError(f"no lognormal with median {median} clipped at {c} has mean {mean}")
    low, high = above[0] - 0.01, above[0]
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if _clipped_mean(median, mid, c) < mean else (low, mid)
    return high


@dataclass(frozen=True)
class Uniform:
    """Integer lengths uniform on [low, high], both included."""

    low: int
    high: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, n)


@dataclass(frozen=True)
class Fixed:
    value: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


def arrival_gaps(rng: np.random.Generator, n: int, rate: float, cv: float = 1.0) -> np.ndarray:
    """n inter-arrival gaps with mean 1/rate and coefficient of variation cv: gamma(1/cv^2); cv = 1 is Poisson."""
    shape = 1.0 / cv**2
    return rng.gamma(shape, 1.0 / (rate * shape), n)


def arrival_times(rng: np.random.Generator, n: int, rate: float, cv: float = 1.0) -> np.ndarray:
    """n arrival times from 0 with mean rate `rate` req/s."""
    return np.concatenate([[0.0], np.cumsum(arrival_gaps(rng, n - 1, rate, cv))])


@dataclass(frozen=True)
class Preset:
    prompt_len: LogNormal | Uniform | Fixed  # kshot: each request's own suffix; multiturn: each user message
    output_len: LogNormal | Uniform | Fixed  # multiturn: each reply, which joins the history
    source: str
    shape: str = "independent"  # or "kshot", "multiturn"


_SHAREGPT_IN, _SHAREGPT_OUT = LogNormal(161.31, 98, 1024), LogNormal(337.99, 205, 2048)
PRESETS = {
    "azure-conv": Preset(
        LogNormal(1154.7, 1020, 14050), LogNormal(211.1, 129, 1000),
        "Azure LLM inference trace 2023, conv (Patel et al., Splitwise, ISCA 2024): means, medians, maxima",
    ),
    "azure-code": Preset(
        LogNormal(2047.8, 1469, 7437), LogNormal(27.9, 13, 1899),
        "Azure LLM inference trace 2023, code (Patel et al., Splitwise, ISCA 2024): means, medians, maxima",
    ),
    "sharegpt": Preset(
        _SHAREGPT_IN, _SHAREGPT_OUT,
        "means: ShareGPT in the vLLM paper (Kwon et al., SOSP 2023, Fig. 11); medians assumed (sigma ~1); "
        "caps 1024 / 2048 after vLLM's benchmark filter (prompt <= 1024, prompt + output <= 2048)",
    ),
    "alpaca": Preset(
        LogNormal(19.31, 15.3, 2048), LogNormal(58.45, 41.2, 2048),
        "means: Alpaca in the vLLM paper (Kwon et al., SOSP 2023, Fig. 11); medians from the coefficients of "
        "variation in ShareChat (Yan et al. 2025, Table 1: 19.67 +- 15.19, 64.51 +- 64.85)",
    ),
    "kshot": Preset(
        _SHAREGPT_IN, _SHAREGPT_OUT,
        "4 shared prefixes of Uniform(1024, 2048) tokens (illustrative) + ShareGPT-like suffix and output",
        shape="kshot",
    ),
    "multiturn": Preset(
        _SHAREGPT_IN, _SHAREGPT_OUT,
        "Uniform(1, 6) turns (mean 3.5, ShareGPT's 3.51 turns per conversation in ShareChat Table 1), "
        "ShareGPT-like messages, 10 s mean think time (illustrative)",
        shape="multiturn",
    ),
}
KSHOT_PREFIXES, KSHOT_PREFIX_LEN = 4, Uniform(1024, 2048)
DEFAULT_HASH_BLOCK_SIZE = 16  # tokens per prefix hash id (trace synth --hash-block-size)
TURNS, THINK_TIME_S = Uniform(1, 6), 10.0
MULTITURN_WARMUP_S = 20 * THINK_TIME_S
# The warm-up's conversations (rate / 3.5 per second for MULTITURN_WARMUP_S) are built whatever --num-requests is,
# with their prefix hash ids and the later turns that reach past 0 s: ~2 MB and ~0.05 s of build per req/s of rate
# (measured at 100-1,000 req/s; at 1e14 req/s and up a gap no longer moves the warm-up's clock and it never ends).
WARMUP_BYTES_PER_RATE = 2e6
MAX_MULTITURN_RATE = 1_000.0


def synthesize(
    preset: str = "sharegpt",
    *,
    num_requests: int = 1000,
    rate: float = 10.0,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    prompt_len: LogNormal | Uniform | Fixed | None = None,
    output_len: LogNormal | Uniform | Fixed | None = None,
    hash_block_size: int = DEFAULT_HASH_BLOCK_SIZE,
    name: str | None = None,
    priority_levels: int = 0,
) -> Trace:
    """A synthetic trace of `num_requests` requests at a mean rate of `rate` req/s.

    arrival: "poisson", or "gamma" with coefficient of variation `cv` (> 1 is burstier than Poisson).
    prompt_len / output_len override the preset's length distributions.
    kshot and multiturn traces carry prefix_hash_ids at `hash_block_size` tokens per id.
    priority_levels > 0 adds a `priority` column, uniform in 0 .. priority_levels - 1 (for `--policy priority`),
    drawn from its own generator so every other column equals the trace without it.
    """
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    if arrival not in ("poisson", "gamma") or (arrival == "poisson" and cv != 1.0):
        raise OptionError(f"{{arrival}} must be 'poisson' (with {{cv}} 1) or 'gamma' with a {{cv}}, got {arrival!r} with {{cv}} {cv}")
    if num_requests < 1 or not rate > 0 or not cv > 0 or hash_block_size < 1:
        raise OptionError("{num_requests}, {rate}, {cv} and {hash_block_size} must be positive")
    if hash_block_size > MAX_INT:  # the schema's bound on a trace's hash_block_size
        raise OptionError(f"{{hash_block_size}} must be a positive integer up to {MAX_INT:,}, got {hash_block_size:,}")
    if not 0 <= priority_levels <= MAX_INT + 1:
        raise OptionError(f"{{priority_levels}} must be 0 (no priority column) or positive up to {MAX_INT + 1:,} "
                          f"(priorities 0..{MAX_INT:,}), got {priority_levels:,}")
    if not CV_RANGE[0] <= cv <= CV_RANGE[1]:  # gamma's shape 1/cv^2 underflows or overflows far outside it
        raise OptionError(f"{{cv}} must be in [{CV_RANGE[0]:g}, {CV_RANGE[1]:g}] (1: Poisson; larger: burstier), got {cv!r}")
    p = PRESETS[preset]
    if p.shape == "independent" and hash_block_size != DEFAULT_HASH_BLOCK_SIZE:  # silently ignored otherwise
        hashed = ", ".join(k for k, v in PRESETS.items() if v.shape != "independent")
        raise OptionError(f"{{hash_block_size}} {hash_block_size}: only presets with prefix hash ids ({hashed}) use "
                          f"it, and {preset} traces carry none; drop it")
    most = int(MAX_SYNTH_BYTES // BYTES_PER_REQUEST[p.shape])
    if num_requests > most:
        raise OptionError(f"{{num_requests}} {num_requests:,}: a {preset} trace is built in memory at about "
                          f"{BYTES_PER_REQUEST[p.shape]:,} bytes per request; at most {most:,} requests "
                          f"(~{MAX_SYNTH_BYTES / 1e9:g} GB) are allowed")
    if p.shape == "multiturn" and rate > MAX_MULTITURN_RATE:  # its warm-up grows with the rate, whatever the count
        raise OptionError(f"{{rate}} {rate:,g}: a multiturn trace builds every conversation started in the "
                          f"{MULTITURN_WARMUP_S:g} s before its first request (so it opens in steady state), about "
                          f"{MULTITURN_WARMUP_S * 2 / (TURNS.low + TURNS.high):.0f} per req/s of {{rate}} and "
                          f"{WARMUP_BYTES_PER_RATE / 1e6:g} MB in memory; at most {MAX_MULTITURN_RATE:,g} req/s "
                          "are allowed (replay's --time-scale compresses a trace further)")
    prompt, output = prompt_len or p.prompt_len, output_len or p.output_len
    rng = np.random.default_rng(seed)
    build = {"independent": _independent, "kshot": _kshot, "multiturn": _multiturn}[p.shape]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        df = build(rng, num_requests, rate, cv, prompt, output, BlockIds(hash_block_size))
    if priority_levels:
        df["priority"] = np.random.default_rng([seed, 1]).integers(0, priority_levels, len(df))
    last = float(df["arrival_time_s"].max())
    if not last < MAX_TIME:
        raise OptionError(f"{{rate}} {rate!r} (with {{cv}} {cv!r}) puts the last arrival at {last:.3g} s, "
                          f"beyond {MAX_TIME:.0e} s; use a larger {{rate}}")
    trace = trace_from_frame(df, name or f"{preset}-{num_requests}", hash_block_size)
    trace.summary.format = f"synthetic {preset} ({arrival}{'' if arrival == 'poisson' else f', cv {cv}'})"
    return trace


def _independent(rng, n, rate, cv, prompt, output, blocks) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [str(i) for i in range(n)],
            "arrival_time_s": arrival_times(rng, n, rate, cv),
            "prompt_len": prompt.sample(rng, n),
            "output_len": output.sample(rng, n),
        }
    )


def _kshot(rng, n, rate, cv, suffix, output, blocks) -> pd.DataFrame:
    """Each request = one of KSHOT_PREFIXES shared prefixes (chosen uniformly) + its own suffix."""
    prefix_lens = KSHOT_PREFIX_LEN.sample(rng, KSHOT_PREFIXES)
    choice = rng.integers(0, KSHOT_PREFIXES, n)
    suffixes = suffix.sample(rng, n)
    prompts = [blocks.prompt().extend(("prefix", k), prefix_lens[k]).extend(("request", i), s) for i, (k, s) in enumerate(zip(choice, suffixes))]
    return pd.DataFrame(
        {
            "request_id": [str(i) for i in range(n)],
            "arrival_time_s": arrival_times(rng, n, rate, cv),
            "prompt_len": [p.n_tokens for p in prompts],
            "output_len": output.sample(rng, n),
            "prefix_hash_ids": [p.hash_ids for p in prompts],
        }
    )


def _multiturn(rng, n, rate, cv, message, reply, blocks) -> pd.DataFrame:
    """Conversations start at rate / mean turns (the arrival process); turn t+1 follows turn t after an
    exponential think time and its prompt is the whole history (earlier messages and replies) + a new message.
    The process starts MULTITURN_WARMUP_S before the trace, so the trace opens in steady state (some early
    requests continue conversations whose first turns came before it). Conversations are added until the
    first n requests by arrival are settled."""
    rows: list[tuple] = []
    earliest: list[float] = []  # max-heap (negated) of the n earliest arrivals so far
    start, c = -MULTITURN_WARMUP_S, 0
    conv_rate = rate / ((TURNS.low + TURNS.high) / 2)
    while len(earliest) < n or start <= -earliest[0]:
        history, t_arrive = blocks.prompt(), start
        turns = int(TURNS.sample(rng, 1)[0])
        messages, replies = message.sample(rng, turns), reply.sample(rng, turns)
        for t in range(turns):
            history.extend(("message", c, t), messages[t])
            if t > 0 and history.n_tokens + replies[t] > MAX_CONTEXT:
                break
            if t_arrive >= 0:
                rows.append((f"{c}.{t}", t_arrive, history.n_tokens, int(replies[t]), list(history.hash_ids)))
                heapq.heappush(earliest, -t_arrive)
                if len(earliest) > n:
                    heapq.heappop(earliest)
            history.extend(("reply", c, t), replies[t])
            t_arrive += rng.exponential(THINK_TIME_S)
        start += float(arrival_gaps(rng, 1, conv_rate, cv)[0])
        c += 1
    df = pd.DataFrame(rows, columns=["request_id", "arrival_time_s", "prompt_len", "output_len", "prefix_hash_ids"])
    return df.sort_values("arrival_time_s", kind="stable").head(n).reset_index(drop=True)
