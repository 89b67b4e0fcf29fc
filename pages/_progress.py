"""A long write to the store (an ingest, a split) in a status box, with a progress bar DuckDB's worker thread feeds."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from planner.errors import PlannerError

T = TypeVar("T")


def with_progress(running: str, failed: str, work: Callable[[Callable[[float, str], None]], T],
                  done: Callable[[T], str], said: Callable[[PlannerError], str] = str) -> T | None:
    """``work(show)`` in a status box labelled ``running``, its progress drawn as it reports it (from any thread).
    On a :class:`PlannerError` the box reads ``failed``, the error is shown under it (as ``said`` words it) and None
    is returned; else the box reads ``done(result)`` and the result is returned."""
    ctx = get_script_run_ctx()
    with st.status(running, expanded=True) as status:
        bar = st.progress(0.0, text="starting")

        def show(fraction: float, message: str) -> None:
            if get_script_run_ctx() is None:  # DuckDB progress arrives on a worker thread
                add_script_run_ctx(threading.current_thread(), ctx)
            bar.progress(min(fraction, 1.0), text=message)

        try:
            result = work(show)
        except PlannerError as exc:
            status.update(label=failed, state="error")
            st.error(said(exc))
            return None
        status.update(label=done(result), state="complete")
    return result
