"""Instructions of the simulator, this tree against another: a speed measure that this machine's noise cannot move.

Wall and CPU time of the same replay move by 10-25% from run to run on a shared 2-core machine (bench/sim_speed.py),
so a change of a few percent cannot be seen in them. Instructions executed can: each tree replays the Azure 2023
conversation trace (the default config, as sim_speed.py's `azure-conv-default` case) under valgrind's cachegrind in
a fresh process, with one thread for BLAS and Arrow and a fixed hash seed, and the count of the same process
stopped before the simulation (trace loaded, requests made) is subtracted: repeatable to about 0.01%. Instructions
are not time (memory stalls and page faults are not in them), so the timed bench stays the measure of the targets.

    python bench/sim_instructions.py [--old COMMIT] [--out bench/results/sim-instructions.json] [--force]

Needs valgrind (Debian: `apt-get install valgrind`) and ../shared/traces/azure2023; each tree takes ~1 minute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from sim_speed import AZURE_CONV, ROOT, git_rev, with_tree  # noqa: E402 (bench/ is the script's own directory)

from pagesim.outputs import check_output_file  # noqa: E402

WORKER = ROOT / "bench/sim_speed_worker.py"  # with --stop: the process ends after the requests are made, or the simulation
QUIET = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}  # no thread, no seed varies


def instructions(tree: Path, stop: str) -> int:
    """Instructions of one worker process (`stop`: setup or sim) with `tree` first on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=with_tree(tree), TQDM_DISABLE="1", **QUIET)
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, str(WORKER), str(AZURE_CONV), "--out", "unused", "--stop", stop]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the --stop {stop} process in {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def count(tree: Path) -> dict:
    setup, replay = instructions(tree, "setup"), instructions(tree, "sim")
    return {"setup": setup, "replay": replay, "simulation": replay - setup}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/sim-instructions.json")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists (committed results are never replaced by default)")
    ap.add_argument("--old", metavar="COMMIT", help="also count this commit's tree (extracted with git archive)")
    args = ap.parse_args()
    check_output_file(ap, args.out, args.force)  # before any work: committed results are never replaced by default
    if shutil.which("valgrind") is None:
        ap.error("valgrind not found on PATH (Debian: apt-get install valgrind)")
    if not AZURE_CONV.exists():
        ap.error(f"the Azure conv trace is not at {AZURE_CONV} (../shared/traces/azure2023)")
    trees = [("new", ROOT)]
    work = Path(tempfile.mkdtemp(prefix="pagesim-instructions-"))
    if args.old:
        old = work / "old"
        old.mkdir()
        subprocess.run(f"git -C {ROOT} archive {args.old} | tar -x -C {old}", shell=True, check=True)
        trees.append(("old", old))
    result = {"bench": "sim_instructions", "case": "azure-conv-default", "trace": AZURE_CONV.name,
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "python": platform.python_version(), "commit": git_rev(ROOT), "old": args.old,
              "command": "python " + " ".join([f"bench/{Path(sys.argv[0]).name}"] + sys.argv[1:])}
    for label, tree in trees:
        result[label] = count(tree)
        print(f"{label}: {result[label]['simulation'] / 1e9:.4f} G instructions in the simulation "
              f"({result[label]['setup'] / 1e9:.4f} G before it)")
    if args.old:
        result["new_over_old"] = result["new"]["simulation"] / result["old"]["simulation"]
        print(f"new / old: {result['new_over_old']:.4f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
