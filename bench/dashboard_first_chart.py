"""Replay default view: first-chart and all-charts times of new browser sessions, with main-thread CPU.

Starts `streamlit run app.py` from --repo (default: this checkout; give another worktree to compare a
commit), opens the page in headless Chromium once on the fresh server (cold: the simulations run) and
then --warm times in new browser contexts (new Streamlit sessions on the warm server), and records per
visit: seconds from navigation start to the first chart drawn (plotly or Vega-Lite) and to all of them
(as tests/test_browser.py measures them), and the renderer main thread's CPU time (Chrome trace thread
time) up to each, which depends far less on the machine's load than wall time. Prints one line per
visit and writes JSON to --out.

    python bench/dashboard_first_chart.py --warm 3 --out test-artifacts/browser/first_chart.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main_thread_cpu(trace_path: Path, until_ms: list[float]) -> list[float]:
    """CPU seconds of the renderer main thread's tasks from navigation start until each time (ms after it)."""
    events = json.loads(trace_path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    nav = max(e["ts"] for e in events if e.get("name") == "navigationStart")
    tasks = [e for e in events if e.get("ph") == "X" and e["name"] == "RunTask" and e["ts"] >= nav
             and names.get((e["pid"], e["tid"])) == "CrRendererMain"]
    return [sum(e.get("tdur", 0) for e in tasks if e["ts"] < nav + ms * 1000) / 1e6 for ms in until_ms]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(ROOT), help="checkout whose app.py is served (default: this one)")
    parser.add_argument("--warm", type=int, default=3, help="new browser sessions after the cold one")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")
    parser.add_argument("--charts", type=int, help="charts the default view draws (default: this checkout's "
                        "tests/test_browser.py PAGES['replay']; 4 for a --repo before the Vega-Lite trace chart)")
    parser.add_argument("--keep", help="folder to keep the Chrome traces (trace-N.json) and the server log in")
    parser.add_argument("--no-trace", action="store_true",
                        help="wall times only: no Chrome trace (tracing slows the browser), no CPU times")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from pagesim.outputs import check_output_file

    out = check_output_file(parser, args.out, args.force)
    from playwright.sync_api import sync_playwright

    import tests.test_browser as tb

    tb.REPO = Path(args.repo).resolve()  # the Server starts streamlit in tb.REPO
    visits = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.keep or tmp
        Path(tmp).mkdir(parents=True, exist_ok=True)
        server = tb.Server({}, Path(tmp) / "streamlit.log")
        try:
            server.wait_healthy()
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=tb.CHROMIUM, args=tb.LAUNCH_ARGS)
                for i in range(1 + args.warm):
                    tab = browser.new_page(viewport={"width": tb.WIDTH, "height": 1000})
                    trace = Path(tmp) / f"trace-{i}.json"
                    if not args.no_trace:
                        browser.start_tracing(page=tab, path=str(trace), categories=[
                            "devtools.timeline", "blink.user_timing", "disabled-by-default-devtools.timeline"])
                    tab.goto(f"{server.url}/", wait_until="domcontentloaded")
                    tab.wait_for_function(tb.CHARTS_DRAWN, arg=[args.charts or tb.PAGES["replay"], "__drawn"],
                                          timeout=tb.RENDER_TIMEOUT_MS, polling="raf")
                    first, drawn = tab.evaluate("window.__first"), tab.evaluate("window.__drawn")
                    if not args.no_trace:
                        browser.stop_tracing()
                    tab.close()
                    visit = {"visit": "cold" if i == 0 else "warm", "first_chart_s": round(first / 1000, 3),
                             "all_charts_s": round(drawn / 1000, 3), "load_average": os.getloadavg()[0]}
                    line = f"{visit['visit']}: first chart {first / 1000:.2f} s, all {drawn / 1000:.2f} s"
                    if not args.no_trace:
                        cpu_first, cpu_all = main_thread_cpu(trace, [first, drawn])
                        visit |= {"main_thread_cpu_first_s": round(cpu_first, 3), "main_thread_cpu_all_s": round(cpu_all, 3)}
                        line += f"; main-thread CPU {cpu_first:.2f} / {cpu_all:.2f} s"
                    visits.append(visit)
                    print(f"{line} (load {visit['load_average']:.1f})", flush=True)
                browser.close()
        finally:
            server.stop()
    record = {"repo": str(tb.REPO), "visits": visits, "cpu_count": os.cpu_count(), "platform": platform.platform(),
              "targets": "first chart <= 3 s warm (new browser session), <= 5 s cold",
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
