"""The Sweep page runs its grid through pagesim.sweep.run_sweep (the CLI's runner): rows land in a resumable
results.parquet, a view seen before runs nothing, an interrupted one runs only what is missing, and Ray is
used when selected. Plus the page's grid and table helpers, without Streamlit."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import pagesim.sweep as core
from pagesim.config import Config
from pagesim.dashboard import sweep
from pagesim.errors import UserError
from pagesim.specs import GIB
from tests.conftest import REPO

PAGE = str(REPO / "pagesim/dashboard/pages/sweep.py")
GRID = {"block_size": [16, 256], "kv_cache_gib": [1.0], "preemption_mode": ["recompute"],
        "enable_prefix_caching": [False], "layout": ["paged"]}


@pytest.fixture
def sweep_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(sweep.CACHE_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def calls(monkeypatch):
    """The points each backend was asked to run, when there were any (the backends still run them)."""
    seen = {"local": [], "ray": []}
    for name, real in (("local", core._run_local), ("ray", core._run_ray)):
        def spy(trace, base, points, *, _real=real, _name=name, **kw):
            if points:
                seen[_name].append([core.config_id(p) for p in points])
            yield from _real(trace, base, points, **kw)
        monkeypatch.setattr(core, f"_run_{name}", spy)
    return seen


def page(limit: int = 200, grid: dict | None = None, backend: str | None = None) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.session_state["sweep.limit"] = limit
    at.session_state["sweep.ran"] = grid or GRID
    if backend:
        at.session_state["sweep.backend"] = backend
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def only_results(sweep_dir):
    (results,) = sweep_dir.glob("*/results.parquet")
    return results


def test_page_runs_the_grid_through_run_sweep_and_reuses_its_results_parquet(sweep_dir, calls):
    at = page()
    shown = at.dataframe[0].value
    assert shown["block_size"].tolist() == [16, 256] and (shown["status"] == "ok").all()
    assert shown["token_state_fraction"].iloc[0] > shown["token_state_fraction"].iloc[1]
    results = only_results(sweep_dir)
    on_disk = pd.read_parquet(results)
    assert sorted(on_disk["config_id"]) == sorted(shown["config_id"]), "the page shows the sweep's rows"
    assert len(calls["local"]) == 1 and len(calls["local"][0]) == 2 and not calls["ray"]
    mtime = results.stat().st_mtime_ns
    page()  # another session, same view: nothing to run, results.parquet untouched
    assert len(calls["local"]) == 1, "a view seen before ran again"
    assert results.stat().st_mtime_ns == mtime


def test_an_interrupted_page_sweep_runs_only_the_missing_configurations(sweep_dir, calls):
    grid = {**GRID, "block_size": [16, 32, 64]}
    page(grid=grid)  # the page's own directory for this view, then pretend only one row had finished
    out = only_results(sweep_dir).parent
    kept = pd.read_parquet(out / "results.parquet").head(1)
    kept.to_parquet(out / "results.parquet", index=False)
    at = page(grid=grid)
    assert [len(c) for c in calls["local"]] == [3, 2], "the resume re-ran a finished configuration"
    assert at.dataframe[0].value["block_size"].tolist() == [16, 32, 64]


def test_a_new_swap_space_runs_the_swap_points_alone(sweep_dir, calls):
    """swap_space is a parameter of the swap points only: a new value runs them again, and the recompute points, whose
    runs do not depend on it, keep their rows. Was: a fixed option of every point, in the directory's name, so every
    point of the grid ran again. The page shows the grid's rows only, not those of an earlier swap_space."""
    grid = {**GRID, "block_size": [16], "kv_cache_gib": [0.5], "preemption_mode": ["recompute", "swap"]}
    first = page(grid=grid | {"swap_space": 4.0}).dataframe[0].value
    at = page(grid=grid | {"swap_space": 0.25})
    assert [len(c) for c in calls["local"]] == [2, 1], "a new swap_space ran the recompute point again"
    shown = at.dataframe[0].value
    assert shown["preemption_mode"].tolist() == ["recompute", "swap"] and (shown["status"] == "ok").all()
    assert shown["config_id"].iloc[0] == first["config_id"].iloc[0], "the recompute row is the one run before"
    assert pd.isna(shown["swap_space"].iloc[0]) and shown["swap_space"].iloc[1] == 0.25
    assert list(shown.columns[:6]) == [*GRID, "swap_space"], "swap_space among the parameters, before the figures"
    page(grid=grid | {"swap_space": 4.0})
    assert len(calls["local"]) == 2, "both swap_space values' rows are kept: going back runs nothing"
    assert len(pd.read_parquet(only_results(sweep_dir))) == 3


