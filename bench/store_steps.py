"""What host-tier stores add to a live step beyond its prediction (issue #13 / #14, round 37). Needs no GPU.

The cost model prices a step's stores to the host tier as overlapped with its forward pass (their copies run on a side
stream). For each validated live run with stores: the graph decode steps without prefill or loads, split into those
with stores and those without; the mean measured / predicted of each, and of the steps with stores the excess over
the run's level without them, in ms (excess = (ratio - mean ratio without stores) x predicted), as a median overall
and by stored blocks, with a least-squares line excess = fixed + per_block x blocks. Steps right after a prefill
without stores run at the level (0.01-0.06 ms over it), so the excess is the stores'. The offload windows of rounds
18-36, recorded with the copies issued before the forward: 0.17-0.51 ms fixed + 2.9-6.2 us a block; round 37's
(offload-kshot-r37h), the copies issued after the forward is queued (engine.host_tier.HostTier.send): 0.30 ms + 2.3 us,
the fixed part the gather's (~0.18 ms of device time before the forward even for one block).

    python bench/store_steps.py [RUN ...] --out RESULT.json [--force]

RUN defaults to every run under results/live/ with a validation and a step with stores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pagesim.outputs import check_output_file  # noqa: E402

BINS = (0, 2, 5, 10, 20, 50, 1_000_000)


def store_excess(run: Path) -> dict | None:
    """The run's figures (None: no validation, or no graph decode step with stores)."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    path = run / "validation" / "validation_steps.parquet"
    if not path.exists():
        return None
    columns = ["num_store_blocks", "num_load_blocks", "num_prefill_tokens"]
    if not set(columns) <= set(pq.read_schema(run / "steps.parquet").names):  # a run recorded before the host tier
        return None
    v = pd.read_parquet(path, columns=["step", "kind", "measured_s", "predicted_s"]).set_index("step")
    s = pd.read_parquet(run / "steps.parquet", columns=columns)
    d = v.join(s)
    decode = d[(d.kind == "graph decode") & (d.num_prefill_tokens == 0) & (d.num_load_blocks == 0)]
    ratio = decode.measured_s / decode.predicted_s
    stores = decode.num_store_blocks > 0
    if not stores.any() or stores.all():
        return None
    level = float(ratio[~stores].mean())
    with_stores = decode[stores]
    excess_ms = (ratio[stores] - level) * with_stores.predicted_s * 1e3
    blocks = with_stores.num_store_blocks.to_numpy(dtype=float)
    per_block, fixed = np.polyfit(blocks, excess_ms.to_numpy(), 1) if len(set(blocks)) > 1 else (0.0, float(excess_ms.mean()))
    by_blocks = {}
    for lo, hi in zip(BINS, BINS[1:]):
        part = excess_ms[(blocks > lo) & (blocks <= hi)]
        if len(part):
            by_blocks[f"{lo + 1}-{hi}" if hi < BINS[-1] else f">{lo}"] = {"steps": int(len(part)),
                                                                          "median_ms": round(float(part.median()), 4)}
    return {"run": run.name, "steps_with_stores": int(stores.sum()), "steps_without": int((~stores).sum()),
            "ratio_with_stores": round(float(ratio[stores].mean()), 4), "ratio_without": round(level, 4),
            "excess_ms_median": round(float(excess_ms.median()), 4), "fit_fixed_ms": round(float(fixed), 4),
            "fit_per_block_ms": round(float(per_block), 5), "by_stored_blocks": by_blocks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="live run directories (default: every one under results/live)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args(argv)
    check_output_file(ap, args.out, args.force)
    runs = args.runs or sorted(p for p in (ROOT / "results" / "live").iterdir() if p.is_dir())
    rows = [r for r in (store_excess(run) for run in runs) if r is not None]
    for r in rows:
        print(f"{r['run']:<28} {r['steps_with_stores']:>4} steps with stores: x{r['ratio_with_stores']:.3f} of the "
              f"prediction against x{r['ratio_without']:.3f} without; excess median {r['excess_ms_median']:.3f} ms, "
              f"fit {r['fit_fixed_ms']:.3f} ms + {r['fit_per_block_ms'] * 1e3:.1f} us a block")
    Path(args.out).write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
