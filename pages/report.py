"""Report: this trace and scenario as one shareable report (HTML, Markdown, JSON), saved under a private link."""

import streamlit as st

from pages._scenario import current
from pages._shared import connection, recommendation, require_frame, selected_trace, show_notes
from pages._signin import workspace_owner
from planner.errors import PlannerError
from planner.report.build import build_report
from planner.report.render import markdown_text
from planner.report.store import list_reports, load_report, publish_report

require_frame()
s, options = current(search=True)
info = selected_trace()
if info is None:
    st.info("Select a trace in the sidebar.")
    st.stop()
st.caption("Workload and fits, memory and capacity, a replay at the trace's own rate, recommendations with "
           "commands, sensitivity plots and every assumption, with the trace's content hash: one file that opens "
           "offline. Saving stores it under an unguessable link that opens it read-only for anyone who has it.")

if st.button("Build and save the report", type="primary", key="report_build"):
    bar = st.progress(0.0, text="starting")
    try:
        rec = None
        if info.has_timestamps:     # the Recommend page's cached search, when it ran with the same settings
            try:
                rec = recommendation(info.trace_id, s, options,
                                     lambda f, m: bar.progress(0.8 * min(f, 1.0), text=f"recommending: {m}"))
            except PlannerError:    # no recommendation (every request at one instant): the report says why, as
                rec = None          # the CLI's does, where the page saved nothing
        report = build_report(connection(), info.trace_id, s, options, recommendation=rec,
                              progress=lambda f, m: bar.progress(0.8 + 0.15 * min(f, 1.0), text=m))
        bar.progress(0.96, text="rendering charts")
        st.session_state["report_saved"] = publish_report(connection(), report, workspace_owner()).report_id
        st.session_state["report_note"] = report.simulation.notes if report.simulation else []
        bar.progress(1.0, text="saved")
    except PlannerError as exc:
        bar.empty()
        st.error(str(exc))
        st.stop()

base_url = (st.context.url or "").split("?")[0].rsplit("/report", 1)[0]   # None under AppTest
saved_id = st.session_state.get("report_saved")
if saved_id:
    saved = load_report(connection(), saved_id)
    link = f"{base_url}/?report={saved_id}"
    st.success("Saved: " + markdown_text(saved.title))
    show_notes(*st.session_state.get("report_note", []))
    st.code(link, language=None)
    stem = f"capacity-report-{saved_id}"
    c = st.columns(3)
    c[0].download_button("Download HTML", saved.html, f"{stem}.html", "text/html", on_click="ignore",
                         key="report_html", type="primary")
    c[1].download_button("Download Markdown", saved.markdown, f"{stem}.md", "text/markdown", on_click="ignore",
                         key="report_md")
    c[2].download_button("Download JSON", saved.body_json(), f"{stem}.json", "application/json",
                         on_click="ignore", key="report_json")

earlier = list_reports(connection(), workspace_owner())
if earlier:
    st.subheader("Saved reports")
    st.dataframe([{"saved (UTC)": r["created"], "title": r["title"], "link": f"{base_url}/?report={r['report_id']}"}
                  for r in earlier], hide_index=True, key="report_list",
                 column_config={"link": st.column_config.LinkColumn("link", display_text="open")})
