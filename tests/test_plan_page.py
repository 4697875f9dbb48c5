"""The Plan page: its frontier figure (plain function) and the page shown a finished plan (AppTest)."""

from __future__ import annotations

import pandas as pd
from streamlit.testing.v1 import AppTest

from pagesim.dashboard.plan_figures import pareto_figure
from tests.conftest import REPO


def candidate(cid, gpus, tp, replicas, goodput, attainment, met):
    return {"config_id": cid, "status": "ok", "error": "", "num_gpus": gpus, "tensor_parallel_size": tp,
            "replicas": replicas, "router": "round-robin", "max_num_seqs": 256, "max_num_batched_tokens": 8192,
            "block_size": 16, "goodput": goodput, "slo_attainment": attainment, "slo_met": met,
            "slo_ttft_p99_s": 0.4 if met else 3.0, "slo_ttft_p99_met": met, "ttft_s_p99": 0.4 if met else 3.0}


def report():
    rows = [candidate("a", 1, 1, 1, 14.0, 0.6, False), candidate("b", 2, 2, 1, 28.0, 1.0, True),
            candidate("c", 2, 1, 2, 27.0, 1.0, True)]
    return {"slos": ["ttft_p99=1"], "model": "llama-3-8b", "gpu": "h200", "max_gpus": 2, "evaluated": 3,
            "recommendation": rows[1], "runner_up": rows[0], "candidates": rows,
            "pareto": [{"num_gpus": 1, "goodput": 14.0, "slo_met": False}, {"num_gpus": 2, "goodput": 28.0, "slo_met": True}]}


def test_pareto_figure_marks_feasible_candidates_and_the_recommendation():
    r = report()
    fig = pareto_figure(pd.DataFrame(r["candidates"]), pd.DataFrame(r["pareto"]), r["recommendation"])
    names = [t.name for t in fig.data]
    assert names == ["meets the SLOs", "misses an SLO", "best per GPU count", "recommendation"]
    assert list(fig.data[0].x) == [2, 2] and list(fig.data[1].x) == [1]
    assert list(fig.data[3].y) == [28.0]


def test_plan_page_shows_recommendation_runner_up_and_frontier():
    at = AppTest.from_file(str(REPO / "pagesim/dashboard/pages/plan.py"), default_timeout=180)
    at.session_state["plan.report"] = report()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Recommendation: num_gpus=2, tensor_parallel_size=2" in at.success[0].value
    assert "misses ttft_p99 3 s > 1 s" in at.info[0].value
    assert len(at.get("plotly_chart")) == 1


def test_plan_page_names_what_an_incomplete_plan_json_lacks():
    """An uploaded JSON with candidates and pareto but not the rest of a plan.json: one message naming the file
    and the missing keys, not a KeyError traceback (uploads through the page's injected-upload seam)."""
    import json

    at = AppTest.from_file(str(REPO / "pagesim/dashboard/pages/plan.py"), default_timeout=180)
    at.session_state["plan.mode"] = "Open plan.json"
    at.session_state["plan.injected_upload"] = ("partial.json", json.dumps({"candidates": [], "pareto": []}).encode())
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = at.error
    assert error.value.startswith("partial.json: not a plan.json"), error.value
    assert "missing slos, model, gpu, max_gpus, evaluated, recommendation, runner_up" in error.value
    r = report()
    del r["candidates"][0]["goodput"]
    at.session_state["plan.injected_upload"] = ("rows.json", json.dumps(r).encode())
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "rows.json: not a plan.json" in at.error[0].value and "goodput" in at.error[0].value
    r = report() | {"candidates": [], "pareto": [], "recommendation": None, "runner_up": None}
    at.session_state["plan.injected_upload"] = ("none.json", json.dumps(r).encode())
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "none.json: not a plan.json" in at.error[0].value and "non-empty list" in at.error[0].value
    at.session_state["plan.injected_upload"] = ("plan.json", json.dumps(report()).encode())
    at.run()
    assert not at.exception and not at.error
    assert "Recommendation: num_gpus=2" in at.success[0].value


