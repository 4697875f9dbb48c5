"""Sidebar forms shared by the Replay and Sweep pages: where the trace comes from, and the engine config.

Each returns None after showing the problem with st.error when the input is invalid (a TraceError or
UserError message names the file, row and field), so pages never show a traceback for bad input.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import streamlit as st

from pagesim.config import MAX_SIMULATED_BLOCKS, Config
from pagesim.dashboard import cached, data, tables
from pagesim.dashboard.sweep import blocks_for_gib
from pagesim.errors import OptionError, UserError
from pagesim.options import readable
from pagesim.specs import GIB, GPUS, MODELS
from pagesim.traces import FORMATS, Trace
from pagesim.traces.sharegpt import SHAREGPT_RATE
from pagesim.traces.synth import PRESETS

SOURCES = ("Bundled trace", "Upload a file", "Synthetic")
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# Test seam: AppTest cannot drive st.file_uploader, so a (file name, bytes) pair placed in session
# state under f"{prefix}.injected_upload" is handled exactly as an uploaded file would be.
INJECTED_UPLOAD = "injected_upload"
# The last uploaded (file name, bytes), kept under f"{prefix}.kept_upload": Streamlit forgets a file uploader's
# file while another page is open, so the page replays the kept file until the user removes or replaces it.
KEPT_UPLOAD = "kept_upload"
URL = "query-params"  # every setting is in the page's URL (bind=), so a scenario can be bookmarked and shared
MEMORY_MODES = ("KV-cache GiB", "num_gpu_blocks", "gpu_memory_utilization")
KV_CACHE_DTYPES = ("auto", "fp8")
DEFAULT_KV_CACHE_GIB = 4.0  # data.DEFAULT_NUM_GPU_BLOCKS blocks of 16 tokens for Llama-3-8B
# The engine controls' labels, by the Config field each sets (memory_mode and kv_cache_gib: the KV-cache size's own):
# a config error names the control the user moved, not the CLI's flag (config_error).
LABELS = {
    "model": "Model", "gpu": "GPU", "block_size": "block_size (tokens per block)", "memory_mode": "KV-cache size",
    "kv_cache_gib": "KV-cache GiB (K/V bytes on the GPU)", "num_gpu_blocks": "num_gpu_blocks",
    "gpu_memory_utilization": "gpu_memory_utilization", "max_model_len": "max_model_len (0 = the model's context length)",
    "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_chunked_prefill": "enable_chunked_prefill", "kv_cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "enable_prefix_caching", "kv_offloading_size": "kv_offloading_size (GiB of host memory; 0 = off)",
    "preemption_mode": "preemption_mode", "swap_space": "swap_space (GiB of host memory for swapped-out blocks)",
}


URL_AT_OPEN = "url_at_open"  # f"{prefix}.url_at_open": the page's URL settings not yet checked against their controls
URL_REFUSED = "url_refused"  # f"{prefix}.url_refused": (key, URL values, value used instead), as found
URL_UNKNOWN = "url_unknown"  # f"{prefix}.url_unknown": (key, URL values) of the page's prefix that no control has
# config_sidebar's URL settings, by suffix (the keys of its controls)
CONFIG_KEYS = ("model", "gpu", "block_size", "memory_mode", "kv_cache_gib", "num_gpu_blocks", "gpu_memory_utilization",
               "max_model_len", "allow_long_max_model_len", "max_num_seqs", "max_num_batched_tokens", "chunked",
               "kv_cache_dtype", "prefix_caching", "kv_offloading_size", "preemption", "swap_space")


PAGE_PREFIXES = ("replay", "sweep", "live", "kernels", "plan")  # each page's URL settings are PREFIX.SETTING
STREAMLIT_PARAMS = ("embed", "embed_options")  # Streamlit's own


def url_notice(prefix: str, skip: tuple[str, ...] = (), known: tuple[str, ...] | None = None):
    """Call first on a page whose settings are bound to the URL: remembers the URL's settings the first time
    the session opens the page, and returns the placeholder where url_report names those refused. `known`: the
    suffixes of every setting the page has (drawn or not in this run); a URL setting of the page's prefix outside
    them (a typo, replay.blocksize=32, or a setting of another version) is named as ignored, and so is one with no
    page's prefix at all (blocksize=32: every setting is named PAGE.SETTING)."""
    key = f"{prefix}.{URL_AT_OPEN}"
    if key not in st.session_state:
        given = {k: st.query_params.get_all(k) for k in st.query_params if k.startswith(f"{prefix}.") and k not in skip}
        unknown = [] if known is None else [k for k in given if k.removeprefix(f"{prefix}.") not in known]
        stray = [k for k in st.query_params if k.partition(".")[0] not in PAGE_PREFIXES and k not in STREAMLIT_PARAMS]
        st.session_state[f"{prefix}.{URL_UNKNOWN}"] = ([(k, given.pop(k)) for k in unknown]
                                                       + [(k, st.query_params.get_all(k)) for k in stray])
        st.session_state[key] = given
    return st.empty()


