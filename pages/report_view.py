"""A saved report, read-only, opened from its link (``?report=<id>``): the HTML twin and all three downloads."""

import streamlit as st

from pages._shared import connection
from planner.errors import PlannerError
from planner.report.store import load_report

try:
    saved = load_report(connection(), st.query_params.get("report", ""))
except PlannerError as exc:
    st.title("Shared report")
    st.error(str(exc))
    st.stop()
st.caption(f"Shared capacity report · saved {saved.created} UTC · read-only")
stem = f"capacity-report-{saved.report_id}"
c = st.columns(3)
c[0].download_button("Download HTML", saved.html, f"{stem}.html", "text/html", on_click="ignore", key="view_html")
c[1].download_button("Download Markdown", saved.markdown, f"{stem}.md", "text/markdown", on_click="ignore",
                     key="view_md")
c[2].download_button("Download JSON", saved.body_json(), f"{stem}.json", "application/json", on_click="ignore",
                     key="view_json")
st.html(saved.html)
