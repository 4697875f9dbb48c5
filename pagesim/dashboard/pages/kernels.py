"""Kernels: the paged attention kernels against contiguous SDPA (the ceiling) and gather + SDPA (naive paged)."""

from __future__ import annotations

import streamlit as st

from pagesim.dashboard import cached, figures, widgets
from pagesim.dashboard.kernel_results import (decode_frame, find_kernel_results, measurements_table, model_step_frame,
                                              prefill_frame, results_root, sdpa_backends)
from pagesim.errors import UserError

PREFIX = "kernels"


def render() -> None:
    st.title("Kernels")
    st.caption("GPU benchmark of the engine's Triton kernels (`python -m bench.kernels --out bench/results/NAME.json`): "
               "Llama-3-8B attention shapes (32 query heads, 8 KV heads, head dim 128), bf16, block size 16, block "
               "tables shuffled over the physical blocks. Contiguous SDPA reads K/V that was never paged: the "
               "ceiling. Gather + SDPA copies the blocks into place first: the naive way to run a paged cache.")
    paths = find_kernel_results()
    if not paths:
        st.info(f"No kernel benchmark results are committed yet: {results_root()} holds no .json file. They come "
                "from `python -m bench.kernels --out bench/results/kernels-GPU-DATE.json` on a GPU machine.")
        return
    with widgets.url_settings(PREFIX, known=("file",)):  # a result file in the URL that is not there is named, not silently replaced
        name = st.sidebar.selectbox("Result file (bench/results/)", [p.name for p in paths], bind=widgets.URL,
                                    key=f"{PREFIX}.file")
    path = next(p for p in paths if p.name == name)
    try:
        result = cached.kernel_result(str(path), path.stat().st_mtime)
    except UserError as exc:
        st.error(str(exc))
        return
    header(result)
    ceilings = result.get("ceilings", {})
    decode = decode_frame(result)
    st.subheader("Decode")
    st.plotly_chart(figures.decode_bandwidth_bars(decode, ceilings.get("copy_tb_per_s")), key=f"{PREFIX}.decode")
    backends = sdpa_backends(result)
    if backends:
        st.caption("The SDPA ceiling is the fastest SDPA backend on each shape ("
                   + ", ".join(f"{shape}: {b}" for shape, b in backends.items())
                   + "); every backend's time is in the table below.")
    prefill = prefill_frame(result)
    if len(prefill):
        st.subheader("Prefill")
        st.plotly_chart(figures.prefill_flops_bars(prefill, ceilings.get("bf16_matmul_tflop_per_s")),
                        key=f"{PREFIX}.prefill")
    step = model_step_frame(result)
    if len(step):
        st.subheader("A full decode step of the 8B model")
        st.dataframe(step, hide_index=True)
    elif "error" in (result.get("model_step") or {}):
        st.warning("The model-step benchmark failed; its error is in the result file.")
    st.subheader("All measurements")
    table = measurements_table(result)
    st.dataframe(table, hide_index=True, column_config={
        "time_us": st.column_config.NumberColumn("time (µs)", format="%.1f"),
        "tb_per_s": st.column_config.NumberColumn("TB/s", format="%.2f"),
        "tflop_per_s": st.column_config.NumberColumn("TFLOP/s", format="%.1f"),
        "vs_sdpa": st.column_config.NumberColumn("SDPA time / time", format="%.2f",
                                                 help="1.00: as fast as SDPA on contiguous K/V (same timing mode)"),
    })
    st.download_button("kernels.csv", lambda: table.to_csv(index=False), file_name="kernels.csv", mime="text/csv",
                       key=f"{PREFIX}.dl")


def header(result: dict) -> None:
    c = result.get("ceilings", {})
    cols = st.columns(4)
    cols[0].metric("GPU", result.get("gpu", "?"))
    cols[1].metric("Device copy", f"{c['copy_tb_per_s']:.2f} TB/s" if "copy_tb_per_s" in c else "–")
    cols[2].metric("bf16 matmul", f"{c['bf16_matmul_tflop_per_s']:.0f} TFLOP/s" if "bf16_matmul_tflop_per_s" in c else "–")
    cols[3].metric("Date", str(result.get("date", "?"))[:10])
    versions = ", ".join(f"{k} {result[k]}" for k in ("torch", "triton", "flashinfer", "python") if result.get(k))
    st.caption(f"{versions}. Command: `{result.get('command', '?')}`"
               + (f". FlashInfer not run: {result['flashinfer_import_error']}" if result.get("flashinfer_import_error")
                  else ""))


if __name__ == "__main__":
    render()
