"""pagesim dashboard: `streamlit run app.py`.

Navigation only: each page is a script under pagesim/dashboard/pages/ (figures, tables and data
loading live in the pagesim.dashboard package and are tested without Streamlit).
"""

import streamlit as st

from pagesim.dashboard import first_chart

PAGES = "pagesim/dashboard/pages"


def main() -> None:
    # An emoji icon: the browser draws it itself, where a ":material/...:" favicon is fetched from fonts.gstatic.com
    # (a failed request and a console error on every page of a dashboard meant to run offline).
    st.set_page_config(page_title="pagesim", page_icon="🧱", layout="wide")
    replay = st.Page(f"{PAGES}/replay.py", title="Replay", icon=":material/play_arrow:", default=True)
    page = st.navigation([
        replay,
        st.Page(f"{PAGES}/sweep.py", title="Sweep", icon=":material/tune:", url_path="sweep"),
        st.Page(f"{PAGES}/live.py", title="Sim vs Live", icon=":material/compare_arrows:", url_path="live"),
        st.Page(f"{PAGES}/kernels.py", title="Kernels", icon=":material/speed:", url_path="kernels"),
        st.Page(f"{PAGES}/plan.py", title="Plan", icon=":material/insights:", url_path="plan"),
    ])
    if page is not replay:  # Replay loads plotly.js once its light first chart is drawn (first_chart.py)
        first_chart.preload_charts()  # before the page imports pandas and plotly: the browser loads plotly.js meanwhile
    page.run()


# Streamlit runs this script as __main__. The Sweep and Plan pages' worker processes ("spawn") import the running
# script again as __mp_main__: there it must not set up the pages and run one in bare mode (a worker's start paid
# for it, and the server's log filled with "missing ScriptRunContext" warnings at every sweep).
if __name__ == "__main__":
    main()
