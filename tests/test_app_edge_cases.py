"""New-user edge cases of the dashboard, driven by Streamlit's AppTest (as tests/test_app.py, whose helpers these
use): extreme widget values, odd uploads and URL parameters. Each test failed before the fix it names."""

from __future__ import annotations

import json

import pytest

from tests.test_app import PAGES, charts, finished_sweep_app, new_app


def sweep_at(query: dict) -> "AppTest":  # noqa: F821 - AppTest via new_app
    """The Sweep page opened at a URL carrying `query` (as a shared link opens it)."""
    at = new_app()
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(f"{PAGES}/sweep.py").run()
    return at


def test_sweep_where_every_configuration_rejected_every_request_draws_no_chart_and_says_why():
    """Was: max_model_len 1 (every prompt reaches it) left every row without figures (None), and the chart raised
    "TypeError: unsupported format string passed to NoneType.__format__" in an exception box under the page's own
    warning. Now the page draws no chart and its warning says why."""
    at = sweep_at({"sweep.limit": "20", "sweep.block_sizes": "16", "sweep.max_model_len": "1"})
    assert not at.exception, [e.value for e in at.exception]
    assert not charts(at)
    (warning,) = [w.value for w in at.warning if "every request" in w.value]
    assert warning.startswith("1 of 1 configurations rejected every request"), warning


def test_sweep_finished_results_whose_rows_rejected_every_request_are_drawn_without_error(tmp_path):
    """Was: a finished results.parquet whose configurations all rejected every request (no figures: None) raised the
    same TypeError from the chart's hover text. Now the chart is drawn (no points) and the table shows the rows."""
    rows = [{"block_size": bs, "config_id": f"c{bs}", "status": "ok", "error": "", "num_rejected": 20,
             "token_state_fraction": None, "ttft_p50_s": None, "e2e_p50_s": None, "output_token_throughput": None}
            for bs in (16, 32)]
    at = finished_sweep_app(tmp_path, rows)
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.dataframe) == 1


