"""Instructions of the simulator, this tree against another: a speed measure that this machine's noise cannot move.

Wall and CPU time of the same replay move by 10-25% from run to run on a shared 2-core machine (bench/sim_speed.py),
so a change of a few percent cannot be seen in them. Instructions executed can: each tree replays the Azure 2023
conversation trace (the default config, as sim_speed.py's `azure-conv-default` case) under valgrind's cachegrind in
a fresh process, with one thread for BLAS and Arrow and a fixed hash seed, and the count of the same process
stopped before the simulation (trace loaded, requests made) is subtracted: repeatable to about 0.01%. Instructions
are not time (memory stalls and page faults are not in them), so the timed bench stays the measure of the targets.

    python bench/sim_instructions.py [--old COMMIT] [--cache-sim] [--out bench/results/sim-instructions.json] [--force]

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


# cachegrind's summary lines: instructions always; with --cache-sim, its simulated I1, D1 and last-level data-cache misses
# and (--branch-sim) mispredicted branches, which instructions alone do not weigh (README, Simulator speed, round 39)
EVENTS = {"instructions": r"I\s+refs:\s+([\d,]+)", "i1_misses": r"I1\s+misses:\s+([\d,]+)", "d1_misses": r"D1\s+misses:\s+([\d,]+)",
          "lld_misses": r"LLd misses:\s+([\d,]+)", "branches": r"Branches:\s+([\d,]+)",
          "mispredicts": r"Mispredicts:\s+([\d,]+)"}


def events(tree: Path, stop: str, cache_sim: bool = False) -> dict[str, int]:
    """cachegrind's counts for one worker process (`stop`: setup or sim) with `tree` first on PYTHONPATH:
    instructions, and with `cache_sim` the simulated cache misses and branch mispredictions too."""
    env = dict(os.environ, PYTHONPATH=with_tree(tree), TQDM_DISABLE="1", **QUIET)
    sim = ["--cache-sim=yes", "--branch-sim=yes"] if cache_sim else ["--cache-sim=no"]
    cmd = ["valgrind", "--tool=cachegrind", *sim, "--cachegrind-out-file=/dev/null",
           sys.executable, str(WORKER), str(AZURE_CONV), "--out", "unused", "--stop", stop]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    wanted = EVENTS if cache_sim else {"instructions": EVENTS["instructions"]}
    found = {name: re.search(pattern, done.stderr) for name, pattern in wanted.items()}
    if done.returncode != 0 or None in found.values():
        raise SystemExit(f"the --stop {stop} process in {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {name: int(m.group(1).replace(",", "")) for name, m in found.items()}


def count(tree: Path, cache_sim: bool = False) -> dict:
    setup, replay = events(tree, "setup", cache_sim), events(tree, "sim", cache_sim)
    out = {"setup": setup["instructions"], "replay": replay["instructions"],
           "simulation": replay["instructions"] - setup["instructions"]}
    if cache_sim:
        out["simulation_events"] = {name: replay[name] - setup[name] for name in EVENTS}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/sim-instructions.json")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists (committed results are never replaced by default)")
    ap.add_argument("--old", metavar="COMMIT", help="also count this commit's tree (extracted with git archive)")
    ap.add_argument("--cache-sim", action="store_true", help="also simulate the data caches and branch prediction "
                    "(cachegrind --cache-sim=yes --branch-sim=yes; ~3x slower): D1 / LLd misses and mispredicted "
                    "branches of the simulation, beside its instructions")
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
        result[label] = count(tree, args.cache_sim)
        print(f"{label}: {result[label]['simulation'] / 1e9:.4f} G instructions in the simulation "
              f"({result[label]['setup'] / 1e9:.4f} G before it)")
    if args.old:
        result["new_over_old"] = result["new"]["simulation"] / result["old"]["simulation"]
        print(f"new / old: {result['new_over_old']:.4f}")
        if args.cache_sim:
            result["old_over_new_events"] = {name: result["old"]["simulation_events"][name]
                                             / result["new"]["simulation_events"][name] for name in EVENTS}
            print("old / new: " + ", ".join(f"{name} {r:.2f}x" for name, r in result["old_over_new_events"].items()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
