"""The turnlake analyst workbench: ``streamlit run app/main.py``.

The lake comes from ``TURNLAKE_LAKE`` (else ``./data/lake``), the analyst's tenants from
``TURNLAKE_TENANTS`` (comma separated; else every tenant found in the lake). A deep link
``/replay?conversation=C&turn=T`` opens that turn in Replay.
"""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="turnlake workbench", page_icon=":material/database:",
                   layout="wide")

st.navigation([
    st.Page("screens/search.py", title="Search", icon=":material/search:", url_path="search",
            default=True),
    st.Page("screens/replay.py", title="Conversations & Replay", icon=":material/forum:",
            url_path="replay"),
    st.Page("screens/overview.py", title="Overview", icon=":material/monitoring:",
            url_path="overview"),
    st.Page("screens/retention.py", title="Retention", icon=":material/auto_delete:",
            url_path="retention"),
    st.Page("screens/index_health.py", title="Index health",
            icon=":material/health_metrics:", url_path="index-health"),
]).run()
