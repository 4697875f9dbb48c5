"""Exactness of the simulator across trees: a fingerprint of every result of 20 replays, this tree against another.

Each configuration is replayed with block events recorded and three block snapshots; its fingerprint is
sha256 of the step table, of the request table (every column, in order, values as stored), of the block
events in order and of the snapshots. With --old COMMIT the same replays run in that commit's tree
(extracted with `git archive`, in a fresh process) and the two lists are compared; exit 1 on any difference.

    python bench/sim_fingerprint.py [--old COMMIT] [--only NAME ...]

Configurations: the Azure 2023 conversation trace (../shared/traces/azure2023) with the default config and
Vidur's options, and its first 3,000 requests under memory pressure with prefix caching, with swapping,
contiguous `max`, and chunked prefill off; every bundled trace (traces/*.jsonl, first 1,500 requests) under
memory pressure with prefix caching, with swapping, and with prefix caching and a 0.5 GiB host tier (which
tells round 11's fast-path fix from e9608ed). Llama-3-8B on H200, roofline, unless noted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AZURE_CONV = ROOT.parent / "shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv"
SNAPSHOT_TIMES = (10.0, 100.0, 1000.0)


def cases() -> dict[str, tuple[Path, int | None, dict]]:
    """name -> (trace, first requests or None for all, Config options)."""
    out = {}
    if AZURE_CONV.exists():
        out["azure-default"] = (AZURE_CONV, None, {})
        out["azure-vidur"] = (AZURE_CONV, None, dict(model="llama-2-7b", gpu="a100-80gb", max_num_seqs=128,
                                                     max_num_batched_tokens=4096))
        out["azure-pressure-prefix"] = (AZURE_CONV, 3000, dict(num_gpu_blocks=1500, enable_prefix_caching=True))
        out["azure-swap"] = (AZURE_CONV, 3000, dict(num_gpu_blocks=1200, preemption_mode="swap", swap_space=0.05))
        out["azure-contiguous"] = (AZURE_CONV, 3000, dict(num_gpu_blocks=6000, kv_layout="contiguous",
                                                          reserve_policy="max"))
        out["azure-no-chunking"] = (AZURE_CONV, 3000, dict(num_gpu_blocks=1500, enable_chunked_prefill=False,
                                                           max_num_batched_tokens=8192))
    for path in sorted((ROOT / "traces").glob("*.jsonl")):
        out[f"{path.stem}-pressure-prefix"] = (path, 1500, dict(max_model_len=8192, num_gpu_blocks=800,
                                                                enable_prefix_caching=True))
        out[f"{path.stem}-swap"] = (path, 1500, dict(max_model_len=8192, num_gpu_blocks=800, preemption_mode="swap",
                                                     swap_space=0.05))
        out[f"{path.stem}-offload"] = (path, 1500, dict(max_model_len=8192, num_gpu_blocks=800,
                                                        enable_prefix_caching=True, kv_offloading_size=0.5))
    return out


def _frame_digest(df) -> str:
    """sha256 of a table's columns, values as stored; the memory categories' fractions (`*_frac`, which trees before
    d61a800 kept in the step table beside the counts they follow from) are left out, the counts hashed."""
    import numpy as np

    h = hashlib.sha256()
    for c in df.columns:
        if c.endswith("_frac"):
            continue
        v = df[c]
        h.update(c.encode())
        if v.dtype.kind in "iub":
            h.update(np.ascontiguousarray(v.to_numpy(np.int64)).tobytes())
        elif v.dtype.kind == "f":
            h.update(np.ascontiguousarray(v.to_numpy(np.float64)).tobytes())
        else:
            h.update(repr(v.tolist()).encode())
    return h.hexdigest()[:16]


def fingerprints(only: list[str]) -> list[dict]:
    """Run the replays in this process (the pagesim first on sys.path) and fingerprint them."""
    import numpy as np

    from pagesim.config import Config
    from pagesim.cost import make_cost_model
    from pagesim.request import requests_from_trace
    from pagesim.simulator import Simulation
    from pagesim.traces import load_trace

    out = []
    for name, (path, limit, options) in cases().items():
        if only and name not in only:
            continue
        trace = load_trace(path, limit=limit) if limit else load_trace(path)
        cfg = Config(**{"model": "llama-3-8b", "gpu": "h200", **options})
        sim = Simulation(requests_from_trace(trace), cfg, make_cost_model("roofline", cfg), record_events=True,
                         snapshot_times=SNAPSHOT_TIMES)
        t = time.process_time()
        result = sim.run()
        cpu = time.process_time() - t
        snaps = hashlib.sha256()
        for s in result.snapshots:
            snaps.update(repr((s.time_s, s.request_ids)).encode())
            for a in (s.owner, s.fill, s.ref_cnt, s.cached):
                snaps.update(np.ascontiguousarray(a).tobytes())
        out.append({"case": name, "num_steps": result.num_steps, "steps": _frame_digest(result.steps),
                    "requests": _frame_digest(result.requests),
                    "events": hashlib.sha256(repr(sim.scheduler.kv.events).encode()).hexdigest()[:16],
                    "snapshots": snaps.hexdigest()[:16], "sim_cpu_s": round(cpu, 3)})
        print(json.dumps(out[-1]), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", metavar="COMMIT", help="also fingerprint this commit's tree and compare")
    ap.add_argument("--only", action="append", default=[], help="only this configuration (repeatable)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # fingerprint the tree on sys.path
    args = ap.parse_args()
    if args.worker:
        fingerprints(args.only)
        return 0
    sys.path.insert(0, str(ROOT))
    print(f"this tree ({ROOT}):")
    new = fingerprints(args.only)
    if not args.old:
        return 0
    with tempfile.TemporaryDirectory(prefix="pagesim-fp-") as tmp:
        subprocess.run(f"git -C {ROOT} archive {args.old} | tar -x -C {tmp}", shell=True, check=True)
        print(f"{args.old}:")
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker"]
                              + [a for name in args.only for a in ("--only", name)],
                              env=dict(os.environ, PYTHONPATH=tmp), cwd=tmp, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the old tree failed:\n{done.stderr[-3000:]}")
        print(done.stdout, end="")
        old = [json.loads(line) for line in done.stdout.splitlines()]
    keys = ("case", "num_steps", "steps", "requests", "events", "snapshots")
    differ = [n["case"] for n, o in zip(new, old) if any(n[k] != o[k] for k in keys)]
    if len(new) != len(old) or differ:
        print(f"DIFFERENT: {differ or 'the configurations differ'}")
        return 1
    print(f"identical: {len(new)} configurations (step tables, request tables, block events, snapshots)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
