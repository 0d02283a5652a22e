"""The turnlake analyst workbench: ``streamlit run app/main.py``.

The lake comes from ``TURNLAKE_LAKE`` (else ``./data/lake``). A person signs in first (an API
key, or OpenID Connect: see app/access.py and docs/workbench.md) and reads as that key's or
member's principal; ``TURNLAKE_WORKBENCH_AUTH=local`` is the local demo without sign-in, admin
of the tenants in ``TURNLAKE_TENANTS`` (comma separated; else every tenant found in the lake).
The identity is in the URL (``?tenant=T&as_user=U``); a deep link
``/replay?conversation=C&turn=T`` opens that turn in Replay. Search answers at both ``/``
and ``/search``.

A cold start draws a "loading" line before the heavy modules (polars, pyarrow, the search
service) are imported, and the model's background warm-up starts only once the first page is
drawn: both used to keep the first page blank for several seconds.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.components.signin import signed_in, signin_page
from lake.settings import Settings

# A local file: a page icon given as an emoji or a Material name is fetched from a CDN.
ICON = Path(__file__).parent / "assets" / "icon.png"

st.set_page_config(page_title="turnlake workbench", page_icon=str(ICON), layout="wide")

# The default page is served at "/"; its own url_path is reserved, so /search is the alias's.
search = st.Page("screens/search.py", title="Search", icon=":material/search:",
                 url_path="start", default=True)
pages = [
    search,
    st.Page("screens/replay.py", title="Conversations & Replay", icon=":material/forum:",
            url_path="replay"),
    st.Page("screens/overview.py", title="Overview", icon=":material/monitoring:",
            url_path="overview"),
    st.Page("screens/retention.py", title="Retention", icon=":material/auto_delete:",
            url_path="retention"),
    st.Page("screens/index_health.py", title="Index health",
            icon=":material/health_metrics:", url_path="index-health"),
]
# The same Search page under /search as well; the sidebar links only the default one.
search_alias = st.Page("screens/search.py", title="Search", icon=":material/search:",
                       url_path="search")
navigation = st.navigation([*pages, search_alias], position="hidden")
settings = Settings.from_env()
# Before anything reads the lake: who is signed in (checked afresh on every run). The key and
# member stores are small blobs; nothing heavy is imported for the sign-in page.
access = signed_in(settings)
if access is None:
    signin_page(settings)
    st.stop()

# The first run of a process imports the tables' and the search service's modules (~2 s on
# a busy machine): say so at once rather than leave the page blank.
loading = st.empty()
loading.caption(":material/hourglass_top: Opening the workbench…")
from streamlit.runtime.scriptrunner_utils.exceptions import (  # noqa: E402
    RerunException,
)

from app.components.identity import sidebar, start_warmup  # noqa: E402 (drawn first)
from app.components.url import drop_wanted_query_params, flush_query_params  # noqa: E402

sidebar(settings, pages, access)
loading.empty()
try:
    navigation.run()
except RerunException:
    drop_wanted_query_params()  # a page switch or rerun names its own URL
    raise
except BaseException:
    flush_query_params()  # st.stop(): the page's URL as far as it got
    raise
else:
    flush_query_params()
finally:
    # Once the page is drawn (also when it stopped or switched pages): loading the model
    # beside the first page's run would slow it down by the same seconds.
    start_warmup(settings)
