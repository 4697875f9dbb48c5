"""pagesim dashboard: `streamlit run app.py`.

Navigation only: each page is a script under pagesim/dashboard/pages/ (figures, tables and data
loading live in the pagesim.dashboard package and are tested without Streamlit).
"""

import streamlit as st

from pagesim.dashboard import first_chart

PAGES = "pagesim/dashboard/pages"

st.set_page_config(page_title="pagesim", page_icon=":material/memory:", layout="wide")
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