def url_report(prefix: str, notice) -> None:
    """Call last: a warning in `notice` naming each URL setting its control refused (Streamlit drops a value a
    control cannot take, block size 7 or a GiB of 'abc', and shows the default without a word). A setting is
    checked once its control has been drawn; the notice stays until the user sets that control."""
    state = st.session_state
    pending = state.get(f"{prefix}.{URL_AT_OPEN}", {})
    refused = state.setdefault(f"{prefix}.{URL_REFUSED}", [])
    for k in [k for k in pending if k in state]:
        texts = pending.pop(k)
        if not _url_matches(texts, state[k]):
            refused.append((k, texts, state[k]))
    shown = [(k, texts, used) for k, texts, used in refused if k in state and state[k] == used]
    unknown = [(k, texts) for k, texts in state.get(f"{prefix}.{URL_UNKNOWN}", []) if k in st.query_params]
    parts = []
    if shown:
        parts.append("Settings in the URL that their control cannot take, so the default is used: " + "; ".join(
            f"{k}={(texts[0] if len(texts) == 1 else texts)!r} (using {list(used) if isinstance(used, (list, tuple)) else used})"
            for k, texts, used in shown) + ".")
    if unknown:
        parts.append("Settings in the URL that this page does not have, so they are ignored: " + "; ".join(
            f"{k}={(texts[0] if len(texts) == 1 else texts)!r}" for k, texts in unknown) + ".")
    if parts:
        notice.warning(" ".join(parts) + (" Check the link, or set those controls on the page." if shown else
                                          " Check the link."), icon=":material/link_off:")



@contextmanager
def url_settings(prefix: str, skip: tuple[str, ...] = (), known: tuple[str, ...] | None = None):
    """Around a page whose settings are bound to the URL: url_notice before it, url_report after it (also when the
    page stops early)."""
    notice = url_notice(prefix, skip, known)
    try:
        yield
    finally:
        url_report(prefix, notice)

def _url_matches(texts: list[str], value) -> bool:
    """Whether the URL's text(s) for a control are the value the control took (bools as true/false, numbers by
    value: "2" is 2.0, a multi-choice's items in any order)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    texts = [] if texts == [""] and not items else texts
    return len(texts) == len(items) and all(any(_url_same(t, item) for item in items) for t in texts)


def _url_same(text: str, item) -> bool:
    if isinstance(item, bool):
        return text.lower() == str(item).lower()
    if isinstance(item, (int, float)):
        try:
            return float(text) == float(item)
        except ValueError:
            return False
    return text == str(item)


def headline_dataframe(table, where=st) -> None:
    """tables.headline_table shown with each column rounded for reading (tables.headline_format): one home for the
    Replay and Sim vs Live pages' headline tables."""
    where.dataframe(table, column_config={c: st.column_config.NumberColumn(format=tables.headline_format(c))
                                          for c in table.columns})


