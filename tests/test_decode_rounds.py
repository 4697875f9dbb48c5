"""Rounds of the decode kernel's programs in the profile's graph formula (round 41).

A graph decode step's device time jumps where the decode launch's programs (rows x KV heads x splits) pass what the
SMs hold at once (decode_split.DECODE_PROGRAMS_PER_SM: 3 a SM for the split launch, 4 for the unsplit one, measured on
an H100), and the next rows fill that round at little more cost. A profile fitted with them (decode_programs_per_sm)
prices a graph step's longest walk at least as the rounds times the average program's walk; a profile without them
prices as before. `calibrate --decode-rounds` fits them (a model-dtype cache only), and a refit keeps the form its
rows' profile was fitted in."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pagesim.cli import main as cli_main
from pagesim.cost.decode_split import DECODE_PROGRAMS_PER_SM, decode_waves
from pagesim.cost.features import StepFeatures
from pagesim.cost.profile import ProfileCostModel, longest_keys, with_rounds
from pagesim.errors import UserError

REPO = Path(__file__).resolve().parent.parent
R41H = REPO / "results" / "profiles" / "h100-llama-3-8b-2026-12-06-r41h.json"


def test_rounds_count_the_programs_against_the_slots_of_their_launch():
    # unsplit: 4 a SM, 528 slots on 132 SMs; split: 3 a SM, 396
    assert [decode_waves(n, 8, 1, 132, (3, 4)) for n in (65, 66, 67, 132, 133)] == [1, 1, 2, 2, 3]
    assert [decode_waves(n, 8, 2, 132, (3, 4)) for n in (24, 25)] == [1, 2]
    rows, splits = np.array([65, 67, 24, 25]), np.array([1, 1, 2, 2])
    assert decode_waves(rows, 8, splits, 132, (3, 4)).tolist() == [1, 2, 1, 2]


def test_the_walk_is_the_rounds_of_the_average_program_or_the_longest_program():
    lanes = 64

    def walk(d_ctx, max_ctx, rows, splits, per_sm, maximum=max):
        """A graph step's `longest` as a profile with (per_sm) or without (()) rounds prices it."""
        longest = longest_keys(d_ctx, max_ctx, splits, lanes, maximum)
        return with_rounds(longest, d_ctx, rows, splits, 8, 132, per_sm, maximum) if per_sm else longest

    # a uniform batch one program past a round walks two rounds of its programs; within one, the form before them
    assert walk(67 * 2560, 2560, 67, 1, (3, 4)) == 2 * 2560
    assert walk(65 * 2560, 2560, 65, 1, (3, 4)) == longest_keys(65 * 2560, 2560, 1, lanes)
    # without rounds: the form before them
    assert walk(67 * 2560, 2560, 67, 1, ()) == longest_keys(67 * 2560, 2560, 1, lanes) < 2 * 2560
    # one long sequence among short ones: its program is the longest, whatever the rounds
    skew = 66 * 128 + 6144
    assert walk(skew, 6144, 67, 1, (3, 4)) == 6144
    # arrays as scalars
    d, m, n = np.array([67 * 2560.0, skew]), np.array([2560.0, 6144.0]), np.array([67.0, 67.0])
    assert walk(d, m, n, np.array([1, 1]), (3, 4), np.maximum).tolist() == [5120, 6144]


@pytest.fixture(scope="module")
def profiles():
    old = ProfileCostModel.from_json(R41H)
    return old, replace(old, decode_programs_per_sm=DECODE_PROGRAMS_PER_SM)


def uniform(rows: int, context: int) -> StepFeatures:
    return StepFeatures(num_decode_seqs=rows, decode_context_tokens=rows * context, max_decode_context=context)


def test_a_step_past_a_round_costs_a_round_more(profiles):
    old, rounds = profiles
    c = 2560
    unsplit = rounds.coefficients["graph_max_context_1_split"]
    # the 128-row graph: 65 rows fill one round of 528 programs, 67 start a second, whose walk (2 x c keys) replaces
    # the form's C / lanes (67 c / 64)
    lanes = rounds.max_context_lanes
    assert rounds.step_time(uniform(65, c)) == old.step_time(uniform(65, c))
    assert rounds.step_time(uniform(67, c)) - old.step_time(uniform(67, c)) == pytest.approx(
        unsplit * (2 * c - 67 * c / lanes), rel=1e-9)
    # ... which the measured sweep shows (bench/results/decode-rows-h100-2026-12-06-r41hb: +1.93 ms from 65 to 68)
    assert unsplit * c > 1e-3
    # within a round the rows add only their keys
    assert rounds.step_time(uniform(70, c)) - rounds.step_time(uniform(68, c)) == pytest.approx(
        2 * c * rounds.coefficients["graph_context_tokens"], rel=1e-9)