def test_plan_page_names_a_plan_json_whose_slos_or_frontier_are_malformed():
    """Was: an SLO the page cannot read ("x") raised the --slo UserError as a traceback, and a frontier of numbers a
    KeyError from the figure."""
    import json

    at = AppTest.from_file(str(REPO / "pagesim/dashboard/pages/plan.py"), default_timeout=180)
    at.session_state["plan.mode"] = "Open plan.json"
    for name, change, words in [("slos.json", {"slos": ["x"]}, "slos 'x': expected METRIC_PCT=SECONDS"),
                                # was: "slos: 'x': ..." (the --slo error with its flag cut off) and, for a number,
                                # an AttributeError traceback ('int' object has no attribute 'strip')
                                ("number.json", {"slos": [7]}, "slos 7: expected METRIC_PCT=SECONDS"),
                                ("twice.json", {"slos": ["ttft_p99=1", "TTFT_p99=2"]}, "slos ttft_p99 given twice"),
                                ("pareto.json", {"pareto": [1, 2]}, "pareto[0]: expected an object with num_gpus, goodput, got 1")]:
        at.session_state["plan.injected_upload"] = (name, json.dumps(report() | change).encode())
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        (error,) = at.error
        assert error.value.startswith(f"{name}: not a plan.json") and words in error.value, error.value
        assert not at.get("plotly_chart")


def test_plan_page_shows_the_warnings_skipped_degrees_and_failures_plan_printed():
    """plan.json's warnings (each kind once, with how many candidates it concerns), the tensor-parallel degrees the
    search skipped and the count of failed candidates, as `python -m pagesim plan` prints them. Was: all three dropped,
    so a plan whose candidates rejected most requests, or that never tried tp 1, looked like a clean search."""
    at = AppTest.from_file(str(REPO / "pagesim/dashboard/pages/plan.py"), default_timeout=180)
    at.session_state["plan.report"] = report() | {
        "failed": 1, "skipped": ["tensor_parallel_size=1: llama-3-70b's weights leave no KV memory on an h200"],
        "warnings": ["(2 of 3 configurations): replica0: 30 of 100 requests (30.0%) were rejected (--max-model-len)"]}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "**1** failed" in at.markdown[0].value
    assert [i.value for i in at.info if i.value.startswith("Not searched")] == [
        "Not searched: tensor_parallel_size=1: llama-3-70b's weights leave no KV memory on an h200"]
    assert [w.value for w in at.warning] == [
        "In 2 of 3 configurations: replica0: 30 of 100 requests (30.0%) were rejected"]


def test_plan_page_names_a_plan_json_whose_candidates_have_fields_of_the_wrong_type():
    """Was: a recommendation that is not an object raised AttributeError ('str' object has no attribute 'get') from
    the recommendation line, and a candidate's num_gpus as text ("one") a ValueError from the Open in Replay list, each
    in an exception box under the figure. Now one message names the file, the field and what it expected."""
    import json

    at = AppTest.from_file(str(REPO / "pagesim/dashboard/pages/plan.py"), default_timeout=180)
    at.session_state["plan.mode"] = "Open plan.json"
    bad_gpus = report()
    bad_gpus["candidates"][2]["num_gpus"] = "one"  # [1] is the recommendation too: named there first
    bad_knob = report()
    bad_knob["candidates"][2]["max_num_seqs"] = None
    for name, r, words in [("rec.json", report() | {"recommendation": "x"},
                            "recommendation: expected a candidate object or null, got 'x'"),
                           ("gpus.json", bad_gpus, "candidates[2].num_gpus: expected a whole number, got 'one'"),
                           ("knob.json", bad_knob, "candidates[2].max_num_seqs: expected a whole number, got None"),
                           ("goodput.json", report() | {"runner_up": report()["candidates"][0] | {"goodput": "fast"}},
                            "runner_up.goodput: expected a number or null, got 'fast'")]:
        at.session_state["plan.injected_upload"] = (name, json.dumps(r).encode())
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        (error,) = at.error
        assert error.value == f"{name}: not a plan.json of `python -m pagesim plan`: {words}", error.value
        assert not at.get("plotly_chart")