def trace_source(prefix: str, *, default_limit: int = data.DEFAULT_LIMIT) -> tuple[Trace, str] | None:
    """Sidebar: a bundled trace, an uploaded file, or the synthetic generator's form. (trace, fingerprint)."""
    sb = st.sidebar
    sb.subheader("Trace")
    bundled = data.bundled_traces()
    sources = SOURCES if bundled else SOURCES[1:]
    source = sb.radio("Source", sources, bind=URL, key=f"{prefix}.source", horizontal=False)
    try:
        if source == "Bundled trace":
            names = [p.name for p in bundled]
            name = sb.selectbox("Bundled trace (traces/)", names, bind=URL, key=f"{prefix}.bundled")
            limit = sb.number_input("First N requests (0 = all)", 0, 10_000_000, step=100, bind=URL,
                                    key=f"{prefix}.limit", **_default(f"{prefix}.limit", value=default_limit))
            path = data.TRACES_DIR / name
            return cached.bundled_trace(str(path), path.stat().st_mtime, int(limit) or None)
        if source == "Upload a file":
            return _uploaded(prefix)
        return _synthetic(prefix)
    except UserError as exc:
        st.error(str(exc))
        return None


TRACE_SOURCE_KEYS = ("source", "bundled", "limit", "format", "upload_limit", "upload_rate", KEPT_UPLOAD, INJECTED_UPLOAD, "preset",
                     "num_requests", "rate", "arrival", "cv", "seed")  # trace_source's session values, by suffix


def trace_source_values(prefix: str) -> dict:
    """Page `prefix`'s trace_source settings (every value the session holds), by suffix."""
    return {suffix: st.session_state[f"{prefix}.{suffix}"] for suffix in TRACE_SOURCE_KEYS
            if f"{prefix}.{suffix}" in st.session_state}


def carry_trace_source(src: str, dst: str, values: dict | None = None) -> None:
    """Set page `dst`'s trace_source to page `src`'s (every value `src` holds), or to `values` saved earlier by
    trace_source_values, so `dst` opens on the same trace."""
    for suffix, value in (trace_source_values(src) if values is None else values).items():
        st.session_state[f"{dst}.{suffix}"] = value


def _uploaded(prefix: str) -> tuple[Trace, str] | None:
    sb = st.sidebar
    kept = f"{prefix}.{KEPT_UPLOAD}"
    file = sb.file_uploader("Trace file (Azure, BurstGPT, Mooncake, Vidur, ShareGPT or pagesim)",
                            key=f"{prefix}.upload", on_change=_forget_upload, args=(kept,))
    if file is not None:
        st.session_state[kept] = (file.name, file.getvalue())
    elif kept in st.session_state:  # uploaded before another page was opened: the uploader shows no file now
        name = st.session_state[kept][0]
        sb.caption(f"Replaying **{name}**, uploaded earlier in this session; upload another file to replace it.")
        sb.button(f"Forget {name}", key=f"{prefix}.forget_upload", on_click=_forget_upload, args=(kept,))
    fmt = sb.selectbox("Format", FORMATS, bind=URL, key=f"{prefix}.format")
    limit = sb.number_input("First N requests (0 = all)", 0, 10_000_000, step=100, bind=URL,
                            key=f"{prefix}.upload_limit", **_default(f"{prefix}.upload_limit", value=data.DEFAULT_LIMIT))
    upload = st.session_state.get(kept) or st.session_state.get(f"{prefix}.{INJECTED_UPLOAD}")
    if upload is None:
        st.info("Upload a trace file in the sidebar to replay it.")
        return None
    name, content = upload
    loaded = cached.uploaded_trace(name, content, fmt, int(limit) or None, None)
    if not data.arrivals_drawn(loaded[0]):
        return loaded
    rate = sb.number_input("Arrival rate (req/s)", 0.01, 10_000.0, bind=URL, key=f"{prefix}.upload_rate",
                           **_default(f"{prefix}.upload_rate", value=SHAREGPT_RATE),
                           help="the file has no arrival times: its requests arrive as a Poisson process at this mean "
                                "rate, in file order (`replay --rate`)")
    # None and SHAREGPT_RATE draw the same arrivals: the file is read once at the default rate
    return loaded if rate == SHAREGPT_RATE else cached.uploaded_trace(name, content, fmt, int(limit) or None, float(rate))


def _forget_upload(kept: str) -> None:
    """The uploader's file was removed or replaced, or Forget was pressed: drop the kept upload."""
    st.session_state.pop(kept, None)


