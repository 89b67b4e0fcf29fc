"""LLM serving capacity planner: the frame shared by every page (navigation, page config, sign-in, trace picker).

A shared report link (``?report=<id>``) opens that report read-only for anyone who has it, signed in or not.
"""

import streamlit as st

from pages._link import remember_link, show_unapplied
from pages._prefix import declared_prefix_input
from pages._scenario import SCENARIO_PAGES, SEARCH_PAGES, scenario, set_current
from pages._search import search_controls
from pages._shared import connection
from pages._signin import deployment_sign_in, signed_in, workspace_owner
from planner.traces import store

st.set_page_config(page_title="LLM capacity planner", page_icon=":material/speed:", layout="wide")

sign_in = deployment_sign_in()          # a misconfigured sign-in stops here: nothing is served
if st.query_params.get("report"):
    st.navigation([st.Page("pages/report_view.py", title="Shared report", url_path="shared")],
                  position="hidden").run()
    st.stop()

if sign_in is not None and not signed_in():
    st.title("LLM capacity planner")
    st.write("Sign in to see your workspace: your traces are listed to you only. Report links work without it.")
    st.button("Sign in", type="primary", on_click=st.login, key="sign_in")
    st.stop()
if sign_in is not None and (refusal := sign_in.refusal(st.user.to_dict())):
    st.title("LLM capacity planner")
    st.error(refusal)
    st.button("Sign out", on_click=st.logout, key="sign_out_refused")
    st.stop()

owner = workspace_owner()
notice = remember_link()       # a shared link's values the widgets could not take are said here
traces = store.list_traces(connection(), owner)
names = [t.name for t in traces]
by_name = {t.name: t for t in traces}
with st.sidebar:
    if owner:
        st.caption(f"Workspace of {owner}")
        st.button("Sign out", on_click=st.logout, key="sign_out")
    st.markdown("### Trace")
    if names:
        default = names.index("sample_chat") if "sample_chat" in names else 0
        if st.session_state.get("pending_trace") in by_name:
            st.session_state["trace"] = st.session_state.pop("pending_trace")
        elif st.session_state.get("trace") not in by_name:
            st.session_state.pop("trace", None)
        picked = st.selectbox("Trace", names, index=default, key="trace", bind="query-params",
                              help="The request log every page analyses. Add one on the Traces page.",
                              label_visibility="collapsed")
        info = by_name[picked]
        st.session_state["selected_trace_id"] = info.trace_id
        st.caption(f"{info.rows:,} requests · {info.failed:,} failed · {info.rejected:,} rejected · "
                   f"`{info.trace_id}`")
        declared_prefix_input()
    else:
        st.session_state["selected_trace_id"] = None
        st.caption("No traces yet: upload one on the Traces page.")

page = st.navigation([
    st.Page("pages/overview.py", title="Overview", icon=":material/monitoring:", url_path="overview", default=True),
    st.Page("pages/workload.py", title="Workload", icon=":material/query_stats:", url_path="workload"),
    st.Page("pages/memory.py", title="Memory & capacity", icon=":material/memory:", url_path="memory"),
    st.Page("pages/simulate.py", title="Simulate", icon=":material/play_circle:", url_path="simulate"),
    st.Page("pages/recommend.py", title="Recommend", icon=":material/recommend:", url_path="recommend"),
    st.Page("pages/report.py", title="Report", icon=":material/description:", url_path="report"),
    st.Page("pages/traces.py", title="Traces", icon=":material/upload_file:", url_path="traces"),
])
# The scenario (and the recommendation search) belongs to the frame, not to a page: its widgets, bound to the URL,
# keep their values as the user moves between the pages that take it (a page's own bound widgets are dropped from
# the query string on navigation). Those pages read it with pages._scenario.current().
try:
    if page.url_path in SCENARIO_PAGES:
        st.title(page.title)
        set_current(scenario(), search_controls() if page.url_path in SEARCH_PAGES else None)
    page.run()
finally:        # also where the scenario or the page stops on an error: a dropped value may be its cause
    show_unapplied(notice)
