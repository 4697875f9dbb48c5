"""plan at its edges: a best candidate that rejected every request (no goodput to show), and which candidate is the
runner-up when none has fewer GPUs than the recommendation."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pagesim.plan import choose, describe
from pagesim.slo import parse_slos

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "traces" / "multiturn-300.jsonl"
ONE_KNOB = ["--grid", "max_num_seqs=8", "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16",
            "--grid", "router=round-robin"]


def rejected_row() -> dict:
    """A candidate whose every request was rejected: no makespan, so no goodput (None; null in plan.json)."""
    return {"num_gpus": 1, "tensor_parallel_size": 1, "replicas": 1, "router": "round-robin", "max_num_seqs": 8,
            "max_num_batched_tokens": 2048, "block_size": 16, "goodput": None, "slo_attainment": 0.0,
            "num_requests": 10, "num_rejected": 10, "slo_ttft_p99_s": None, "slo_ttft_p99_met": False,
            "slo_met": False}


def test_describe_shows_a_missing_figure_as_n_a():
    text = describe(rejected_row(), parse_slos(["ttft_p99=1"]))
    assert "goodput n/a" in text and "SLO attainment 0.0%" in text
    assert "10 of 10 requests rejected" in text and "misses ttft_p99 inf s > 1 s" in text
    assert "SLO attainment n/a" in describe({**rejected_row(), "slo_attainment": float("nan")}, [])


def test_describe_shows_integer_knobs_as_integers_when_the_table_holds_them_as_floats():
    """A table with error rows (NaN in the integer columns) holds num_gpus, max_num_seqs, ... as floats: was
    'num_gpus=2.0, ... max_num_seqs=8.0'."""
    row = {**rejected_row(), "num_gpus": 2.0, "replicas": 2.0, "tensor_parallel_size": 1.0, "max_num_seqs": 8.0,
           "max_num_batched_tokens": 1048576.0}
    text = describe(row, [])
    assert "num_gpus=2, " in text and "max_num_seqs=8, " in text and "max_num_batched_tokens=1048576" in text
    assert ".0" not in text.splitlines()[0]


@pytest.mark.parametrize("rejecting", [["--max-model-len", "2"], ["--num-gpu-blocks", "1"]])
def test_plan_whose_every_candidate_rejects_every_request_reports_the_closest(tmp_path, capsys, rejecting):
    """Was a TypeError traceback (goodput None formatted with :.3g), exit 1, after plan.json had been written."""
    from pagesim.cli import main

    out = tmp_path / "plan"
    rc = main(["plan", str(TRACE), "--limit", "10", "--slo", "ttft_p99=1", "--max-gpus", "2", *rejecting, *ONE_KNOB,
               "--backend", "local", "--num-cpus", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, "no candidate meeting the SLOs is an answer, as in test_plan's CLI test"
    assert "no candidate meets ttft_p99=1; closest:" in printed
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan) >= {"recommendation", "runner_up", "candidates", "evaluated", "failed", "skipped", "pareto"}
    assert plan["evaluated"] == len(plan["candidates"]) == 3 and plan["failed"] == 0
    assert plan["recommendation"] is None
    closest = plan["runner_up"]
    assert closest["goodput"] is None and closest["num_rejected"] == closest["num_requests"] == 10
    # What was printed is what plan.json holds: the closest candidate's lines, and n/a for the null goodputs.
    assert describe(closest, parse_slos(plan["slos"])) in printed
    assert all(row["goodput"] is None for row in plan["pareto"])
    table = printed.split("num_gpus", 1)[1].split("no candidate meets", 1)[0]
    assert table.count("n/a") == len(plan["pareto"]) and "None" not in table
    assert (out / "pareto.csv").is_file() and len(pd.read_csv(out / "pareto.csv")) == len(plan["pareto"])


def rows(*specs):
    return pd.DataFrame([{"status": "ok", "config_id": f"c{i}", "num_gpus": g, "goodput": gp, "slo_attainment": a,
                          "slo_met": met, "tensor_parallel_size": 1, "replicas": g, "router": "round-robin",
                          "max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16}
                         for i, (g, gp, a, met) in enumerate(specs)])


def test_runner_up_without_fewer_gpus_is_the_next_candidate_meeting_the_slos_as_the_readme_says():
    """The recommendation has the fewest GPUs there are: the runner-up is then the next candidate that meets the SLOs,
    here with more GPUs (what the new-user test saw: a runner-up of 2 GPUs beside a recommendation of 1)."""
    rec, runner = choose(rows((1, 3.0, 1.0, True), (2, 4.0, 1.0, True), (2, 9.0, 0.5, False)))
    assert (rec["config_id"], rec["num_gpus"]) == ("c0", 1)
    assert (runner["config_id"], runner["num_gpus"]) == ("c1", 2)
    # With fewer GPUs available, the runner-up is the best of those, SLOs met or not.
    rec, runner = choose(rows((1, 3.0, 0.9, False), (2, 4.0, 1.0, True), (1, 1.0, 0.95, False)))
    assert rec["config_id"] == "c1" and runner["config_id"] == "c2"
    readme = " ".join((REPO / "README.md").read_text().split())
    assert ("the runner-up is the best candidate with fewer GPUs (most SLO attainment, then goodput) or, when no "
            "candidate has fewer, the next candidate that meets the SLOs (the same number of GPUs or more)") in readme


def test_the_plan_page_labels_a_candidate_without_goodput():
    from pagesim.dashboard.pages.plan import _label

    row = {"num_gpus": 1, "tensor_parallel_size": 1, "replicas": 1, "router": "round-robin", "max_num_seqs": 256,
           "goodput": None}
    assert _label(row).endswith("goodput n/a")
    assert _label({**row, "goodput": 1.234}).endswith("goodput 1.23")


@pytest.mark.parametrize("finished", ["in search order", "last first"])
def test_tied_candidates_are_broken_by_the_search_order_whatever_order_they_finished_in(tmp_path, monkeypatch, capsys,
                                                                                       finished):
    """On the full Azure conv trace at 57k blocks, block 16 and block 32 give the same figures (memory never binds);
    the sweep hands its rows back in the order they finished, so a plan on 16 Ray workers recommended block 32 and
    one on one worker block 16 (README's table). The first tied candidate in the search wins, however they finished."""
    import pagesim.sweep as sweep_module
    from pagesim.cli import main

    def fake_run_sweep(trace, base, points, out, **kwargs):
        points = list(points) if finished == "in search order" else list(reversed(points))
        return pd.DataFrame([{**p, "config_id": sweep_module.config_id(p), "status": "ok", "error": "",
                              "num_gpus": p["tensor_parallel_size"] * p["replicas"], "goodput": 5.0,
                              "slo_attainment": 1.0, "slo_met": True, "num_requests": 10, "num_rejected": 0,
                              "slo_ttft_p99_s": 0.5, "slo_ttft_p99_met": True}
                             for p in points])

    monkeypatch.setattr(sweep_module, "run_sweep", fake_run_sweep)
    assert main(["plan", str(TRACE), "--limit", "10", "--slo", "ttft_p99=1", "--max-gpus", "1",
                 "--grid", "max_num_seqs=8,16", "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16,32",
                 "--grid", "router=round-robin", "--backend", "local", "--out", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (plan["recommendation"]["max_num_seqs"], plan["recommendation"]["block_size"]) == (8, 16)
    assert (plan["runner_up"]["max_num_seqs"], plan["runner_up"]["block_size"]) == (8, 32)
    assert [(c["max_num_seqs"], c["block_size"]) for c in plan["candidates"]] == [(8, 16), (8, 32), (16, 16), (16, 32)]
    capsys.readouterr()


def test_max_gpus_is_bounded_by_the_largest_deployment_plan_proposes(tmp_path):
    """Was: --max-gpus 1000000 built ~45 million candidates (replica counts up to a million x routers x knobs) in memory
    before any output, and candidates with more replicas than a replay may run (1,000) became error rows."""
    from pagesim.cli import command_parser
    from pagesim.options import MAX_REPLICAS
    from pagesim.plan import TP_DEGREES, deployments
    from tests.test_cli_hygiene import one_error, pagesim

    most = TP_DEGREES[-1] * MAX_REPLICAS
    line = one_error(pagesim("plan", TRACE, "--slo", "ttft_p99=1", "--max-gpus", 1_000_000, "--out", tmp_path / "p"))
    assert line.endswith(f"argument --max-gpus: expected a positive integer of at most {most:,} (tensor parallelism "
                         f"of up to {TP_DEGREES[-1]} GPUs times at most {MAX_REPLICAS:,} replicas), got '1000000'")
    args = command_parser("plan").parse_args([str(TRACE), "--slo", "ttft_p99=1", "--max-gpus", str(most), "--out", "x"])
    deps, refused = deployments(vars(args), args.max_gpus, ["round-robin"])
    assert not refused and max(d["replicas"] for d in deps) == MAX_REPLICAS
    assert max(d["tensor_parallel_size"] * d["replicas"] for d in deps) == most