def _synthetic(prefix: str) -> tuple[Trace, str]:
    sb = st.sidebar
    preset = sb.selectbox("Preset", list(PRESETS), bind=URL, key=f"{prefix}.preset", help="pagesim.traces.synth.PRESETS")
    n = sb.number_input("Requests", 1, 1_000_000, step=100, bind=URL, key=f"{prefix}.num_requests",
                        **_default(f"{prefix}.num_requests", value=500))
    rate = sb.number_input("Rate (req/s)", 0.01, 10_000.0, bind=URL, key=f"{prefix}.rate",
                           **_default(f"{prefix}.rate", value=10.0))
    arrival = sb.selectbox("Arrival process", ["poisson", "gamma"], bind=URL, key=f"{prefix}.arrival")
    cv = sb.number_input("Gamma CV (> 1 burstier than Poisson)", 0.05, 20.0, bind=URL, key=f"{prefix}.cv",
                         disabled=arrival == "poisson", **_default(f"{prefix}.cv", value=2.0))
    seed = sb.number_input("Seed", 0, 2**31 - 1, bind=URL, key=f"{prefix}.seed", **_default(f"{prefix}.seed", value=0))
    return cached.synthetic_trace(preset, int(n), float(rate), arrival, float(cv) if arrival == "gamma" else 1.0,
                                  int(seed))


def config_sidebar(prefix: str, *, memory: bool = True, block_size: bool = True,
                   preemption: bool = True, prefix_caching: bool = True) -> Config | None:
    """Sidebar: model, GPU, memory, block size, scheduler budgets and policies; the Config, or None after
    st.error when it is invalid. Knobs a sweep varies can be left out (they keep Config's defaults)."""
    sb = st.sidebar
    sb.subheader("Engine")
    models = [m for m in MODELS if m != "toy"]
    model = sb.selectbox(LABELS["model"], models, bind=URL, key=f"{prefix}.model",
                         **_default(f"{prefix}.model", index=models.index("llama-3-8b")))
    gpu = sb.selectbox(LABELS["gpu"], list(GPUS), bind=URL, key=f"{prefix}.gpu")
    bs = 16
    if block_size:
        bs = sb.selectbox(LABELS["block_size"], BLOCK_SIZES, bind=URL, key=f"{prefix}.block_size",
                          **_default(f"{prefix}.block_size", index=BLOCK_SIZES.index(16)))
    changes, gib = {}, None
    if memory:
        mode = sb.radio(LABELS["memory_mode"], MEMORY_MODES, bind=URL, key=f"{prefix}.memory_mode", horizontal=True,
                        help="GiB holds the bytes fixed when block_size changes (num_gpu_blocks = GiB / bytes per "
                             "block); num_gpu_blocks holds the block count fixed, so bytes grow with block_size")
        if mode == "KV-cache GiB":
            gib = sb.number_input(LABELS["kv_cache_gib"], 0.01, 4096.0, DEFAULT_KV_CACHE_GIB, step=0.5,
                                  bind=URL, key=f"{prefix}.kv_cache_gib")
        elif mode == "num_gpu_blocks":
            changes["num_gpu_blocks"] = int(sb.number_input(LABELS["num_gpu_blocks"], 1, MAX_SIMULATED_BLOCKS,
                                                            data.DEFAULT_NUM_GPU_BLOCKS, step=256, bind=URL,
                                                            key=f"{prefix}.num_gpu_blocks"))
        else:
            changes["gpu_memory_utilization"] = sb.slider(LABELS["gpu_memory_utilization"], 0.05, 1.0, step=0.01, bind=URL,
                                                          key=f"{prefix}.gpu_memory_utilization",
                                                          **_default(f"{prefix}.gpu_memory_utilization", value=0.9))
    max_model_len = sb.number_input(LABELS["max_model_len"], 0, 10_000_000, 0, step=1024,
                                    bind=URL, key=f"{prefix}.max_model_len",
                                    help="requests whose prompt + output exceed it are rejected, as in vLLM")
    if max_model_len:
        changes["max_model_len"] = int(max_model_len)
        window = MODELS[model].max_position_embeddings
        if max_model_len > window:  # refused, as in vLLM, unless allowed (--allow-long-max-model-len)
            changes["allow_long_max_model_len"] = sb.checkbox(
                allow_long_label(model), False, bind=URL,
                key=f"{prefix}.allow_long_max_model_len",
                help="the model was not trained for such lengths; the simulation runs them all the same")
    max_num_seqs = sb.number_input(LABELS["max_num_seqs"], 1, 100_000, bind=URL, key=f"{prefix}.max_num_seqs",
                                   **_default(f"{prefix}.max_num_seqs", value=256))
    max_batched = sb.number_input(LABELS["max_num_batched_tokens"], 1, 10_000_000, step=1024, bind=URL,
                                  key=f"{prefix}.max_num_batched_tokens",
                                  **_default(f"{prefix}.max_num_batched_tokens", value=8192))
    chunked = sb.checkbox(LABELS["enable_chunked_prefill"], True, bind=URL, key=f"{prefix}.chunked")
    changes["kv_cache_dtype"] = sb.selectbox(LABELS["kv_cache_dtype"], KV_CACHE_DTYPES, bind=URL, key=f"{prefix}.kv_cache_dtype",
                                             help="auto: the model's dtype; fp8: e4m3 K/V (vLLM's fp8), half the bytes "
                                                  "per token, so twice the blocks in the same GiB")
    if prefix_caching:
        caching = sb.checkbox(LABELS["enable_prefix_caching"], False, bind=URL, key=f"{prefix}.prefix_caching")
        changes["enable_prefix_caching"] = caching
        offload = sb.number_input(LABELS["kv_offloading_size"], 0.0, 1_000_000.0, 0.0, step=1.0,
                                  bind=URL, key=f"{prefix}.kv_offloading_size", disabled=not caching,
                                  help="a host (CPU) tier behind the GPU prefix cache, as vLLM's native KV offloading; "
                                       "needs enable_prefix_caching")
        if caching and offload:
            changes["kv_offloading_size"] = float(offload)
    if preemption:
        changes["preemption_mode"] = sb.radio(LABELS["preemption_mode"], ["recompute", "swap"], bind=URL, key=f"{prefix}.preemption",
                                              horizontal=True)
        if changes["preemption_mode"] == "swap":
            changes["swap_space"] = swap_space(prefix)
    try:
        if gib is not None:  # a stand-in count while the block size is learnt: not the memory left by the weights
            changes["num_gpu_blocks"] = 1
        config = Config(model=model, gpu=gpu, block_size=int(bs), max_num_seqs=int(max_num_seqs),
                        max_num_batched_tokens=int(max_batched), enable_chunked_prefill=chunked, **changes)
        if gib is not None:
            config = config.replace(num_gpu_blocks=blocks_for_gib(config, gib))
        if memory:
            sb.caption(memory_caption(config))
        return config
    except OptionError as exc:
        st.error(config_error(exc, Config(model=model, gpu=gpu, block_size=int(bs), num_gpu_blocks=1,
                                          kv_cache_dtype=changes["kv_cache_dtype"])))
        return None
    except UserError as exc:
        st.error(str(exc))
        return None