def test_vectorised_and_run_prices_equal_the_step_price(profiles):
    _, rounds = profiles
    feats = [uniform(n, c) for n in (3, 17, 25, 33, 65, 67, 100, 130, 140) for c in (512, 2560)]
    rows = pd.DataFrame({"num_prefill_tokens": 0, "num_prefill_seqs": 0, "num_decode_seqs": [f.num_decode_seqs for f in feats],
                         "decode_context_tokens": [f.decode_context_tokens for f in feats], "prefill_attn_pairs": 0,
                         "max_decode_context": [f.max_decode_context for f in feats]})
    assert rounds.forward_times(rows).tolist() == [rounds.step_time(f) for f in feats]
    # a fast-path run of k identical decode steps: each step as step_time prices it
    n, c0, k = 67, 67 * 2000, 5
    times = rounds.decode_run_times(n, c0, k, 2000)
    steps = [rounds.step_time(StepFeatures(num_decode_seqs=n, decode_context_tokens=c0 + n * (j + 1),
                                           max_decode_context=2000 + j + 1)) for j in range(k)]
    assert list(times) == steps


def test_the_json_keeps_the_rounds_and_refuses_a_bad_value(profiles, tmp_path):
    _, rounds = profiles
    path = tmp_path / "p.json"
    rounds.to_json(path)
    assert json.loads(path.read_text())["decode_programs_per_sm"] == list(DECODE_PROGRAMS_PER_SM)
    loaded = ProfileCostModel.from_json(path)
    assert loaded.decode_programs_per_sm == DECODE_PROGRAMS_PER_SM
    assert loaded.step_time(uniform(67, 2560)) == rounds.step_time(uniform(67, 2560))
    for bad in ([3], [3, 0], [3, True], "3,4"):
        d = json.loads(path.read_text())
        d["decode_programs_per_sm"] = bad
        path.write_text(json.dumps(d))
        with pytest.raises(UserError, match="'decode_programs_per_sm' is .*two positive integers"):
            ProfileCostModel.from_json(path)


def test_a_refit_keeps_the_form_of_its_rows_profile(tmp_path, capsys):
    """A refit reproduces the profile its rows came from: fitted with rounds when it was, without when not."""
    rows = pd.read_csv(R41H.with_suffix(".steps.csv.gz"))
    rows = rows[rows["workload"].str.startswith(("decode-", "skew-b15", "prefill-", "buckets-"))]
    csv = tmp_path / "r.steps.csv.gz"
    rows.to_csv(csv, index=False)
    profile = json.loads(R41H.read_text())
    without, with_rounds = tmp_path / "without.json", tmp_path / "with.json"
    without.write_text(json.dumps(profile))
    with_rounds.write_text(json.dumps({**profile, "decode_programs_per_sm": [3, 4]}))
    for out, expected in ((without, None), (with_rounds, [3, 4])):
        assert cli_main(["calibrate", "--refit", str(csv), "--out", str(out), "--gpu", "h100", "--force"]) == 0
        d = json.loads(out.read_text())
        assert d.get("decode_programs_per_sm") == expected
        assert d["report"].get("decode_programs_per_sm") == expected
        printed = capsys.readouterr().out
        assert ("decode programs in rounds of 3 / 4 per SM (split / unsplit)" in printed) == (expected is not None)
    # --decode-rounds fits the rows with rounds whatever their profile's form; an fp8 cache's launches are not measured
    new = tmp_path / "new.json"
    assert cli_main(["calibrate", "--refit", str(csv), "--out", str(new), "--gpu", "h100", "--decode-rounds"]) == 0
    assert json.loads(new.read_text())["decode_programs_per_sm"] == [3, 4]
    capsys.readouterr()
    fp8 = tmp_path / "fp8.json"
    assert cli_main(["calibrate", "--refit", str(csv), "--out", str(fp8), "--gpu", "h100", "--kv-cache-dtype", "fp8",
                     "--decode-rounds"]) == 2
    assert "--decode-rounds: the --refit rows' kv_cache_dtype (--kv-cache-dtype) is fp8" in capsys.readouterr().err
    assert not fp8.exists()


def test_the_fit_recovers_a_profile_priced_with_rounds():
    """Steps timed by a profile with rounds (the known profile of the cost-model tests, given the rounds) and batches
    either side of a round: the fit with the same rounds finds their prices again."""
    from pagesim.cost.profile import fit_profile
    from tests.test_cost_models import calibration_grid, frame, known_profile, skewed_grid

    known = replace(known_profile(), decode_programs_per_sm=DECODE_PROGRAMS_PER_SM)
    # its largest graph holds 64 rows: the 32-row graph's split launch (2 splits) passes 396 programs at 25 rows
    large = [uniform(n, c) for n in (17, 20, 23, 24, 25, 26, 28, 30, 32) for c in (1024, 2048, 4096)]
    steps = calibration_grid() + skewed_grid() + large
    fitted, report = fit_profile(frame(steps, known.step_time), "llama-3-8b", "h200",
                                 decode_programs_per_sm=DECODE_PROGRAMS_PER_SM)
    assert fitted.decode_programs_per_sm == DECODE_PROGRAMS_PER_SM
    assert report["decode_programs_per_sm"] == list(DECODE_PROGRAMS_PER_SM)
    for f in large:
        assert fitted.step_time(f) == pytest.approx(known.step_time(f), rel=2e-3), f
    # the form before them misses the round the step at 25 rows starts
    plain, _ = fit_profile(frame(steps, known.step_time), "llama-3-8b", "h200")
    assert max(abs(plain.step_time(f) / known.step_time(f) - 1) for f in large) > 0.01
