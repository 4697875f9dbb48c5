"""New-user edge cases of the dashboard, driven by Streamlit's AppTest (as tests/test_app.py, whose helpers these
use): extreme widget values, odd uploads and URL parameters. Each test failed before the fix it names."""

from __future__ import annotations

from tests.test_app import PAGES, charts, new_app


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
    import pandas as pd

    rows = [{"block_size": bs, "config_id": f"c{bs}", "status": "ok", "error": "", "num_rejected": 20,
             "token_state_fraction": None, "ttft_p50_s": None, "e2e_p50_s": None, "output_token_throughput": None}
            for bs in (16, 32)]
    path = tmp_path / "results.parquet"
    pd.DataFrame(rows).to_parquet(path)
    at = new_app()
    at.session_state["sweep.injected_results"] = ("results.parquet", path.read_bytes())
    at.run()
    at.switch_page(f"{PAGES}/sweep.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.dataframe) == 1
