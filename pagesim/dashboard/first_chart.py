"""A new session's first chart before its heavy ones.

A new session's first chart is the trace overview, drawn with Vega-Lite (trace_chart.py), whose
bundle is a sixth of plotly's; Streamlit's browser code draws every plotly chart of a run in one go
once plotly.js has loaded (~1 s to fetch and parse, ~1.3 s to evaluate on a 2-core machine) and then
needs about a second more to draw them. A page's first run in a session therefore stops after its
light part with `wait_for_first_chart()`: a script-only component, mounted in its place, watches the
page for a drawn chart of either kind and then reruns the script (at most MAX_WAIT_MS later if none
appears), and every later run of the session draws everything at once. AppTest runs no browser code:
tests set `session_state[DRAWN] = True` to stand for the browser's signal.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

DRAWN = "first_chart.drawn"
# A drawn chart of either kind: plotly's SVG, or the SVG or canvas vega-embed draws a Vega-Lite chart into.
DRAWN_CHART = ('.js-plotly-plot svg.main-svg, [data-testid="stVegaLiteChart"] svg.marks g, '
               '[data-testid="stVegaLiteChart"] canvas.marks')
MAX_WAIT_MS = 5000

# Streamlit's charting bundle (plotly.js, ~4.7 MB), which its page code loads only when a chart element
# arrives. The file name carries a hash of the installed Streamlit's build. `preload(name)` imports it by
# the URL Streamlit's page code uses, so it loads and runs once.
_BUNDLE = next((p.name for p in (Path(st.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js")), None)
_PRELOAD = """
function preload(name) {
  const index = document.querySelector('script[src*="/static/js/index."]');
  if (name && index) import(new URL(name, index.src).href).catch(() => {});
}
"""
_PRELOAD_JS = _PRELOAD + """
export default function({ data }) { preload(data); }
"""

_JS = _PRELOAD + """
export default function({ data, setTriggerValue }) {
  const start = performance.now();
  const check = () => {
    if (document.querySelector(%s) || performance.now() - start > %d) {
      preload(data);  // the heavy charts' bundle, now that it cannot hold up the first chart
      setTriggerValue('drawn', true);
    } else {
      setTimeout(check, 50);
    }
  };
  check();
}
""" % (repr(DRAWN_CHART), MAX_WAIT_MS)

_watcher = st.components.v2.component("pagesim.first_chart", js=_JS)
_preloader = st.components.v2.component("pagesim.preload_charts", js=_PRELOAD_JS)


PRELOADED = "first_chart.preloaded"


def preload_charts() -> None:
    """On a session's first run of a page without a light first chart: start loading the charting
    bundle now, while the server imports and loads (the same module the chart elements import later,
    so it loads and runs once). Does nothing if the bundle is not found or was preloaded already."""
    if _BUNDLE is None or st.session_state.get(PRELOADED):
        return
    st.session_state[PRELOADED] = True
    with st.sidebar:
        _preloader(key="pagesim.preload_charts", data=_BUNDLE)


def _drawn() -> None:
    st.session_state[DRAWN] = True


def wait_for_first_chart() -> bool:
    """True when this session has drawn its first chart (draw everything); else mount the watcher,
    which reruns the script once the browser has drawn a chart, and return False (stop here)."""
    if st.session_state.get(DRAWN):
        return True
    st.session_state[PRELOADED] = True  # the watcher loads the bundle once the first chart is drawn
    _watcher(key="pagesim.first_chart", data=_BUNDLE, on_drawn_change=_drawn)
    st.caption("Drawing the charts…")
    return False