def plan_page_opening(name: str, content: bytes) -> AppTest:
    """The Plan page in Open plan.json mode, `content` uploaded as file `name` (the injected-upload seam)."""
    at = AppTest.from_file(str(REPO / "pagesim/dashboard/pages/plan.py"), default_timeout=180)
    at.session_state["plan.mode"] = "Open plan.json"
    at.session_state["plan.injected_upload"] = (name, content)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_plan_page_opens_a_gzip_compressed_plan_json():
    """A gzipped plan.json opens as the plan.json it holds, whatever its name (its magic bytes decide), as every trace
    reader reads a gzip file. Was: refused with "a gzip-compressed file; ... (decompress it first, e.g. with
    gunzip)"."""
    import gzip
    import json

    for name in ("plan.json.gz", "plan.json"):
        at = plan_page_opening(name, gzip.compress(json.dumps(report()).encode()))
        assert not at.error, [e.value for e in at.error]
        assert "Recommendation: num_gpus=2, tensor_parallel_size=2" in at.success[0].value
        assert len(at.get("plotly_chart")) == 1


def test_plan_page_names_a_gzip_upload_that_does_not_decompress_to_a_plan_json(monkeypatch):
    """Corrupt or cut-short gzip data, and content past the trace readers' size ceiling once decompressed, are named as
    the trace readers name them (the upload's name, not a temporary path); decompressed content that is empty, not
    UTF-8 or not JSON is named as a plain upload's is, "once decompressed"."""
    import gzip
    import json

    expected = "expected the JSON text `python -m pagesim plan` writes to DIR/plan.json"
    packed = gzip.compress(json.dumps(report()).encode())
    for name, content, words in [
        ("cut.json.gz", packed[:-12], "cut.json.gz: expected a complete gzip file, got the data ends early"),
        ("empty.json.gz", gzip.compress(b""),
         f"empty.json.gz: not a plan.json: an empty file once decompressed; {expected}"),
        ("png.json.gz", gzip.compress(b"\x89PNG\r\n\x1a\n"),
         f"png.json.gz: not a plan.json: not UTF-8 text once decompressed (byte 0x89 at offset 0: a binary file"),
        ("half.json.gz", gzip.compress(json.dumps(report()).encode()[:40]),
         "half.json.gz: not a plan.json: not JSON once decompressed (Unterminated string"),
    ]:
        at = plan_page_opening(name, content)
        (error,) = at.error
        assert error.value.startswith(words), error.value
        assert "pagesim-upload-" not in error.value, "the temporary folder is left out"
        assert not at.get("plotly_chart")
    monkeypatch.setenv("PAGESIM_MAX_TRACE_MB", "0.001")  # 1,000 bytes: the plan's JSON is larger
    at = plan_page_opening("plan.json.gz", packed)
    (error,) = at.error
    assert error.value == ("plan.json.gz: expected a plan.json of at most 0.001 MB (the limit on trace files, which "
                           "PAGESIM_MAX_TRACE_MB sets: raise it to open a larger one), got more than 0.001 MB once "
                           "decompressed"), error.value
    assert "trace file of at most" not in error.value, "a plan.json, not a trace file (was the trace readers' words)"


def test_plan_page_says_what_an_upload_that_is_not_json_text_is():
    """A binary file and an empty one: the message says what the file is and that the page expected plan.json's JSON
    text. Was: "not JSON ('utf-8' codec can't decode byte 0x89 in position 0: invalid start byte)" for the first, "not
    JSON (Expecting value: line 1 column 1 (char 0))" for the last."""
    import json

    expected = "expected the JSON text `python -m pagesim plan` writes to DIR/plan.json"
    for name, content, words in [
        ("pareto.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
         f"not UTF-8 text (byte 0x89 at offset 0: a binary file, or text in another encoding?); {expected}"),
        ("latin1.json", b'\xef\xbb\xbf{"model": "caf\xe9"}', "not UTF-8 text (byte 0xe9 at offset 17: "),  # after a BOM
        ("empty.json", b"", f"an empty file; {expected}"),
        ("cut.json", json.dumps(report()).encode()[:40], "not JSON (Unterminated string"),  # as before
    ]:
        at = plan_page_opening(name, content)
        (error,) = at.error
        assert error.value.startswith(f"{name}: not a plan.json: {words}"), error.value
        assert not at.get("plotly_chart")
