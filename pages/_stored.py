"""The Traces page's list of stored traces, the split of one server's requests off a trace holding several servers'
traffic, and the removal of one: the whole store without sign-in, a workspace's own and shared traces with it."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pages._progress import with_progress
from pages._shared import connection, forget_results
from planner.errors import PlannerError
from planner.traces import store
from planner.traces.queries import model_counts
from planner.traces.split import split_by_model


@st.cache_data(max_entries=16, show_spinner=False)
def _models(trace_id: str, created: str) -> dict[str, int]:
    """Rows per model the trace's model column names (:func:`planner.traces.queries.model_counts`), cached per
    trace and ingest (the same bytes deleted and ingested again with another mapping keep their id)."""
    return model_counts(connection(), trace_id)


def stored_traces(owner: str | None) -> None:
    """List the traces ``owner`` sees, offer to split one server's requests off one of them and to remove one of
    their own (any one, without sign-in); a split or a removal reruns the page and says what it did above the
    list."""
    st.subheader("Stored traces")
    if said := st.session_state.pop("traces_said", None):     # said after the rerun that lists the rest
        st.success(said)
    traces = store.list_traces(connection(), owner)
    st.dataframe(pl.DataFrame([{"name": t.name, "trace_id": t.trace_id, "rows": t.rows, "failed": t.failed,
                                "rejected": t.rejected, "format": t.format, "layout": t.layout,
                                "source": t.source_file, "created": t.created} for t in traces]),
                 hide_index=True, key="traces_table")
    split_section([t for t in traces if t.layout != "summary"], owner)
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
                # its id comes back if its bytes are ingested again (read another way): a removal that took the
                # last workspace's link deleted it too
                forget_results()
                st.session_state["traces_said"] = (f"Deleted {by_id[doomed]} ({doomed})." if owner is None else
                                                      f"Removed {by_id[doomed]} ({doomed}) from your workspace.")
                st.rerun()


def split_section(traces: list[store.TraceInfo], owner: str | None) -> None:
    """Split one server's requests off a trace whose model column names several models (several servers'
    traffic), as a trace of their own that the sidebar then selects."""
    with st.expander("Split one server's requests off"):
        st.caption("A trace whose model column names several models is several servers' traffic: every page plans "
                   "their sum on one server. Its split keeps the rows one model served (failed ones included, "
                   "numbered as in the source) as a trace of its own.")
        by_id = {t.trace_id: t for t in traces}
        source = st.selectbox("Trace", list(by_id), index=None, format_func=lambda tid: f"{by_id[tid].name} ({tid})",
                              placeholder="choose a trace", key="traces_split_pick")
        if source is None:
            return
        counts = _models(source, by_id[source].created)
        if len(counts) < 2:
            st.info(f"{by_id[source].name} names {'one model' if counts else 'no model'}: its requests are one "
                    "server's.")
            return
        model = st.selectbox("Served by", list(counts), format_func=lambda m: f"{m} ({counts[m]:,} rows)",
                             key="traces_split_model")
        if st.button("Split", key="traces_split"):
            result = with_progress(f"Splitting {model}'s rows off…", "Split failed: nothing was stored",
                                   lambda show: split_by_model(connection(), source, model, owner=owner,
                                                               on_progress=show),
                                   lambda r: f"{'Already stored' if r.duplicate_of else 'Stored'} as {r.name}")
            if result is None:
                return
            st.session_state["traces_said"] = (
                f"{model}'s rows were split off before, as {result.name} ({result.trace_id}), now selected."
                if result.duplicate_of else
                f"Stored {result.rows:,} rows of {model} as {result.name} ({result.trace_id}), now selected.")
            st.session_state["pending_trace"] = result.name      # the sidebar picker switches on the next run
            st.rerun()
