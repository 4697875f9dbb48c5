"""The progress bars redraw on a timer, not on every simulator event (issue #10 item 8); live's and calibrate's too."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pagesim.progress import NON_TTY_INTERVAL_S, TTY_INTERVAL_S, sim_progress

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "sharegpt-poisson-1k.jsonl"


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def _redraws(text: str) -> int:
    return sum(1 for part in text.replace("\r", "\n").split("\n") if part.strip())


def test_bar_redraws_at_most_every_half_second_however_often_it_is_called():
    out = FakeTerminal()
    t0 = time.perf_counter()
    with sim_progress(100.0, "paged", file=out) as progress:
        for i in range(200_000):
            progress(i * 100.0 / 200_000)
    elapsed = time.perf_counter() - t0
    # one draw at the start, one at the close, and at most one per interval in between
    assert _redraws(out.getvalue()) <= 3 + elapsed / TTY_INTERVAL_S, (elapsed, out.getvalue()[-300:])


def test_bar_to_a_non_terminal_redraws_rarely():
    out = io.StringIO()
    t0 = time.perf_counter()
    with sim_progress(100.0, "paged", file=out) as progress:
        for i in range(200_000):
            progress(i * 100.0 / 200_000)
    elapsed = time.perf_counter() - t0
    assert _redraws(out.getvalue()) <= 3 + elapsed / NON_TTY_INTERVAL_S


def _replay(tmp_path, env_extra):
    env = dict(os.environ, **env_extra)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pagesim", "replay", str(TRACE), "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    return done, time.perf_counter() - t0


def test_replay_writes_few_progress_lines_to_a_pipe(tmp_path):
    done, elapsed = _replay(tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert _redraws(done.stderr) <= 3 + elapsed / NON_TTY_INTERVAL_S, done.stderr[-500:]


def test_replay_runs_with_tqdm_disabled(tmp_path):
    done, _ = _replay(tmp_path, {"TQDM_DISABLE": "1"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert _redraws(done.stderr) == 0, done.stderr
    assert (tmp_path / "run" / "summary.json").exists()


def test_sweep_and_plan_run_with_tqdm_disabled(tmp_path):
    """Was: sweep and plan passed tqdm an explicit disable=False, which overrides TQDM_DISABLE, so their bar was drawn."""
    env = dict(os.environ, TQDM_DISABLE="1")
    common = [str(TRACE), "--limit", "20", "--backend", "local", "--num-cpus", "1"]
    for command in (["sweep", *common, "--grid", "block_size=16,32"],
                    ["plan", *common, "--slo", "ttft_p99=1", "--max-gpus", "1", "--grid", "max_num_seqs=8",
                     "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16", "--grid", "router=round-robin"]):
        done = subprocess.run([sys.executable, "-m", "pagesim", *command, "--out", str(tmp_path / command[0])],
                              capture_output=True, text=True, env=env, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert "config/s" not in done.stderr and "%|" not in done.stderr, done.stderr


# ---- the GPU commands' bars (live, calibrate): the same helper, checked on the CPU --------------------------------
@pytest.fixture
def bars(monkeypatch):
    """The keyword arguments of every tqdm bar made while the test runs."""
    import tqdm

    made = []

    class Recorded(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", Recorded)
    return made


def test_live_bar_to_a_non_terminal_redraws_rarely(tmp_path, capsys, bars):
    """Was: live drew a plain tqdm bar, redrawn every 0.1 s to a log file too (~1,000 lines for a 100 s run)."""
    from pagesim.cli import main

    rc = main(["live", str(ROOT / "traces" / "kshot-shared-prefix-500.jsonl"), "--allow-cpu", "--model", "toy",
               "--limit", "2", "--num-gpu-blocks", "64", "--out", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr().err
    live = [kw for kw in bars if str(kw.get("desc", "")).startswith("live")]
    assert len(live) == 1 and live[0].get("mininterval") == NON_TTY_INTERVAL_S, bars  # capsys: stderr is no terminal
    assert live[0].get("unit") == "req" and live[0].get("total") == 2


def test_calibrate_bar_to_a_non_terminal_redraws_rarely(capsys, bars):
    """Was: calibrate drew a plain tqdm bar, redrawn every 0.1 s to a log file too. Its bar (run_calibration_with_bar,
    the seam calibrate calls after the GPU's set-up) is the shared one."""
    from engine.calibration import NoTime, calibration_workloads, run_calibration_with_bar
    from pagesim.config import Config

    pick = [w for w in calibration_workloads(8192) if w[0] in ("prefill-16", "prefill-64")]
    config = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=4096)
    rows = run_calibration_with_bar(NoTime(), config, pick)
    assert set(rows["workload"]) == {"prefill-16", "prefill-64"}
    assert [(kw.get("desc"), kw.get("unit"), kw.get("total"), kw.get("mininterval")) for kw in bars] == [
        ("calibrate", "workload", 2, NON_TTY_INTERVAL_S)]
    assert "calibrate: 100%" in capsys.readouterr().err  # a non-terminal keeps the bar's last state


def test_live_calibrate_draws_calibrate_s_bar(tmp_path, monkeypatch):
    """Was: `live --calibrate` ran its ~100 s of calibration without a bar (run_calibration directly); now through
    run_calibration_with_bar, as `calibrate` does. The calibration itself is stopped at that seam (the toy model on the
    CPU would take minutes)."""
    import engine.calibration as calibration
    from pagesim.cli import main

    class Reached(Exception):
        pass

    seen = []

    def stop(executor, config, workloads, **options):
        seen.append(len(workloads))
        raise Reached

    real = calibration.run_calibration

    def unbarred(executor, *args, **kwargs):  # NoTime: the workloads' peak blocks, simulated before the model loads
        if not isinstance(executor, calibration.NoTime):
            raise AssertionError("live --calibrate ran run_calibration without the bar")
        return real(executor, *args, **kwargs)

    monkeypatch.setattr(calibration, "run_calibration_with_bar", stop)
    monkeypatch.setattr(calibration, "run_calibration", unbarred)
    with pytest.raises(Reached):
        main(["live", str(ROOT / "traces" / "kshot-shared-prefix-500.jsonl"), "--allow-cpu", "--model", "toy",
              "--limit", "2", "--num-gpu-blocks", "40000", "--calibrate", "--out", str(tmp_path / "run")])
    assert seen and seen[0] > 0
