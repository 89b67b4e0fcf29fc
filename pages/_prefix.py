"""The declared shared prefix (a system prompt on a share of the requests): the sidebar's field, bound to the URL,
and what the pages read from it; and the trace's prefix reuse, cached for every session."""

from __future__ import annotations

import streamlit as st

from pages._shared import connection
from planner.errors import PlannerError
from planner.sim.prefix import parse_shared_prefix


def declared_prefix_input() -> None:
    """The sidebar's field (the frame draws it, so its value survives navigation); a malformed value is shown as
    the error and the pages replay the trace without one."""
    text = st.text_input("Declared shared prefix", key="shared_prefix", bind="query-params",
                         placeholder="TOKENS:SHARE, e.g. 2000:0.8",
                         help="For a trace without hash_ids or sessions: SHARE of its requests begin with the same "
                              "TOKENS tokens (a system prompt). Every page replays the trace with it; empty: none.")
    if text.strip():
        try:
            parse_shared_prefix(text.strip())
        except PlannerError as exc:
            st.error(str(exc))


def shared_prefix() -> str | None:
    """The sidebar's declared shared prefix (``TOKENS[:SHARE]``); None when empty or malformed."""
    text = (st.session_state.get("shared_prefix") or "").strip()
    try:
        return text if text and parse_shared_prefix(text) else None
    except PlannerError:
        return None


@st.cache_resource(max_entries=8, show_spinner="Measuring prefix reuse…")
def trace_reuse(trace_id: str, declared: str | None, block_size: int):
    """:func:`planner.workload.tables.trace_reuse`, one immutable result per trace, declared prefix and block size
    shared by every session (its exact LRU passes stay available to the Memory page)."""
    from planner.workload.tables import trace_reuse as build

    return build(connection(), trace_id, shared_prefix=declared, block_size=block_size)