def swap_space(prefix: str) -> float:
    """Sidebar: swap_space, for a page that simulates swap preemption (Replay's config, Sweep's grid). Drawn in swap mode
    only; bound to the URL, its value is kept while it is hidden (Streamlit's bind outranks persist_state)."""
    return float(st.sidebar.number_input(LABELS["swap_space"], 0.0, 1_000_000.0, 4.0, step=1.0, bind=URL,
                                         key=f"{prefix}.swap_space",
                                         help="CPU memory for the KV blocks of preempted requests, as vLLM's "
                                              "swap_space; a preemption that does not fit there recomputes instead"))


def allow_long_label(model: str) -> str:
    return f"allow max_model_len beyond {model}'s window ({MODELS[model].max_position_embeddings:,} positions)"


def control(option: str, model: str) -> str:
    """The sidebar control that sets Config field `option`, as a message names it: its label's name, in bold."""
    label = allow_long_label(model) if option == "allow_long_max_model_len" else LABELS.get(option, option)
    return f"**{label.split(' (')[0]}**"


def config_error(exc: OptionError, geometry: Config) -> str:
    """A config the sidebar's settings make, refused, in the sidebar's words: each option named by its control, and
    what to set there where the CLI's advice names its flags (`--num-gpu-blocks`) or says "raise it" at 1.0.
    `geometry`: the sidebar's model, GPU, block size and KV dtype (their blocks' bytes)."""
    name = lambda option: control(option, geometry.model)  # noqa: E731
    advice = None
    if exc.option == "gpu_memory_utilization":  # no KV memory left by the weights, or more blocks than the simulator holds
        itself = f"the size set itself ({name('memory_mode')}: KV-cache GiB or num_gpu_blocks)"
        bounds = geometry.gpu_memory_utilization_range()
        low, high = (math.ceil(bounds[0] * 100) / 100, math.floor(bounds[1] * 100) / 100) if bounds else (1, 0)
        advice = (f"expected {name('gpu_memory_utilization')} from {low:.2f} to {high:.2f} for {geometry.model} on "
                  f"{geometry.gpu} at block_size {geometry.block_size}, or {itself}" if low <= high else
                  f"expected {itself} or another {name('gpu')}: no {name('gpu_memory_utilization')} up to 1.0 leaves "
                  f"KV-cache memory beside {geometry.model}'s weights on one {geometry.gpu}")
    elif exc.option in ("kv_offloading_size", "swap_space"):  # more host blocks than the simulator holds
        most = MAX_SIMULATED_BLOCKS * geometry.block_bytes / GIB
        advice = f"expected at most {math.floor(most * 100) / 100:,g} GiB at this block_size and kv_cache_dtype"
    elif exc.option == "max_model_len":  # beyond the model's window
        window = MODELS[geometry.model].max_position_embeddings
        advice = (f"expected at most {window:,} (0: the model's own), a {name('model')} with a longer window "
                  f"(e.g. llama-3.1-8b), or tick {name('allow_long_max_model_len')} below it")
    return exc.in_words(name, advice=advice)


