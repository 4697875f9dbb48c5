"""SLO parsing and arithmetic: attainment, goodput and percentiles with rejected requests."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import UserError
from pagesim.slo import SLO, evaluate, missed, parse_slo, parse_slos


def frame(rows):
    """rows: (state, ttft, tpot, e2e); own requests only unless a parent id is given."""
    return pd.DataFrame([{"parent_id": r[4] if len(r) > 4 else "", "state": r[0], "ttft_s": r[1], "tpot_s": r[2],
                          "e2e_s": r[3]} for r in rows])


def test_parse_slo_reads_metric_percentile_and_seconds():
    assert parse_slo("ttft_p99=1") == SLO("ttft", "p99", 1.0)
    assert parse_slo(" TPOT_p50=0.05 ") == SLO("tpot", "p50", 0.05)
    assert str(parse_slo("e2e_p90=2.5")) == "e2e_p90=2.5"


@pytest.mark.parametrize("text", ["ttft=1", "ttft_p98=1", "itl_p99=1", "ttft_p99=", "ttft_p99=-1", "ttft_p99=0",
                                  "ttft_p99=1e", "ttft_p99=inf"])
def test_bad_slo_is_a_one_line_error_naming_the_flag(text):
    with pytest.raises(UserError, match=r"--slo .*expected METRIC_PCT=SECONDS"):
        parse_slo(text)


def test_a_bad_slo_says_what_it_most_likely_meant():
    """Was: two SLOs in one flag (`--slo ttft_p99=1,tpot_p99=0.05`) and a threshold with a unit (`500ms`) got the
    generic message only, which says neither that --slo repeats nor that a unit is not read."""
    with pytest.raises(UserError) as err:
        parse_slo("ttft_p99=1,tpot_p99=0.05")
    assert str(err.value).endswith("e.g. ttft_p99=1; one SLO per --slo: repeat the flag, --slo ttft_p99=1 "
                                   "--slo tpot_p99=0.05")
    for text in ("ttft_p99=500ms", "ttft_p99=1s", "ttft_p99=2 sec"):
        with pytest.raises(UserError) as err:
            parse_slo(text)
        assert str(err.value).endswith("e.g. ttft_p99=1 (a number of seconds, without a unit: 500ms is 0.5)")
    with pytest.raises(UserError) as err:
        parse_slo("ttft_p99=1x")
    assert str(err.value).endswith("e.g. ttft_p99=1")


def test_the_same_slo_twice_is_refused():
    with pytest.raises(UserError, match="ttft_p99 given twice"):
        parse_slos(["ttft_p99=1", "ttft_p99=2"])


def test_goodput_counts_requests_within_every_threshold_per_second():
    df = frame([("finished", 0.5, 0.01, 3.0),   # meets both
                ("finished", 1.5, 0.01, 3.0),   # TTFT too slow
                ("finished", 0.2, 0.09, 3.0),   # TPOT too slow
                ("finished", 0.2, np.nan, 0.2),  # one output token: no TPOT, cannot fail it
                ("rejected", np.nan, np.nan, np.nan)])
    slos = parse_slos(["ttft_p50=1", "tpot_p50=0.05"])
    out = evaluate(df, slos, makespan_s=10.0)
    assert out["slo_num_met"] == 2
    assert out["slo_attainment"] == pytest.approx(2 / 5)
    assert out["goodput"] == pytest.approx(2 / 10.0)


def test_percentiles_count_rejected_requests_as_infinitely_slow():
    ok = [("finished", 0.1, 0.01, 1.0)] * 97
    slos = parse_slos(["ttft_p99=1"])
    two_rejected = frame(ok + [("rejected", np.nan, np.nan, np.nan)] * 3)
    out = evaluate(two_rejected, slos, 1.0)
    assert math.isinf(out["slo_ttft_p99_s"]), "3% rejected must put p99 TTFT at infinity"
    assert out["slo_met"] is False
    assert missed(out, slos) == ["ttft_p99 inf s > 1 s"]
    all_done = evaluate(frame(ok), slos, 1.0)
    assert all_done["slo_ttft_p99_s"] == pytest.approx(0.1) and all_done["slo_met"] is True


def test_percentile_matches_numpy_on_finished_requests():
    ttft = np.linspace(0.0, 2.0, 101)
    df = frame([("finished", t, 0.01, t) for t in ttft])
    out = evaluate(df, parse_slos(["ttft_p90=1.7", "e2e_p50=1"]), 1.0)
    assert out["slo_ttft_p90_s"] == pytest.approx(np.percentile(ttft, 90))
    assert out["slo_ttft_p90_met"] is False  # 1.8 > 1.7
    assert out["slo_e2e_p50_met"] is True  # 1.0 <= 1.0


def test_forked_samples_do_not_count_as_requests():
    df = frame([("finished", 0.1, 0.01, 1.0), ("finished", 9.0, 9.0, 9.0, "r0")])
    out = evaluate(df, parse_slos(["ttft_p99=1"]), 1.0)
    assert out["slo_num_met"] == 1 and out["slo_attainment"] == 1.0


def test_a_request_without_a_tpot_is_left_out_of_the_tpot_percentile_as_in_the_summary():
    from pagesim.metrics import percentiles

    rows = [("finished", 0.1, t, 1.0) for t in (0.1, 0.2, 0.3)] + [("finished", 0.1, np.nan, 0.1)] * 2
    out = evaluate(frame(rows), parse_slos(["tpot_p50=0.15"]), 1.0)
    # the summary's p50 TPOT is 0.2 s; counting the two one-token requests as 0 s would make it 0.1 s and "met"
    assert out["slo_tpot_p50_s"] == pytest.approx(percentiles([0.1, 0.2, 0.3, np.nan, np.nan])["p50"]) == 0.2
    assert out["slo_tpot_p50_met"] is False and out["slo_met"] is False
    assert out["slo_num_met"] == 3  # the one-token requests cannot fail it; 0.2 and 0.3 s do


def test_a_run_of_one_token_requests_meets_any_tpot_slo():
    out = evaluate(frame([("finished", 0.1, np.nan, 0.1)] * 3), parse_slos(["tpot_p99=0.01"]), 1.0)
    assert out["slo_tpot_p99_s"] is None and out["slo_tpot_p99_met"] is True and out["slo_met"] is True
    assert out["slo_attainment"] == 1.0
    assert missed(out, parse_slos(["tpot_p99=0.01"])) == []


def test_a_request_exactly_at_a_threshold_meets_it():
    """'at most SECONDS': a latency equal to the threshold meets the SLO, in the attainment as in the percentile."""
    df = frame([("finished", 1.0, 0.05, 2.0), ("finished", 0.5, 0.05, 2.0), ("finished", 1.5, 0.05, 2.0)])
    out = evaluate(df, parse_slos(["ttft_p50=1", "tpot_p50=0.05"]), makespan_s=4.0)
    assert out["slo_num_met"] == 2  # 1.0 and 0.5 s meet ttft <= 1; 1.5 s does not
    assert out["slo_attainment"] == pytest.approx(2 / 3) and out["goodput"] == pytest.approx(2 / 4.0)
    assert out["slo_ttft_p50_s"] == 1.0 and out["slo_met"] is True


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_run_whose_every_request_was_rejected_meets_no_latency_slo(n):
    """Every request infinitely slow: each percentile is infinite (numpy's inf - inf interpolation is nan), never 0."""
    slos = parse_slos(["ttft_p99=1", "e2e_p50=10"])
    out = evaluate(frame([("rejected", np.nan, np.nan, np.nan)] * n), slos, makespan_s=None)
    assert math.isinf(out["slo_ttft_p99_s"]) and math.isinf(out["slo_e2e_p50_s"])
    assert out["slo_ttft_p99_met"] is False and out["slo_e2e_p50_met"] is False and out["slo_met"] is False
    assert out["slo_num_met"] == 0 and out["slo_attainment"] == 0.0 and out["goodput"] is None
    assert missed(out, slos) == ["ttft_p99 inf s > 1 s", "e2e_p50 inf s > 10 s"]


def test_slo_met_needs_every_slo_not_just_one():
    df = frame([("finished", 0.2, 0.2, 1.0)] * 4)
    slos = parse_slos(["ttft_p50=1", "tpot_p50=0.1"])  # TTFT met, TPOT missed
    out = evaluate(df, slos, 2.0)
    assert out["slo_ttft_p50_met"] is True and out["slo_tpot_p50_met"] is False
    assert out["slo_met"] is False and out["slo_num_met"] == 0
    assert missed(out, slos) == ["tpot_p50 0.2 s > 0.1 s"]
