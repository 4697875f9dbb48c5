"""Simulator speed, this tree against commit 9708ab1 (the last before issue #10), in the same run.

Each case replays one trace file with the same options in a fresh process per tree
(bench/sim_speed_worker.py, with that tree first on PYTHONPATH); the old tree is
extracted with `git archive` into a temporary directory. Reported per case and
tree: simulation wall time (trace loading and result writing excluded, each
timed on its own), steps, microseconds per step, peak RSS, and the ratio
old / new of the time per step. The two trees must agree on the steps and
per-request figures (exactness), which is checked and printed.

Cases: a loaded synthetic trace (sharegpt preset, 20k requests at 50 req/s); a prefix-heavy synthetic
trace (kshot preset, 10k requests at 20 req/s, prefix caching) priced by a calibrated H100 profile, with the
default memory and with 4,000 blocks (against --old only when it is not 9708ab1);
the Azure 2023 conversation trace with the default config and with Vidur's
comparison options (llama-2-7b, a100-80gb, 128 seqs, 4,096 tokens per batch);
Azure conv with two baselines (this tree only: steps.parquet size and read time); Azure conv priced by a
calibrated H100 profile (round 36's; against --old only when it is not 9708ab1);
with --million, a 1M-request synthetic trace (50 req/s) through replay's streaming path, this tree
only unless --million-old.

    python bench/sim_speed.py [--out bench/results/sim-speed.json] [--repeat N] [--million] [--only CASE] [--old COMMIT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pagesim.options import positive_int  # noqa: E402
from pagesim.outputs import check_output_file  # noqa: E402
OLD_COMMIT = "9708ab1"
AZURE_CONV = ROOT.parent / "shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv"
H100_PROFILE = ROOT / "results/profiles/h100-llama-3-8b-2026-12-06-r36h.json"
VIDUR_OPTIONS = ["--model", "llama-2-7b", "--gpu", "a100-80gb", "--max-num-seqs", "128",
                 "--max-num-batched-tokens", "4096"]
TARGETS = {"min_ratio": 4.0, "azure-conv-default_s": 1.0, "azure-conv-vidur-options_s": 1.7,
           "synthetic-1m_s": 120.0, "synthetic-1m_rss_mb": 1536.0}


def synth_trace(path: Path, num_requests: int, preset: str = "sharegpt", rate: float = 50.0) -> Path:
    if not path.exists():
        sys.path.insert(0, str(ROOT))
        from pagesim.traces import write_trace
        from pagesim.traces.synth import synthesize

        write_trace(synthesize(preset, num_requests=num_requests, rate=rate, seed=0), path)
    return path


def cpu_model() -> str | None:
    """The processor's model name (/proc/cpuinfo), so that runs on different machines can be told apart: the old
    tree's own time in the same run is the measure of the machine's speed."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def with_tree(tree: Path) -> str:
    """PYTHONPATH with `tree` first (the tree's pagesim wins), keeping the caller's entries after it."""
    return os.pathsep.join([str(tree)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def git_rev(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() + ("" if not subprocess.run(["git", "-C", str(tree), "diff", "--quiet", "HEAD"]).returncode
                                  else "+dirty")


def time_case(tree: Path, trace: Path, options: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=with_tree(tree), TQDM_DISABLE="1")
    cmd = [sys.executable, str(ROOT / "bench/sim_speed_worker.py"), str(trace), "--out", str(out)] + options
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"worker failed in {tree}:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = wall
    return result




READ_CODE = ("import sys, time; from pagesim.results import read_steps; t = time.perf_counter(); c = time.process_time(); "
             "read_steps(sys.argv[1]); print(time.perf_counter() - t, time.process_time() - c)")


def read_times(tree: Path, steps: Path, n: int) -> dict:
    """read_steps(steps.parquet), every column, in n fresh processes: wall and CPU seconds, fastest and median.
    (Reading a large table is mostly filling fresh memory, whose cost varies from process to process.)"""
    env = dict(os.environ, PYTHONPATH=with_tree(tree))
    runs = []
    for _ in range(n):
        done = subprocess.run([sys.executable, "-c", READ_CODE, str(steps)], capture_output=True, text=True, env=env,
                              check=True)
        runs.append(tuple(map(float, done.stdout.split())))
    wall, cpu = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
    return {"n": n, "wall_min_s": wall[0], "wall_median_s": wall[n // 2], "cpu_min_s": cpu[0], "cpu_median_s": cpu[n // 2],
            "wall_s": [r[0] for r in runs]}


CASE_NAMES = ("synthetic-20k", "kshot-10k-h100-profile", "kshot-10k-h100-profile-4000-blocks", "azure-conv-default",
              "azure-conv-vidur-options", "azure-conv-two-baselines-files", "azure-conv-h100-profile", "synthetic-1m")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/sim-speed.json")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists (committed results are never replaced by default)")
    ap.add_argument("--repeat", type=positive_int, default=1, help="runs per case and tree (the fastest is reported)")
    ap.add_argument("--million", action="store_true", help="also replay a 1M-request trace (this tree; slow)")
    ap.add_argument("--million-old", action="store_true", help="... and with the old tree too (~10 min, ~5 GB)")
    ap.add_argument("--only", action="append", default=[], choices=CASE_NAMES, metavar="CASE",
                    help=f"run only this case (repeatable): {', '.join(CASE_NAMES)}")
    ap.add_argument("--old", default=OLD_COMMIT, metavar="COMMIT",
                    help=f"the tree to compare against (default {OLD_COMMIT}, the issue's reference; the targets are against it)")
    ap.add_argument("--read-repeat", type=positive_int, default=7, help="fresh processes timing the read of steps.parquet")
    args = ap.parse_args()
    check_output_file(ap, args.out, args.force)  # before any work: committed results are never replaced by default
    work = Path(tempfile.mkdtemp(prefix="pagesim-bench-"))
    old = work / "old"
    cases = [("synthetic-20k", synth_trace(work / "sharegpt-20k.jsonl", 20_000), [], True)]
    # prefix-heavy (90.6% of prompt blocks shared) and priced by the profile, roomy and under memory pressure: the
    # block keys and the shared reads (against --old only when it is not 9708ab1, as the profile case below)
    kshot = synth_trace(work / "kshot-10k.jsonl", 10_000, "kshot", 20.0)
    kshot_options = ["--gpu", "h100", "--enable-prefix-caching", "--cost-model", str(H100_PROFILE)]
    cases += [("kshot-10k-h100-profile", kshot, kshot_options, args.old != OLD_COMMIT),
              ("kshot-10k-h100-profile-4000-blocks", kshot, kshot_options + ["--num-gpu-blocks", "4000"],
               args.old != OLD_COMMIT)]
    if AZURE_CONV.exists():
        cases += [("azure-conv-default", AZURE_CONV, [], True),
                  ("azure-conv-vidur-options", AZURE_CONV, VIDUR_OPTIONS, True),
                  ("azure-conv-two-baselines-files", AZURE_CONV, ["--baseline", "max", "--baseline", "oracle", "--stream"],
                   False),
                  # a calibrated profile (prefill makespan, shared reads): against --old only when it is not 9708ab1,
                  # which predates the profile's terms
                  ("azure-conv-h100-profile", AZURE_CONV, ["--gpu", "h100", "--cost-model", str(H100_PROFILE)],
                   args.old != OLD_COMMIT)]
    else:
        print(f"skipping the Azure cases: {AZURE_CONV} not found")
    if args.million or args.million_old:
        cases.append(("synthetic-1m", synth_trace(work / "sharegpt-1m.jsonl", 1_000_000), ["--stream"],
                      args.million_old))
    assert {c[0] for c in cases} <= set(CASE_NAMES), "a case missing from CASE_NAMES"
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    if any(with_old for *_, with_old in cases):  # the old tree only when a case compares against it
        old.mkdir()
        subprocess.run(f"git -C {ROOT} archive {args.old} | tar -x -C {old}", shell=True, check=True)
    report = []
    for name, trace, options, with_old in cases:
        entry = {"case": name, "trace": str(trace.name), "options": options}
        for label, tree in [("new", ROOT)] + ([("old", old)] if with_old else []):
            best = None
            for i in range(args.repeat):
                opts = [o for o in options if o != "--stream" or label == "new"]
                r = time_case(tree, trace, opts, work / f"{name}-{label}-{i}")
                if best is None or r["runs"][0]["sim_s"] < best["runs"][0]["sim_s"]:
                    best = r
            entry[label] = best
            if name == "azure-conv-two-baselines-files":
                best["steps_read_fresh"] = read_times(tree, work / f"{name}-{label}-0" / "steps.parquet", args.read_repeat)
                print(f"{name:26} {label}: read_steps in {args.read_repeat} fresh processes: "
                      f"{best['steps_read_fresh']['wall_min_s']:.2f} s fastest, "
                      f"{best['steps_read_fresh']['wall_median_s']:.2f} s median (CPU "
                      f"{best['steps_read_fresh']['cpu_min_s']:.2f} / {best['steps_read_fresh']['cpu_median_s']:.2f} s)")
            r0 = best["runs"][0]
            print(f"{name:26} {label}: sim {r0['sim_s']:7.2f} s (CPU {r0.get('sim_cpu_s', float('nan')):7.2f} s)  "
                  f"{r0['num_steps']:>8} steps  "
                  f"{r0['us_per_step']:6.1f} us/step  load {best['load_s']:5.2f} s  write {best['write_s']:5.2f} s  "
                  f"peak RSS {best['peak_rss_mb']:6.0f} MB  steps read {best['steps_read_with_derived_s']:.2f} s  "
                  f"files {best['files']}", flush=True)
        if "old" in entry:
            new_r, old_r = entry["new"]["runs"][0], entry["old"]["runs"][0]
            entry["ratio_per_step"] = old_r["us_per_step"] / new_r["us_per_step"]
            # per step, in CPU seconds of the simulating process (less sensitive to other load than wall time)
            entry["ratio_per_step_cpu"] = (old_r["sim_cpu_s"] / old_r["num_steps"]) / (new_r["sim_cpu_s"] / new_r["num_steps"])
            keys = ("num_steps", "num_finished", "num_rejected", "num_preemptions", "ttft_p50_s", "makespan_s")
            entry["same_results"] = all(new_r[k] == old_r[k] for k in keys)
            print(f"{name:26} old/new per step: {entry['ratio_per_step']:.2f}x wall, {entry['ratio_per_step_cpu']:.2f}x CPU  "
                  f"same results: {entry['same_results']}")
        report.append(entry)
    result = {
        "bench": "sim_speed",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpu": cpu_model(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
        "new_commit": git_rev(ROOT),
        "old_commit": args.old,
        "targets": TARGETS,
        "cases": report,
        "command": "python bench/sim_speed.py " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