def in_page_words(text: str) -> str:
    """A warning of the CLI (pagesim.run_warnings) as a page shows it: its options by their sidebar names
    (`enable_prefix_caching`, not --enable-prefix-caching), without the pointers to the CLI's files."""
    import re

    text = text.split("; requests.parquet")[0]  # the page's tables, not the CLI's files
    text = re.sub(r" \(--[a-z-]+\)", "", text)  # "max_model_len 1,024 (--max-model-len)": named already
    text = re.sub(r"--slo ([a-z0-9_]+=[0-9.eE+-]+)", r"SLO `\1`", text)  # "SLO `tpot_p99=0.05`", not "`slo` tpot_p99=0.05"
    return re.sub(r"--([a-z][a-z-]*)", lambda m: f"`{m.group(1).replace('-', '_')}`", text)


def _default(key: str, **default) -> dict:
    """A widget's default, only while the session holds no value for its key: another page may have set it (Plan's
    Open in Replay), and Streamlit logs a warning with a stack when a widget gets both."""
    return {} if key in st.session_state else default


def memory_caption(config: Config) -> str:
    """The KV cache in blocks, token slots and GiB, and what the GPU would hold at utilization 0.9."""
    blocks = config.resolved_num_gpu_blocks
    text = (f"{_count(blocks, 'block')} × {_count(config.block_size, 'token')} = "
            f"{_count(blocks * config.block_size, 'token slot')} = {_size(blocks * config.block_bytes)} of K/V for "
            f"{config.model}" + (f" in {config.kv_cache_dtype}" if config.kv_cache_dtype != "auto" else ""))
    if config.num_gpu_blocks is not None:
        try:
            full = config.replace(num_gpu_blocks=None, gpu_memory_utilization=0.9).resolved_num_gpu_blocks
            text += f" (an {config.gpu} at gpu_memory_utilization 0.9 holds {_count(full, 'block')})"
        except UserError:
            pass
    if config.num_offload_blocks:
        text += (f"; host tier {_count(config.num_offload_blocks, 'block')} = "
                 f"{_size(config.num_offload_blocks * config.block_bytes)}")
    return text


def _count(n: int, noun: str) -> str:
    """'1 block', '2,048 blocks'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _size(num_bytes: float) -> str:
    """Bytes for the memory caption: '4.00 GiB' from 1 GiB up, else MiB to three significant digits ('2 MiB', '384
    MiB', '0.125 MiB'), so a cache of a few blocks does not read '0.00 GiB'."""
    gib = num_bytes / GIB
    return f"{gib:.2f} GiB" if gib >= 1 else f"{readable(num_bytes / 2**20)} MiB"

