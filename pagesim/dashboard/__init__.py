"""The Streamlit dashboard (`streamlit run app.py`), split so that most of it runs without Streamlit.

    data.py            traces (bundled, uploaded, synthetic), replay runs, fingerprints
    sweep.py           a trace over a grid of configs, run by pagesim.sweep (processes or Ray)
    live_runs.py       live GPU run directories (results/live/*/) and their validation files
    kernel_results.py  GPU kernel benchmark results (bench/results/*.json)
    figures.py         DataFrame -> plotly Figure builders, pure
    trace_chart.py     the trace overview as Vega-Lite specs (a session's first chart), pure
    host_tier.py       the host (CPU) tier of the prefix cache: occupancy, hits by tier, bytes moved, pure
    tables.py          DataFrame builders for the tables the pages show and offer as CSV
    cached.py          the st.cache_data wrappers around the expensive calls above
    widgets.py         sidebar forms shared by pages
    first_chart.py     a new session's first chart before its heavy ones (browser-side helpers)
    pages/*.py         one script per page, run by st.navigation in app.py

Only cached.py, widgets.py, first_chart.py and pages/ import Streamlit.
"""