def test_page_runs_on_ray_when_selected(ray_local, sweep_dir, calls):
    at = page(backend="Ray")
    assert len(calls["ray"]) == 1 and len(calls["ray"][0]) == 2 and not calls["local"]
    assert (at.dataframe[0].value["status"] == "ok").all()
    assert ray_local.is_initialized(), "the page keeps the Ray instance for later sweeps"


def test_page_grid_points_use_the_cli_names_and_reject_empty_axes():
    points = sweep.grid_points({"block_size": [16, 256], "layout": ["paged", "contiguous-pow2"]})
    assert points[1] == {"block_size": 16, "layout": "pow2"}
    with pytest.raises(UserError, match="cannot sweep watermark"):
        sweep.grid_points({"watermark": [0.1]})
    with pytest.raises(UserError, match="at least one value for block_size"):
        sweep.grid_points({"block_size": []})


def test_page_options_carry_the_sidebar_config_and_memory_is_equal_across_block_sizes():
    options = sweep.base_options(Config(model="qwen3-8b", max_num_seqs=7, enable_prefix_caching=True))
    assert (options["model"], options["max_num_seqs"], options["enable_prefix_caching"]) == ("qwen3-8b", 7, True)
    assert options["slo"] == [] and options["replicas"] == 1
    base = Config()
    assert [sweep.blocks_for_gib(base.replace(block_size=b), 1.0) * base.replace(block_size=b).block_bytes
            for b in (16, 256)] == [GIB, GIB]


def test_table_is_in_grid_order_with_run_names_and_errors_last():
    points = [{"block_size": 16, "layout": "paged"}, {"block_size": 16, "layout": "max"}]
    rows = pd.DataFrame([
        {**points[1], "config_id": core.config_id(points[1]), "status": "error", "error": "UserError: boom"},
        {**points[0], "config_id": core.config_id(points[0]), "status": "ok", "error": "", "ttft_s_p50": 0.1,
         "token_state_fraction": 0.9, "num_gpu_blocks": 10, "goodput": 3.0},
    ])
    t = sweep.table(rows, points)
    assert t["layout"].tolist() == ["paged", "contiguous-max"]
    assert list(t.columns) == ["block_size", "layout", "token_state_fraction", "ttft_p50_s", "num_gpu_blocks",
                               "kv_cache_tokens", "status", "error", "config_id"]
    assert t["kv_cache_tokens"].iloc[0] == 160


def test_a_parameter_after_the_figures_is_a_parameter():
    """A sweep directory's results.parquet whose first row is a recompute point has the swap points' swap_space after
    the figures (a column is added where a later row first has it): still a parameter, in the table before the figures
    (was: dropped from the finished view's table, and not among its axes). num_gpu_blocks, a figure of every row, is
    not one."""
    points = [{"block_size": 16, "preemption_mode": "recompute"},
              {"block_size": 16, "preemption_mode": "swap", "swap_space": 4.0}]
    rows = pd.DataFrame([{**p, "config_id": core.config_id(p), "status": "ok", "error": "", "token_state_fraction": 0.9,
                          "num_gpu_blocks": 10, "warnings": ""} for p in points])
    assert list(rows.columns)[-1] == "swap_space", "as run_sweep's table has it"
    assert sweep.parameters(rows) == ["block_size", "preemption_mode", "swap_space"]
    assert list(sweep.table(rows).columns[:3]) == ["block_size", "preemption_mode", "swap_space"]
    assert sweep.parameters(rows.drop(columns="config_id")) == []
