"""calibrate --refit labels the refitted profile with what its rows were timed with: the model, GPU and KV-cache dtype
that the rows' own profile (P.json beside P.steps.csv.gz; profile.json beside profile.steps.csv.gz in a live run
directory) records. Refitting llama-3-8b rows as llama-3-70b made a 70B profile 3.6x too fast that replay's
profile-vs-config check could not see."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pagesim.cli import main
from pagesim.config import Config
from pagesim.cost import make_cost_model

REPO = Path(__file__).resolve().parent.parent
STEPS = REPO / "results" / "profiles" / "h100-llama-3-8b-2026-12-06-r36h.steps.csv.gz"  # a committed calibration's rows
PROFILE = STEPS.with_name("h100-llama-3-8b-2026-12-06-r36h.json")  # its profile: llama-3-8b on h100, kv auto


def calibration(directory: Path, stem: str = "cal", **config_changes) -> Path:
    """The committed rows and their profile copied into `directory` (the profile's measured config changed)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = directory / f"{stem}.steps.csv.gz"
    shutil.copyfile(STEPS, rows)
    profile = json.loads(PROFILE.read_text())
    profile["config"].update(config_changes)
    profile.update({k: v for k, v in config_changes.items() if k in ("model", "gpu", "kv_cache_dtype")})
    (directory / f"{stem}.json").write_text(json.dumps(profile))
    return rows


@pytest.mark.parametrize("flags, named", [
    (["--model", "llama-3-70b"], "--model llama-3-70b: the --refit rows were timed with model llama-3-8b"),
    (["--gpu", "h200"], "--gpu h200: the --refit rows were timed with gpu h100"),
    (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype fp8: the --refit rows were timed with kv_cache_dtype auto"),
    (["--model", "llama-3-70b", "--gpu", "h200"],
     "--model llama-3-70b, --gpu h200: the --refit rows were timed with model llama-3-8b, gpu h100"),
])
def test_flags_that_disagree_with_the_rows_profile_are_refused_naming_both(tmp_path, capsys, flags, named):
    rows = calibration(tmp_path)
    out = tmp_path / "other.json"
    assert main(["calibrate", "--refit", str(rows), *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named} (their profile {tmp_path / 'cal.json'} records")
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_live_run_directorys_profile_is_the_companion_too(tmp_path, capsys):
    run = tmp_path / "run"
    rows = calibration(run, "profile")
    assert main(["calibrate", "--refit", str(rows), "--model", "llama-3-70b", "--out", str(tmp_path / "p.json")]) == 2
    assert f"(their profile {run / 'profile.json'} records it)" in capsys.readouterr().err


def test_omitted_flags_are_taken_from_the_rows_profile(tmp_path, capsys):
    # A calibration timed with an fp8 cache (labels changed on a copy: what matters is where the labels come from).
    rows = calibration(tmp_path, model="llama-3.1-8b", kv_cache_dtype="fp8")
    out = tmp_path / "refit.json"
    assert main(["calibrate", "--refit", str(rows), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err
    written = json.loads(out.read_text())
    assert (written["model"], written["gpu"], written["kv_cache_dtype"]) == ("llama-3.1-8b", "h100", "fp8")
    assert "warnings" not in written
    make_cost_model(str(out), Config(model="llama-3.1-8b", gpu="h100", kv_cache_dtype="fp8"))  # replay's check accepts it
    # Flags that agree with it are fine (spelled as they like: the record's spelling is kept).
    again = tmp_path / "again.json"
    assert main(["calibrate", "--refit", str(rows), "--model", "Llama-3.1-8B", "--gpu", "h100", "--kv-cache-dtype",
                 "fp8", "--out", str(again)]) == 0
    assert json.loads(again.read_text())["model"] == "llama-3.1-8b"
    assert "warning" not in capsys.readouterr().err


def test_rows_without_their_profile_keep_the_flags_with_one_warning(tmp_path, capsys):
    lone = tmp_path / "lone.steps.csv.gz"
    shutil.copyfile(STEPS, lone)
    out = tmp_path / "lone-refit.json"
    assert main(["calibrate", "--refit", str(lone), "--gpu", "h100", "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: --refit {lone}: the profile of these rows is unknown "
                                               f"(no {tmp_path / 'lone.json'} beside them)")
    assert err[0].endswith("cannot be checked against what was timed: model llama-3-8b (default), gpu h100 (--gpu), "
                           "kv_cache_dtype auto (default)")
    written = json.loads(out.read_text())
    assert (written["model"], written["gpu"], written.get("kv_cache_dtype", "auto")) == ("llama-3-8b", "h100", "auto")
    assert written["warnings"] == [err[0].removeprefix("warning: ")]


def test_a_refit_to_a_new_out_is_timed_as_the_rows_profile_records(tmp_path, monkeypatch, capsys):
    """--refit to a new --out takes how the rows were timed from their own profile, as it takes the labels: the
    engine's mixed-step token buckets (without them every graph mixed step was fitted and priced as an eager one: a
    refit of round 22's r22c rows to a new file gave held-out 3.56% and no graph mixed kind, against the profile's
    2.97%), its max_num_seqs (the decode graph sizes) and the measured swap link. Refitting over the profile itself
    keeps taking them from --out."""
    import engine.calibration as calibration_module

    rows = calibration(tmp_path, max_num_seqs=64)
    profile_path = tmp_path / "cal.json"
    profile = json.loads(profile_path.read_text())
    swap = {"swap_out_bytes_per_s": 5.0e10, "swap_in_bytes_per_s": 4.9e10, "num_blocks": 64, "block_bytes": 2097152}
    profile.update(mixed_graph_token_sizes=[16, 32, 64, 128], swap_bandwidth=swap)
    profile_path.write_text(json.dumps(profile))
    seen = []

    def fake_fit_and_write(rows, config, out, extras, command, mixed_graph_token_sizes=(), phases=None,
                           decode_programs_per_sm=()):
        seen.append((tuple(mixed_graph_token_sizes), config.max_num_seqs, extras.get("swap_bandwidth")))
        assert decode_programs_per_sm == ()  # the rows' profile was fitted without rounds of programs
        return json.loads(PROFILE.read_text())["report"]  # a fit's report, for the summary calibrate prints

    monkeypatch.setattr(calibration_module, "fit_and_write", fake_fit_and_write)
    assert main(["calibrate", "--refit", str(rows), "--out", str(tmp_path / "new.json")]) == 0
    assert seen[-1] == ((16, 32, 64, 128), 64, swap)
    # Rows without their profile: nothing to take (the flags' labels, the defaults' timing).
    lone = tmp_path / "lone.steps.csv.gz"
    shutil.copyfile(STEPS, lone)
    assert main(["calibrate", "--refit", str(lone), "--out", str(tmp_path / "lone.json")]) == 0
    assert seen[-1] == ((), 256, None)
    capsys.readouterr()


def test_a_refit_keeps_the_prefill_kernel_its_rows_were_timed_on(tmp_path):
    """The rows' profile says which prefill kernel they timed (calibrations record it since round 29; validate warns
    when a run's differs): a refit into a new --out keeps that record, and so does a refit over that profile."""
    rows = calibration(tmp_path)
    own = json.loads((tmp_path / "cal.json").read_text())
    own["prefill_kernel"] = "_gluon_prefill_kernel"
    (tmp_path / "cal.json").write_text(json.dumps(own))
    out = tmp_path / "refit.json"
    assert main(["calibrate", "--refit", str(rows), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["prefill_kernel"] == "_gluon_prefill_kernel"
    assert main(["calibrate", "--refit", str(rows), "--out", str(out), "--force"]) == 0  # over a profile: its records
    assert json.loads(out.read_text())["prefill_kernel"] == "_gluon_prefill_kernel"


def test_a_refit_to_a_new_out_records_the_measured_config(tmp_path):
    """The rows' profile's measured config (its block size among it) carries over to a refit into a new --out, so
    the refitted profile says at which block size it was timed (without it, replays at any block size were told
    calibrate's default, 16, was assumed) and a replay at another block size is warned about the right one."""
    from pagesim.cost.profile import ProfileCostModel
    from pagesim.run_warnings import profile_warnings

    rows = calibration(tmp_path, block_size=32)
    out = tmp_path / "refit.json"
    assert main(["calibrate", "--refit", str(rows), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["config"]["block_size"] == 32
    assert written["environment"] == json.loads(PROFILE.read_text())["environment"]
    cost = make_cost_model(str(out), Config(gpu="h100"))
    assert isinstance(cost, ProfileCostModel) and cost.timed_block_size == 32
    assert profile_warnings(Config(gpu="h100", block_size=32), cost) == []
    (warning,) = profile_warnings(Config(gpu="h100", block_size=16), cost)
    assert "was timed at block size 32 (its config.block_size)" in warning


def test_rows_this_version_cannot_replay_are_fitted_without_their_walks_with_one_warning(tmp_path, capsys):
    """Rows saved before the prefill walks were kept, of workloads since renamed or reshaped (every H200 calibration
    before round 14; results/profiles/h200-llama-3-8b.steps.csv.gz has skew-b47-*), cannot have the walks replayed:
    the refit fits without them and says so, on stderr and in the profile, into --out or over the profile alike (it
    refused before, so the committed H200 profiles could not be refitted at all)."""
    old = REPO / "results" / "profiles" / "h200-llama-3-8b.steps.csv.gz"
    shutil.copyfile(old, tmp_path / "h200.steps.csv.gz")
    shutil.copyfile(old.with_name("h200-llama-3-8b.json"), tmp_path / "h200.json")
    for out, force in ((tmp_path / "new.json", []), (tmp_path / "h200.json", ["--force"])):
        assert main(["calibrate", "--refit", str(tmp_path / "h200.steps.csv.gz"), "--out", str(out), *force]) == 0
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
        assert len(err) == 1 and "workload 'skew-b47-s128-l2048' is not one of this version's calibration " in err[0]
        assert err[0].endswith("the profile is fitted without them (prefill_tile_walks, prefill_longest_walk, "
                               "prefill_shared_tokens: their terms priced at 0); recalibrate with this version for them")
        written = json.loads(out.read_text())
        assert written["warnings"] == [err[0].removeprefix("warning: ")] and written["config"]["gpu"] == "h200"
        make_cost_model(str(out), Config(gpu="h200"))
