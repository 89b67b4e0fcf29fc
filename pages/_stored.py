"""The Traces page's list of stored traces and the removal of one: the whole store without sign-in, a workspace's
own and shared traces with it."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pages._shared import connection
from planner.errors import PlannerError
from planner.traces import store


def stored_traces(owner: str | None) -> None:
    """List the traces ``owner`` sees and offer to remove one of their own (any one, without sign-in); a removal
    reruns the page and says what it removed above the list."""
    st.subheader("Stored traces")
    if removed := st.session_state.pop("traces_removed", None):     # said after the rerun that lists the rest
        st.success(removed)
    traces = store.list_traces(connection(), owner)
    st.dataframe(pl.DataFrame([{"name": t.name, "trace_id": t.trace_id, "rows": t.rows, "failed": t.failed,
                                "rejected": t.rejected, "format": t.format, "layout": t.layout,
                                "source": t.source_file, "created": t.created} for t in traces]),
                 hide_index=True, key="traces_table")
    # signed in, only traces in one's own workspace can be removed; shared ones (the sample) stay
    own = None if owner is None else store.owned_trace_ids(connection(), owner)
    removable = [t for t in traces if own is None or t.trace_id in own]
    if not removable:
        return
    with st.expander("Delete a trace" if owner is None else "Remove a trace from my workspace"):
        # by id: names are unique only among names, and one may spell another trace's id
        by_id = {t.trace_id: t.name for t in removable}
        doomed = st.selectbox("Trace", list(by_id), format_func=lambda tid: f"{by_id[tid]} ({tid})",
                              key="traces_delete_pick")
        if st.button("Delete" if owner is None else "Remove", key="traces_delete"):
            try:
                store.remove_trace(connection(), doomed, owner)
            except PlannerError as exc:
                st.error(str(exc))
            else:
                st.session_state["traces_removed"] = (f"Deleted {by_id[doomed]} ({doomed})." if owner is None else
                                                      f"Removed {by_id[doomed]} ({doomed}) from your workspace.")
                st.rerun()
