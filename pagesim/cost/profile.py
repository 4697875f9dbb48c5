"""A cost model fitted to step timings measured on a real GPU: linear in a few features of the step.

    forward = intercept + prefill_step * [any prefill tokens] + num_prefill_tokens + num_decode_seqs
              + decode_context_tokens + prefill_attn_pairs + tokens_over_knee * max(0, tokens - knee)
    (each term times its coefficient), plus swap and copy time from PCIe and HBM bandwidth as in the roofline.

Why these features:
- intercept: the weights are read once per step whatever its size, plus the step's fixed overhead;
- prefill_step: pure-decode steps replay a CUDA graph, steps with prefill run eagerly and pay the
  launches of every kernel once;
- num_prefill_tokens, num_decode_seqs: per-token work below the knee (K/V writes, norms, per-row host work);
- decode_context_tokens: decode attention streams each sequence's K/V (memory-bound);
- prefill_attn_pairs: prefill attention does work per (query, key) pair (compute-bound);
- tokens_over_knee: the dense matmuls turn from weight-bound to compute-bound once the step has more
  tokens than the knee (a few hundred for an 8B model on an H200), the roofline's max() as a hinge.
  The knee is chosen from a grid by the fit, not assumed.
Coefficients are kept non-negative, so more work is never predicted cheaper.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pagesim.cost.features import StepFeatures
from pagesim.cost.roofline import MEM_EFFICIENCY, PCIE_EFFICIENCY
from pagesim.errors import UserError
from pagesim.specs import get_gpu, get_model

if TYPE_CHECKING:
    import pandas as pd

FEATURES = ("intercept", "prefill_step", "num_prefill_tokens", "num_decode_seqs", "decode_context_tokens",
            "prefill_attn_pairs", "tokens_over_knee")
TRANSFERS = ("swap_s_per_byte", "copy_s_per_byte")
INPUT_COLUMNS = ("num_prefill_tokens", "num_decode_seqs", "decode_context_tokens", "prefill_attn_pairs")
KNEES = tuple(round(16 * 2 ** (i / 4)) for i in range(33))  # 16 .. 4096 tokens, 4 per octave
REQUIRED_KEYS = ("kind", "model", "gpu", "features", "coefficients", "knee_tokens")


def _terms(p_tokens, d_seqs, d_ctx, pairs, knee, maximum=max):
    """The feature values in FEATURES order, for scalars or (with np.maximum) numpy arrays."""
    return (1, (p_tokens > 0) * 1, p_tokens, d_seqs, d_ctx, pairs, maximum(p_tokens + d_seqs - knee, 0))


@dataclass
class ProfileCostModel:
    model: str
    gpu: str
    coefficients: dict[str, float]  # seconds per unit of each feature; TRANSFERS in seconds per byte
    knee_tokens: int
    block_size: int = 16
    fit: dict = field(default_factory=dict)
    created: str = ""
    source: str | None = None  # the file it was read from

    def __post_init__(self):
        self._c = tuple(float(self.coefficients.get(name, 0.0)) for name in FEATURES)
        block_bytes = get_model(self.model).kv_bytes_per_block(self.block_size)
        self.swap_s_per_block = self.coefficients["swap_s_per_byte"] * block_bytes
        self.copy_s_per_block = self.coefficients["copy_s_per_byte"] * block_bytes

    def _forward_time(self, p_tokens, d_seqs, d_ctx, pairs):
        t = 0.0
        for c, x in zip(self._c, _terms(p_tokens, d_seqs, d_ctx, pairs, self.knee_tokens)):
            t = t + c * x
        return t

    def step_time(self, f: StepFeatures) -> float:
        t = (f.num_swap_out_blocks + f.num_swap_in_blocks) * self.swap_s_per_block + f.num_copy_blocks * self.copy_s_per_block
        if f.num_prefill_tokens or f.num_decode_seqs:
            t += self._forward_time(f.num_prefill_tokens, f.num_decode_seqs, f.decode_context_tokens,
                                    f.prefill_attn_pairs)
        elif t:
            t += self._c[0]
        return t

    def decode_run_times(self, num_seqs: int, context_start: int, k: int) -> np.ndarray:
        """Durations of k pure-decode steps; step j reads context_start + num_seqs * (j + 1) keys."""
        if num_seqs == 0:
            return np.zeros(k)
        ctx = context_start + num_seqs * np.arange(1, k + 1, dtype=np.int64)
        return self._forward_time(0, num_seqs, ctx, 0)

    def describe(self) -> dict:
        return {"kind": "profile", "source": self.source, "model": self.model, "gpu": self.gpu,
                "knee_tokens": self.knee_tokens, "coefficients": dict(self.coefficients), "fit": dict(self.fit),
                "created": self.created}

    # ---- files ---------------------------------------------------------------------
    def to_json(self, path: str | Path) -> None:
        features = [f for f in FEATURES if f in self.coefficients]
        d = {"kind": "profile", "model": self.model, "gpu": self.gpu, "features": features,
             "coefficients": self.coefficients, "knee_tokens": self.knee_tokens, "fit": self.fit,
             "created": self.created}
        Path(path).write_text(json.dumps(d, indent=2) + "\n")

    @classmethod
    def from_json(cls, path: str | Path, block_size: int = 16) -> "ProfileCostModel":
        p = Path(path)
        try:
            d = json.loads(p.read_text())
        except (FileNotFoundError, IsADirectoryError):
            raise UserError(f"cost model {str(path)!r}: no such file; expected 'roofline' or a profile JSON "
                            "(written by ProfileCostModel.to_json)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"profile {p}: not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise UserError(f"profile {p}: expected a JSON object with keys {', '.join(REQUIRED_KEYS)}")
        missing = [k for k in REQUIRED_KEYS if k not in d]
        if missing:
            raise UserError(f"profile {p}: missing key(s) {', '.join(missing)}; expected {', '.join(REQUIRED_KEYS)}")
        if d["kind"] != "profile":
            raise UserError(f"profile {p}: 'kind' is {d['kind']!r}, expected 'profile'")
        unknown = [f for f in d["features"] if f not in FEATURES]
        if unknown:
            raise UserError(f"profile {p}: unknown feature(s) {unknown}; expected some of {list(FEATURES)}")
        coef = d["coefficients"]
        if not isinstance(coef, dict):
            raise UserError(f"profile {p}: 'coefficients' must be an object of feature name -> seconds")
        for name in [*d["features"], *TRANSFERS]:
            value = coef.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise UserError(f"profile {p}: coefficients[{name!r}] is {value!r}, expected a finite number")
        if isinstance(d["knee_tokens"], bool) or not isinstance(d["knee_tokens"], int) or d["knee_tokens"] < 0:
            raise UserError(f"profile {p}: 'knee_tokens' is {d['knee_tokens']!r}, expected a non-negative integer")
        try:
            model, gpu = get_model(str(d["model"])).name, get_gpu(str(d["gpu"])).name
            return cls(model, gpu, {k: float(coef[k]) for k in [*d["features"], *TRANSFERS]},
                       d["knee_tokens"], block_size, d.get("fit", {}), d.get("created", ""), str(p))
        except UserError as e:
            raise UserError(f"profile {p}: {e}") from None


# ---- fitting ---------------------------------------------------------------------------
def _design(rows, knee: int) -> np.ndarray:
    cols = [np.asarray(rows[c], dtype=np.float64) for c in INPUT_COLUMNS]
    return np.column_stack([np.broadcast_to(np.asarray(t, dtype=np.float64), cols[0].shape)
                            for t in _terms(*cols, knee, np.maximum)])


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Least squares with x >= 0: refit without the most negative coefficient until none is negative."""
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    active = list(range(a.shape[1]))
    while True:
        x_active = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        worst = int(np.argmin(x_active))
        if x_active[worst] >= 0 or len(active) == 1:
            break
        active.pop(worst)
    x = np.zeros(a.shape[1])
    x[active] = np.maximum(x_active, 0)
    return x / scale, [i for i in range(a.shape[1]) if i not in active]


