"""Ray start-up: how long a local Ray instance takes to start and run its first tasks, and on what.

Each repeat starts a fresh Python process per variant (so nothing is warm in the process), which imports ray,
starts a local instance of --num-cpus CPUs, runs one trivial task per CPU (the time until workers are up),
then shuts down. Variants:

  ray-defaults   ray.init(num_cpus=N): Ray's defaults
  pagesim        pagesim.sweep.start_ray(num_cpus=N): what `pagesim sweep`/`plan`, the dashboard and the tests
                 use (no dashboard modules, no metrics, no usage stats, workers at normal priority)
  pagesim-no-prestart  the same with RAY_prestart_worker_first_driver=0: raylet starts no worker when the
                 driver connects, so ray.init has less competition but the first tasks wait for their workers

The timeline (seconds after ray.init was called) comes from the first log line of each Ray process in the
session's log directory: GCS, the autoscaler monitor, the API server (the dashboard process, which ray.init
waits for), raylet, the log monitor, raylet's dashboard agent (which raylet waits for) and runtime-env agent,
raylet ready, the driver's core worker, the workers. The load average is recorded before and after: measure
on a quiet machine (`uptime`).

    python bench/ray_start.py [--repeats 5] [--num-cpus 2] [--out bench/results/ray-start-cpu2.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pagesim.outputs import check_output_file  # noqa: E402

VARIANTS = ("ray-defaults", "pagesim", "pagesim-no-prestart")
VARIANT_ENV = {"pagesim-no-prestart": {"RAY_prestart_worker_first_driver": "0"}}
# (timeline name, log file name pattern, line pattern or None for the file's first line)
EVENTS = [
    ("gcs_server", r"gcs_server\.out$", None),
    ("monitor", r"monitor\.log$", None),
    ("api_server", r"dashboard\.log$", None),
    ("raylet", r"raylet\.out$", None),
    ("log_monitor", r"log_monitor\.log$", None),
    ("dashboard_agent", r"dashboard_agent\.log$", None),
    ("runtime_env_agent", r"runtime_env_agent\.log$", None),
    ("raylet_ready", r"raylet\.out$", "Raylet of id"),
    ("driver_connected", r"python-core-driver-.*\.log$", None),
    ("first_worker", r"python-core-worker-.*\.log$", None),
]
STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def child(variant: str, num_cpus: int) -> dict:
    """One start-up in this (fresh) process; its times and timeline, as a dict."""
    t0 = time.perf_counter()
    import ray

    import_s = time.perf_counter() - t0
    from pagesim.sweep import start_ray  # imported before the clock starts (it imports pandas)

    wall0 = time.time()
    t = time.perf_counter()
    if variant.startswith("pagesim"):
        start_ray(num_cpus=num_cpus)
    else:
        ray.init(num_cpus=num_cpus)
    init_s = time.perf_counter() - t

    @ray.remote(num_cpus=1)
    def one() -> int:
        return os.getpid()

    pids = ray.get([one.remote() for _ in range(num_cpus)])
    ready_s = time.perf_counter() - t
    context = ray.get_runtime_context()
    logs = Path(context.get_temp_dir()) / context.get_session_name() / "logs"
    t = time.perf_counter()
    ray.shutdown()
    shutdown_s = time.perf_counter() - t
    return {"variant": variant, "import_s": import_s, "init_s": init_s, "first_tasks_s": ready_s - init_s,
            "ready_s": ready_s, "shutdown_s": shutdown_s, "worker_pids": len(set(pids)),
            "timeline_s": timeline(logs, wall0)}


def timeline(logs: Path, wall0: float) -> dict:
    """Seconds after ray.init was called at which each process wrote its first log line."""
    out = {}
    files = sorted(logs.iterdir()) if logs.is_dir() else []
    for name, pattern, line in EVENTS:
        times = []
        for f in files:
            if not re.search(pattern, f.name):
                continue
            for text in f.open(errors="replace"):
                m = STAMP.search(text)
                if m and (line is None or line in text):
                    stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    times.append(stamp - wall0)
                    break
        if times:
            out[name] = round(min(times), 3)
    return out


def summary(runs: list[dict]) -> dict:
    keys = ("import_s", "init_s", "first_tasks_s", "ready_s", "shutdown_s")
    out = {f"median_{k}": statistics.median(r[k] for r in runs) for k in keys}
    out.update({f"min_{k}": min(r[k] for r in runs) for k in ("init_s", "ready_s")})
    out.update({f"max_{k}": max(r[k] for r in runs) for k in ("init_s", "ready_s")})
    events = {e for r in runs for e in r["timeline_s"]}
    out["median_timeline_s"] = {e: round(statistics.median(r["timeline_s"][e] for r in runs if e in r["timeline_s"]), 3)
                                for e, _, _ in EVENTS if e in events}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="start-ups per variant (alternating)")
    ap.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local instance")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--out", default=None, help="JSON result (default: bench/results/ray-start-cpu<N>.json)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.num_cpus)))
        return 0
    variants = [v.strip() for v in args.variants.split(",")]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"--variants: unknown {', '.join(bad)}; expected some of {', '.join(VARIANTS)}")
    if args.repeats < 1 or args.num_cpus < 1:
        ap.error("--repeats and --num-cpus must be at least 1")
    args.out = args.out or str(ROOT / "bench" / "results" / f"ray-start-cpu{os.cpu_count()}.json")
    out = check_output_file(ap, args.out, args.force)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for i in range(args.repeats):
        for v in variants:
            proc = subprocess.run([sys.executable, __file__, "--child", v, "--num-cpus", str(args.num_cpus)],
                                  capture_output=True, text=True, timeout=300, cwd=ROOT,
                                  env={**os.environ, **VARIANT_ENV.get(v, {})})
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"{v} start-up {i + 1} failed (exit {proc.returncode})")
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            run["load_1min"] = os.getloadavg()[0]
            runs[v].append(run)
            print(f"{v:19s} #{i + 1}: import {run['import_s']:.2f} s, ray.init {run['init_s']:.2f} s, "
                  f"first {args.num_cpus} tasks {run['first_tasks_s']:.2f} s (load {run['load_1min']:.2f})", flush=True)
    result = {
        "bench": "ray_start", "num_cpus": args.num_cpus, "repeats": args.repeats,
        "variants": {v: {**summary(rs), "runs": rs} for v, rs in runs.items()},
        "target": "a few seconds of start-up (issue 15: tests run a local Ray instance bounded to 2 cores)",
        "cpu_count": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "platform": platform.platform(), "python": platform.python_version(),
        "ray": __import__("ray").__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": "python " + " ".join(sys.argv),
    }
    out.write_text(json.dumps(result, indent=2))
    for v, r in result["variants"].items():
        print(f"{v}: median ray.init {r['median_init_s']:.2f} s, ready for work {r['median_ready_s']:.2f} s; "
              f"timeline {r['median_timeline_s']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
