"""Plan: the deployment that meets latency SLOs with the fewest GPUs, and the GPUs-goodput frontier."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from pagesim.dashboard import data, widgets
from pagesim.dashboard.json_shape import number, shape_problem
from pagesim.dashboard.plan_figures import pareto_figure
from pagesim.dashboard.widgets import URL
from pagesim.errors import UserError
from pagesim.plan import SHOWN, TP_DEGREES, NoDeployment, deployments, describe, figure, option_error, run_plan
from pagesim.slo import parse_slos
from pagesim.specs import GPUS, MODELS
from pagesim.traces import TraceError
from pagesim.traces.text import GZIP_MAGIC

PREFIX = "plan"
REPORT = f"{PREFIX}.report"  # the plan last run on this page
# every URL setting of the page, by suffix (widgets.url_notice names any other as ignored)
URL_KEYS = (*widgets.TRACE_SOURCE_KEYS, "mode", "model", "gpu", "max_gpus", "ttft", "tpot", "seqs", "tokens")
PLANNED = f"{PREFIX}.planned"  # what it was run on: {"key": the trace's fingerprint, "source": its trace_source values}


def render() -> None:
    st.title("Plan")
    st.caption("Every deployment of at most K GPUs (tensor-parallel degree x replicas x router x engine knobs) "
               "simulated on one trace; the recommendation meets every SLO with the fewest GPUs, then the highest "
               "goodput. Same search as `python -m pagesim plan`; a finished plan.json opens here too.")
    with widgets.url_settings(PREFIX, known=URL_KEYS):  # every setting is in the URL, as on the other pages
        source = st.sidebar.radio("Plan", ["Run a plan", "Open plan.json"], bind=URL, key=f"{PREFIX}.mode")
        opened = source == "Open plan.json"
        report = open_report() if opened else run_report()
        if report is not None:
            show(report, opened)


REPORT_KEYS = ("slos", "model", "gpu", "max_gpus", "evaluated", "recommendation", "runner_up", "candidates", "pareto")
CANDIDATE_COLUMNS = ("config_id", "status", "num_gpus", "tensor_parallel_size", "replicas", "router", "goodput",
                     "slo_met", "slo_attainment")  # what show() and the figure read from each candidate
PARETO_COLUMNS = ("num_gpus", "goodput")  # ... and from each point of the frontier


def open_report() -> dict | None:
    file = st.sidebar.file_uploader("plan.json (from `python -m pagesim plan ... --out DIR`; gzip-compressed too)",
                                    type=["json", "gz"], key=f"{PREFIX}.upload")
    # (file name, bytes) under f"{PREFIX}.{INJECTED_UPLOAD}": the same test seam as widgets.trace_source's
    upload = (file.name, file.getvalue()) if file is not None else st.session_state.get(f"{PREFIX}.{widgets.INJECTED_UPLOAD}")
    if upload is None:
        st.info("Upload a plan.json to see its frontier.")
        return None
    name, content = upload
    gzipped = content[:2] == GZIP_MAGIC  # read as its content, as every trace reader reads a gzip file
    try:
        content = data.upload_content(name, content)
    except TraceError as exc:  # corrupt or cut short, or past the size ceiling once decompressed
        st.error(_upload_error(name, exc))
        return None
    try:
        report = json.loads(content)
    except ValueError as exc:
        st.error(f"{name}: not a plan.json: {_not_json(content, exc, gzipped)}")
        return None
    problem = _report_problem(report)
    if problem:
        st.error(f"{name}: not a plan.json of `python -m pagesim plan`: {problem}")
        return None
    return report


PLAN_JSON = "the JSON text `python -m pagesim plan` writes to DIR/plan.json"


def _upload_error(name: str, exc: TraceError) -> str:
    """A gzip upload's TraceError as this page says it: past the size ceiling, the plan.json it would hold (the trace
    readers' ceiling, which decompressed it, and their variable); corrupt or cut short, as the readers say it. Was:
    "expected a trace file of at most 2,048 MB", for a plan.json."""
    from pagesim.options import readable
    from pagesim.traces.text import MAX_TRACE_MB_VAR, TooLarge, max_trace_bytes

    if not isinstance(exc, TooLarge):
        return str(exc)
    limit = readable(max_trace_bytes() / 1e6)
    return (f"{name}: expected a plan.json of at most {limit} MB (the limit on trace files, which "
            f"{MAX_TRACE_MB_VAR} sets: raise it to open a larger one), got {exc.got}")


def _not_json(content: bytes, exc: ValueError, gzipped: bool = False) -> str:
    """Why an upload (a gzip file's decompressed content) is not JSON, saying what it is when it is not JSON text: an
    empty file, or bytes that are not UTF-8 text (a binary file). Was: "not JSON ('utf-8' codec can't decode byte 0x89
    in position 0: invalid start byte)" for a binary file, "not JSON (Expecting value: line 1 column 1 (char 0))" for an
    empty one."""
    once = " once decompressed" if gzipped else ""
    if not content.strip():
        return f"an empty file{once}; expected {PLAN_JSON}"
    if isinstance(exc, UnicodeDecodeError):
        at = len(content) - len(exc.object) + exc.start  # in the content (json.loads decodes past a UTF-8 BOM)
        return (f"not UTF-8 text{once} (byte {content[at]:#04x} at offset {at:,}: a binary file, or text in another "
                f"encoding?); expected {PLAN_JSON}")
    return f"not JSON{once} ({exc})"


def _report_problem(report) -> str | None:
    """What keeps `report` from being shown (missing keys, candidate or frontier fields, an SLO it cannot read), or
    None."""
    if not isinstance(report, dict):
        return f"expected a JSON object with keys {', '.join(REPORT_KEYS)}, got a {type(report).__name__}"
    missing = [k for k in REPORT_KEYS if k not in report]
    if missing:
        return f"missing {', '.join(missing)} (expected keys {', '.join(REPORT_KEYS)})"
    problem = shape_problem(report, REPORT_SCHEMA)
    if problem:
        return problem
    try:
        parse_slos(report["slos"], where="slos")
    except UserError as exc:
        return str(exc)
    return None


WHOLE_COLUMNS = ("num_gpus", "tensor_parallel_size", "replicas")  # a candidate's counts (and, run ok, its knobs)
KNOB_COLUMNS = ("max_num_seqs", "max_num_batched_tokens", "block_size")  # what Open in Replay carries
# What show(), the figure and Open in Replay read of a plan.json (past its keys), as a JSON Schema (json_shape): a
# candidate that did not run (status not ok) needs only its counts; goodput and attainment may be null.
_CANDIDATE = {"required": list(CANDIDATE_COLUMNS),
              "properties": {**{c: number("a whole number", whole=True) for c in WHOLE_COLUMNS},
                             **{c: number("a number or null", null=True) for c in ("goodput", "slo_attainment")}},
              "if": {"required": ["status"], "properties": {"status": {"const": "ok"}}},
              "then": {"required": list(KNOB_COLUMNS),
                       "properties": {c: number("a whole number", whole=True) for c in KNOB_COLUMNS}}}
REPORT_SCHEMA = {"properties": {
    "candidates": {"type": "array", "minItems": 1, "expected": "a non-empty list of candidate objects",
                   "items": {"type": "object", "expected": "a candidate object", **_CANDIDATE}},
    "recommendation": {"type": ["object", "null"], "expected": "a candidate object or null", **_CANDIDATE},
    "runner_up": {"type": ["object", "null"], "expected": "a candidate object or null", **_CANDIDATE},
    "pareto": {"type": "array", "expected": f"a list of objects with {', '.join(PARETO_COLUMNS)}",
               "items": {"type": "object", "expected": f"an object with {', '.join(PARETO_COLUMNS)}",
                         "required": list(PARETO_COLUMNS),
                         "properties": {"num_gpus": number(), "goodput": number("a number or null", null=True)}}},
    "slos": {"type": "array", "expected": 'a list such as ["ttft_p99=1"]'},
}}


def run_report() -> dict | None:
    loaded = widgets.trace_source(PREFIX)
    sb = st.sidebar
    with sb.form(f"{PREFIX}.form"):
        models = sorted(m for m in MODELS if m != "toy")  # toy fills a GPU with more blocks than the simulator holds
        model = st.selectbox("Model", models, index=models.index("llama-3-8b"), bind=URL, key=f"{PREFIX}.model")
        gpu = st.selectbox("GPU", list(GPUS), bind=URL, key=f"{PREFIX}.gpu")
        max_gpus = st.number_input("Max GPUs", 1, 64, 4, bind=URL, key=f"{PREFIX}.max_gpus")
        ttft = st.number_input("TTFT p99 SLO (s)", 0.01, 600.0, 1.0, bind=URL, key=f"{PREFIX}.ttft")  # an SLO is > 0
        tpot = st.number_input("TPOT p99 SLO (s)", 0.001, 10.0, 0.05, format="%.3f", bind=URL, key=f"{PREFIX}.tpot")
        seqs = st.multiselect("max_num_seqs", [64, 128, 256, 512], default=[256], bind=URL, key=f"{PREFIX}.seqs")
        tokens = st.multiselect("max_num_batched_tokens", [2048, 4096, 8192, 16384], default=[8192], bind=URL,
                                key=f"{PREFIX}.tokens")
        submitted = st.form_submit_button("Run plan", type="primary")
    if loaded is None:
        return None
    if not submitted and REPORT not in st.session_state:
        st.info("Choose the SLOs and press **Run plan** in the sidebar.")
        return None
    if submitted:
        trace, _ = loaded
        bar = st.progress(0.0, "simulating candidates")
        try:
            slos = parse_slos([f"ttft_p99={ttft}", f"tpot_p99={tpot}"])
            base = _base(model, gpu)
            # The report is what the page keeps (run_plan returns plan.json's content); the sweep's files go with it.
            with tempfile.TemporaryDirectory(prefix="pagesim-plan-") as out:
                report = run_plan(trace, base, slos, int(max_gpus), out, backend="local", progress=False,
                                  search={"max_num_seqs": seqs or [256], "max_num_batched_tokens": tokens or [8192],
                                          "block_size": [16]},
                                  on_row=lambda row, done, total: bar.progress(done / total, f"{done}/{total} candidates"))
        except NoDeployment as exc:
            st.error(no_deployment(exc, base))
            return None
        except UserError as exc:
            st.error(str(exc))
            return None
        finally:
            bar.empty()
        st.session_state[REPORT] = report
        st.session_state[PLANNED] = {"key": loaded[1], "source": widgets.trace_source_values(PREFIX)}
    report = st.session_state[REPORT]
    planned = st.session_state.get(PLANNED)
    if planned is not None and planned["key"] != loaded[1]:
        st.warning(f"The trace in the sidebar has changed since this plan ran: the plan below is still the one for "
                   f"**{report.get('trace', 'the earlier trace')}**. Press **Run plan** to plan for the trace now "
                   f"chosen.", icon=":material/pending:")
    return report


def no_deployment(exc: NoDeployment, base: dict) -> str:
    """No deployment within Max GPUs, in the form's words: why each tensor-parallel degree was refused (without the
    CLI's advice, "raise it or pass --num-gpu-blocks", options this page does not have), and the Max GPUs that would
    leave one, when some does."""
    reasons = []
    for tp, error in exc.refused:
        option = option_error(error)
        why = str(error) if option is None else option.in_words(
            lambda name: "the plan's gpu_memory_utilization" if name == "gpu_memory_utilization" else name, advice="")
        reasons.append(f"at tensor_parallel_size {tp}, {why}")
    deps, _ = deployments(base, TP_DEGREES[-1], ["round-robin"])
    fewest = min((d["tensor_parallel_size"] for d in deps), default=None)
    expected = (f"expected **Max GPUs** of at least {fewest} (tensor parallelism splits the weights over them) or "
                f"another **GPU**" if fewest is not None else
                f"expected another **Model** or **GPU**: no deployment of up to {TP_DEGREES[-1]} GPUs fits either")
    gpus = f"{exc.max_gpus} {base['gpu']} GPU" + ("s" if exc.max_gpus != 1 else "")
    return f"No deployment of {base['model']} on at most {gpus}: {'; '.join(reasons)}. {expected}."


def _base(model: str, gpu: str) -> dict:
    """The replay options a plan starts from (the CLI's defaults)."""
    from pagesim.cli import command_parser
    from pagesim.sweep import NOT_SWEPT

    args = command_parser("plan").parse_args(["trace", "--out", "unused", "--model", model, "--gpu", gpu])
    return {k: v for k, v in vars(args).items() if k not in NOT_SWEPT}


def show(report: dict, opened: bool = False) -> None:
    """The plan: run on this page, or `opened` from a plan.json (whose trace the page does not have)."""
    slos = parse_slos(report["slos"])
    rec, runner = report["recommendation"], report["runner_up"]
    st.markdown(f"**{report['evaluated']}** candidates of {report['model']} on at most {report['max_gpus']} "
                f"{report['gpu']} GPUs, SLOs {', '.join(report['slos'])}"
                + (f", trace **{report['trace']}**" if report.get("trace") else "")
                + (f"; **{report['failed']}** failed (the table's error column says why)" if report.get("failed") else ""))
    for line in report.get("skipped") or []:  # what `plan` prints as "skipped ..." and plan.json keeps
        st.info(f"Not searched: {line}", icon=":material/block:")
    for line in report.get("warnings") or []:  # "(K of N configurations): TEXT", as `plan` prints them
        st.warning("In " + widgets.in_page_words(line.lstrip("(").replace("):", ":", 1)), icon=":material/warning:")
    if rec is not None:
        st.success("Recommendation: " + describe(rec, slos).replace("\n    ", " · "))
    else:
        st.warning("No candidate meets the SLOs.")
    if runner is not None:
        st.info(("Runner-up: " if rec is not None else "Closest: ") + describe(runner, slos).replace("\n    ", " · "))
    candidates = pd.DataFrame(report["candidates"])
    pareto = pd.DataFrame(report["pareto"])
    st.plotly_chart(pareto_figure(candidates, pareto, rec), key=f"{PREFIX}.figure")
    shown = [c for c in (*SHOWN, "goodput", "slo_attainment", "slo_met", "ttft_s_p99", "tpot_s_p99", "status",
                         "error", "config_id") if c in candidates]
    st.dataframe(candidates[shown], hide_index=True)
    open_in_replay(candidates, report, opened)


def open_in_replay(candidates: pd.DataFrame, report: dict, opened: bool = False) -> None:
    """Carry one candidate's engine knobs to the Replay page's sidebar (replicas and TP are not on that page), its
    KV memory included (the plan ran each candidate on its GPUs' memory at the CLI's gpu_memory_utilization, not the
    Replay page's default 4 GiB), and the plan's trace (the page would otherwise replay its own): the trace the plan
    ran on, even when the sidebar has another by now. An `opened` plan.json names its trace but does not hold it:
    Replay keeps its own trace, and the page says so."""
    ok = candidates[candidates["status"] == "ok"]
    if not len(ok):
        return
    choice = st.selectbox("Open a candidate in Replay", ok["config_id"], key=f"{PREFIX}.open",
                          format_func=lambda cid: _label(ok[ok["config_id"] == cid].iloc[0]))
    row = ok[ok["config_id"] == choice].iloc[0]
    if int(row["tensor_parallel_size"]) > 1 or int(row["replicas"]) > 1:
        st.caption(f"Replay simulates one engine on one GPU: this candidate's tensor parallelism "
                   f"({int(row['tensor_parallel_size'])}) and replicas ({int(row['replicas'])}) stay behind, so its "
                   f"figures there are one GPU's, not the plan's.")
    if opened:
        st.caption(f"This plan ran on the trace **{report.get('trace', '?')}**, which plan.json names but does not hold: "
                   f"Replay opens on the trace chosen on its own page; choose that trace there to see the plan's "
                   f"figures.")
    if st.button("Open in Replay", key=f"{PREFIX}.open_button"):
        st.session_state["replay.model"], st.session_state["replay.gpu"] = report["model"], report["gpu"]
        for key in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            st.session_state[f"replay.{key}"] = int(row[key])
        st.session_state["replay.memory_mode"] = "gpu_memory_utilization"
        st.session_state["replay.gpu_memory_utilization"] = float(_base(report["model"], report["gpu"])["gpu_memory_utilization"])
        if not opened:  # the trace the plan ran on (a plan.json's trace is not here)
            planned = st.session_state.get(PLANNED)
            widgets.carry_trace_source(PREFIX, "replay", planned["source"] if planned is not None else None)
        # query_params={}: the URL is cleared as a plain switch_page would, but without the check that refuses to clear
        # parameters bound to this page's widgets (plan.limit=20 in the URL made Open in Replay raise
        # StreamlitAPIException "Cannot clear query parameters - the following are bound to widgets")
        st.switch_page("pagesim/dashboard/pages/replay.py", query_params={})


def _label(row) -> str:
    goodput = figure(row.get("goodput"))  # None when every request was rejected
    return (f"{int(row['num_gpus'])} GPUs: TP {int(row['tensor_parallel_size'])} x {int(row['replicas'])} "
            f"({row['router']}), max_num_seqs {int(row['max_num_seqs'])}, "
            f"goodput {'n/a' if goodput is None else f'{goodput:.3g}'}")


if __name__ == "__main__":
    render()