def fit_profile(rows: "pd.DataFrame", model: str, gpu: str, *, test_fraction: float = 0.2, seed: int = 0,
                knees: tuple[int, ...] = KNEES) -> tuple[ProfileCostModel, dict]:
    """Fit a ProfileCostModel to measured steps; returns it and a report of its error on held-back rows.

    `rows` has the INPUT_COLUMNS and `duration_s` (seconds of the forward pass). Rows without tokens or
    with swaps/copies are left out (transfer costs come from the bandwidths). The fit minimises the
    squared relative error, so short steps count as much as long ones. A seeded permutation holds back
    `test_fraction` of the rows; the knee is the one in `knees` with the least training error.
    """
    missing = [c for c in (*INPUT_COLUMNS, "duration_s") if c not in rows]
    if missing:
        raise UserError(f"calibration rows lack column(s) {', '.join(missing)}; expected {', '.join(INPUT_COLUMNS)}, duration_s")
    m, g = get_model(model), get_gpu(gpu)
    keep = (np.asarray(rows["num_prefill_tokens"]) + np.asarray(rows["num_decode_seqs"])) > 0
    for c in ("num_swap_out_blocks", "num_swap_in_blocks", "num_copy_blocks"):
        if c in rows:
            keep &= np.asarray(rows[c]) == 0
    idx = np.flatnonzero(keep)
    y = np.asarray(rows["duration_s"], dtype=np.float64)
    bad = idx[~(y[idx] > 0) | ~np.isfinite(y[idx])]
    if len(bad):
        raise UserError(f"calibration rows: duration_s must be a positive number of seconds; row {bad[0]} has {y[bad[0]]!r}")
    n_test = int(round(len(idx) * test_fraction))
    perm = np.random.default_rng(seed).permutation(idx)
    test, train = perm[:n_test], perm[n_test:]
    if len(train) < 2 * len(FEATURES):
        raise UserError(f"calibration rows: {len(train)} usable training rows, need at least {2 * len(FEATURES)}")

    def relative_errors(knee, coef, sel):
        return _design(rows, knee)[sel] @ coef / y[sel] - 1

    best = None
    for knee in knees:
        a = _design(rows, knee)[train]
        coef, dropped = _nonnegative_lstsq(a / y[train, None], np.ones(len(train)))
        rms = float(np.sqrt(np.mean(relative_errors(knee, coef, train) ** 2)))
        if best is None or rms < best[0]:
            best = (rms, knee, coef, dropped)
    _, knee, coef, dropped = best
    ape = np.abs(relative_errors(knee, coef, test if len(test) else train))
    fit = {"mape": float(ape.mean()), "p90_ape": float(np.percentile(ape, 90)), "n_train": len(train),
           "n_test": len(test)}
    coefficients = dict(zip(FEATURES, map(float, coef)))
    coefficients["swap_s_per_byte"] = 1 / (g.pcie_bandwidth * PCIE_EFFICIENCY)
    coefficients["copy_s_per_byte"] = 2 / (g.hbm_bandwidth * MEM_EFFICIENCY)
    profile = ProfileCostModel(m.name, g.name, coefficients, knee, fit=fit,
                               created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    report = dict(fit, knee_tokens=knee, dropped=[FEATURES[i] for i in dropped], n_left_out=int((~keep).sum()),
                  train_rms_relative_error=best[0])
    return profile, report