@pytest.mark.parametrize("change, expected", [
    ({"decode": [1, {}]}, "decode[0]: expected an object with batch, context and timings, got 1"),
    ({"decode": []}, "decode: expected at least one decode shape, got an empty list"),
    ({"ceilings": {"copy_tb_per_s": "fast"}}, "ceilings.copy_tb_per_s: expected a number, got 'fast'"),
    ({"prefill": [1]}, "prefill: expected an object with tokens, flops and times_s, got [1]"),
    ({"model_step": {"batch": 64}}, "model_step.context: expected a number, got None"),
])
def test_kernels_page_names_the_field_of_a_result_file_it_cannot_read(tmp_path, monkeypatch, change, expected):
    """Was: a kernels-*.json with a 'decode' list but entries of another shape (a number for a shape, a ceiling as
    text, prefill as a list, a model step without its times) raised AttributeError / ValueError / KeyError in an
    exception box, and an empty decode list drew an empty chart without a word. Now the page names the file, the
    field and what it expected, as it did for a file that is not JSON."""
    from pagesim.dashboard.kernel_results import RESULTS_DIR_ENV
    from tests.dashboard_fixtures import kernel_result

    (tmp_path / "kernels-x.json").write_text(json.dumps({**kernel_result(), **change}))
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    at = new_app().run()
    at.switch_page(f"{PAGES}/kernels.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error == f"{tmp_path / 'kernels-x.json'}: not a bench.kernels result: {expected}"
    assert not charts(at)


@pytest.mark.parametrize("file, content, expected", [
    ("sim_requests.csv", b"", "cannot read sim_requests.csv (No columns to parse from file); expected the files "
                              "`python -m pagesim validate` writes (run it again: python -m pagesim validate "),
    ("steps.parquet", b"PAR1 cut short", "cannot read steps.parquet ("),
    ("summary.json", b'{"config": ', "cannot read summary.json (Expecting value"),
])
def test_live_page_names_the_run_file_it_cannot_read(tmp_path, monkeypatch, file, content, expected):
    """Was: an empty sim_requests.csv (or a cut-short steps.parquet, summary.json) said only "DIR: cannot read the
    live run (EmptyDataError: No columns to parse from file)", not which of the run's seven files; now the file is
    named as `python -m pagesim validate` names it, with the command that writes it again."""
    from pagesim.dashboard.live_runs import LIVE_DIR_ENV
    from tests.dashboard_fixtures import write_live_run

    run = write_live_run(tmp_path / "run-a", num_requests=20)
    (run / file).write_bytes(content)
    monkeypatch.setenv(LIVE_DIR_ENV, str(tmp_path))
    at = new_app().run()
    at.switch_page(f"{PAGES}/live.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error.startswith(f"{run}: {expected}"), error


@pytest.mark.parametrize("page, query, named", [
    (None, {"replay.limit": "30", "replay.blocksize": "32"}, "replay.blocksize='32'"),
    ("sweep", {"sweep.limit": "20", "sweep.block_sizes": "16", "sweep.block_size": "32"}, "sweep.block_size='32'"),
    ("plan", {"plan.ttfts": "2"}, "plan.ttfts='2'"),
    # no page's prefix at all: on whichever page the link opens
    (None, {"replay.limit": "30", "blocksize": "32"}, "blocksize='32'"),
    ("sweep", {"sweep.limit": "20", "limit": "20"}, "limit='20'"),
])
def test_url_settings_a_page_does_not_have_are_named_as_ignored(page, query, named):
    """Was: a URL setting of the page's prefix that no control has (a typo, replay.blocksize=32; sweep.block_size,
    which the Sweep page sweeps as block_sizes) was dropped without a word, so the page ran at the default while the
    link claimed otherwise. Now the URL notice names it as ignored, and settings the page has stay silent."""
    at = new_app()
    at.query_params.update(query)
    at.run()
    if page is not None:
        at.switch_page(f"{PAGES}/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = [w.value for w in at.warning if "URL" in w.value]
    assert warning == f"Settings in the URL that this page does not have, so they are ignored: {named}. Check the link."


def test_every_page_prefix_is_known_to_the_url_notice():
    """A URL setting with no page's prefix is named as ignored (widgets.PAGE_PREFIXES): a page whose prefix were
    missing there would have every one of its settings called unknown on every page."""
    from pagesim.dashboard import widgets
    from pagesim.dashboard.pages import kernels, live, plan, replay, sweep

    assert sorted(m.PREFIX for m in (kernels, live, plan, replay, sweep)) == sorted(widgets.PAGE_PREFIXES)


def test_every_url_setting_a_page_binds_is_known_to_its_url_notice():
    """The pages' URL_KEYS (and the Sim vs Live and Kernels pages' lists) must hold every control bound to the URL,
    or a valid shared link would be called unknown: each call with bind= and a key, read from the sources."""
    import ast

    from pagesim.dashboard import widgets
    from pagesim.dashboard.pages import plan, replay, sweep
    from tests.conftest import REPO

    def bound(path) -> set[str]:
        keys = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and any(k.arg == "bind" for k in node.keywords):
                key = next(k.value for k in node.keywords if k.arg == "key")
                if isinstance(key, ast.JoinedStr):
                    keys.add(ast.unparse(key).split(".", 1)[1].rstrip("'\""))
        return keys

    shared = bound(REPO / "pagesim/dashboard/widgets.py")
    assert shared == set(widgets.CONFIG_KEYS) | (set(widgets.TRACE_SOURCE_KEYS) - {widgets.KEPT_UPLOAD,
                                                                                  widgets.INJECTED_UPLOAD})
    for module in (replay, sweep, plan):
        assert bound(REPO / f"pagesim/dashboard/pages/{module.PREFIX}.py") <= set(module.URL_KEYS), module.PREFIX
    assert {"file"} == bound(REPO / "pagesim/dashboard/pages/kernels.py")


@pytest.mark.parametrize("content", [b"", b"block_size,config_id,status\n16,a,ok\n", b"\x1f\x8b\x08\x00cut"])
def test_sweep_finished_file_that_is_not_parquet_is_named_as_such(content):
    """Was: an empty file, a CSV or a gzipped file opened as a finished sweep said "(no config_id and status columns)",
    as if it were a Parquet table of another tool; now the page says it cannot be read as Parquet."""
    at = new_app()
    at.session_state["sweep.injected_results"] = ("results.parquet", content)
    at.run()
    at.switch_page(f"{PAGES}/sweep.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error.startswith("results.parquet: cannot read it as Parquet ("), error
    assert error.endswith("expected the results.parquet `python -m pagesim sweep` writes, as it is (not zipped or "
                          "gzipped)"), error


def test_replay_memory_caption_of_one_block_is_singular_and_shows_its_size():
    """Was: a cache of one GPU block of 16 tokens read "1 blocks × 16 tokens = 16 token slots = 0.00 GiB"; now the
    nouns agree with their counts and a cache under 1 GiB is shown in MiB ("2 MiB": a block of 16 tokens of
    Llama-3-8B is 2 MiB)."""
    at = new_app()
    at.query_params.update({"replay.limit": "20", "replay.memory_mode": "num_gpu_blocks", "replay.num_gpu_blocks": "1",
                            "replay.block_size": "16"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert "1 block × 16 tokens = 16 token slots = 2 MiB of K/V for llama-3-8b" in caption, caption
    at.number_input(key="replay.num_gpu_blocks").set_value(200).run()
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert "200 blocks × 16 tokens = 3,200 token slots = 400 MiB of K/V" in caption, caption


@pytest.mark.parametrize("text", ["nan s", "inf s", "-inf s", "1e999 s", "nan", "inf"])
def test_replay_snapshot_url_that_is_no_number_is_named(text):
    """Was: ?replay.snapshot=nan s (or inf s: a time that is no number) matched no snapshot, every distance being NaN
    or inf, and the page showed snapshot 0 without a word, where 'abc' is named as not a snapshot; now it is named
    the same way and the page shows the middle of the arrivals."""
    at = new_app()
    at.query_params.update({"replay.limit": "30", "replay.snapshot": text})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = [w.value for w in at.warning if "replay.snapshot" in w.value]
    assert warning.startswith(f"URL parameter replay.snapshot={text!r} is not a snapshot number (0 to "), warning
    slider = at.select_slider(key="replay.snapshot")
    assert 0 < slider.value < len(slider.options) - 1, slider.value


@pytest.mark.parametrize("file, rows, writer", [("steps.parquet", "steps", "live"), ("requests.parquet", "requests", "live"),
                                                ("sim_steps.parquet", "steps", "validate")])
def test_live_page_names_a_run_file_without_rows(tmp_path, monkeypatch, file, rows, writer):
    """Was: a live run whose steps.parquet or requests.parquet (or validate's sim_steps.parquet) held the columns but no
    rows drew its memory, request and latency charts empty without a word; now the page names the run and the file
    and draws no chart."""
    import pandas as pd

    from pagesim.dashboard.live_runs import LIVE_DIR_ENV
    from tests.dashboard_fixtures import write_live_run

    run = write_live_run(tmp_path / "run-a", num_requests=20)
    pd.read_parquet(run / file).iloc[:0].to_parquet(run / file)
    monkeypatch.setenv(LIVE_DIR_ENV, str(tmp_path))
    at = new_app().run()
    at.switch_page(f"{PAGES}/live.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error == (f"{run}: {file} has no rows, so there is nothing to chart; expected the {rows} "
                     f"`python -m pagesim {writer}` records, one row per {rows[:-1]}"), error
    assert not charts(at)
