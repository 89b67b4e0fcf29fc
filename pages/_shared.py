"""What every page shares: the cached store connection, the selected trace and cached planner calls."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from planner.charts import workload as charts
from planner.traces import queries, store
from planner.traces.queries import arrival_times, length_counts
from planner.traces.samples import ensure_sample
from planner.traces.store_path import default_db_path
from planner.workload import stats
from planner.workload.fits import fit_length_field
from planner.workload.tables import workload_report as build_workload_report


@st.cache_resource(validate=lambda con: con is not None, on_release=lambda con: con.close())
def get_store(db_path: str):
    """One DuckDB connection per process (pages take a cursor per unit of work); the sample is loaded once."""
    con = store.open_store(db_path)
    ensure_sample(con)
    return con


def require_frame() -> None:
    """Hand a page run that bypassed ``app.py`` back to it.

    Streamlit treats a folder named ``pages/`` as legacy auto-discovered pages until ``st.navigation`` has run
    once in the process, so the first visitor of a fresh server who opens a shared deep link (``/workload?…``)
    would get the page alone: no trace picker, no navigation. Switching the legacy mode off and rerunning routes
    the same URL through ``app.py``. Only a session's first run is rerouted: a later run may carry a click that
    a rerun would drop (Streamlit's AppTest resets the legacy flag on every run and runs pages alone).
    """
    if PagesManager.uses_pages_directory and not st.session_state.to_dict():
        PagesManager.uses_pages_directory = False
        st.rerun()


def connection():
    return get_store(str(default_db_path()))


def selected_trace() -> store.TraceInfo | None:
    """The trace picked in the sidebar, or None when the store is empty."""
    require_frame()
    trace_id = st.session_state.get("selected_trace_id")
    if not trace_id:
        return None
    return store.get_trace(connection(), trace_id)


@st.cache_data(max_entries=64, show_spinner="Computing percentiles…")
def trace_stats(trace_id: str) -> dict:
    """Stats of an immutable trace (its id is its content hash), cached per id."""
    return stats.trace_stats(connection(), trace_id)


@st.cache_data(max_entries=64)
def rejects_csv(trace_id: str) -> bytes:
    return store.rejects_csv(connection(), trace_id)


@st.cache_data(max_entries=16, show_spinner="Characterising the workload…")
def workload_report(trace_id: str, window_s: float | None, edges: tuple[float, ...]) -> dict:
    """Grouped percentiles, joint view, latency buckets and arrival fits: the ``workload`` CLI object."""
    return build_workload_report(connection(), trace_id, window_s=window_s, edges=edges, with_reuse=False)


@st.cache_data(max_entries=32, show_spinner="Fitting length distributions…")
def length_fit(trace_id: str, field: str, cap: float | None, detect: bool):
    """Distinct values, counts and the ranked fits of one length field (what the ``fit`` CLI prints)."""
    x, w = length_counts(connection(), trace_id, field)
    return x, w, fit_length_field(connection(), trace_id, field, cap=cap, detect=detect)


@st.cache_data(max_entries=16, show_spinner="Binning arrivals…")
def rate_table(trace_id: str):
    """Rate per 1 s, 10 s and 60 s bin (peak envelope for long traces)."""
    return charts.rate_table(arrival_times(connection(), trace_id))


@st.cache_data(max_entries=16, show_spinner="Reading request lengths…")
def request_lengths(trace_id: str):
    """Input and output tokens of the trace's non-failed requests."""
    return queries.request_lengths(connection(), trace_id)


def _sim_workload(trace_id: str, workload: dict):
    """The replay the Simulate page's workload choice names."""
    from planner.sim.workload import from_fits, synthetic
    from planner.workload.replay import from_trace

    if workload["source"] == "synthetic":
        return synthetic(workload["spec"])
    if workload["source"] == "trace replay":
        return from_trace(connection(), trace_id, rate_scale=workload["scale"], shared_prefix=workload["prefix"],
                          served_by=workload.get("served_by"))
    fits = [length_fit(trace_id, f, None, True)[2] for f in ("input_tokens", "output_tokens")]
    return from_fits(*fits, n=10_000, qps=workload["qps"]).with_shared_prefix(workload["prefix"])


@st.cache_data(max_entries=32, show_spinner=False)
def simulation(trace_id: str, scenario_key: str, workload: dict, _scenario):
    """A replay's typed summary, per-request TTFT and TPOT, and whether its queue holds
    (:func:`planner.sim.pool_margin.queue_holds`), cached per trace, scenario (its key covers every field, the
    model's whole spec included) and workload choice."""
    from planner.sim.fleet import Fleet
    from planner.sim.pool_margin import queue_holds
    from planner.sim.results import summarize
    from planner.sim.run import simulate

    result = simulate(_sim_workload(trace_id, workload), _scenario,
                      fleet=Fleet(workload["replicas"], workload["router"]))
    return summarize(result), result.ttft_s, result.tpot_s, queue_holds(result)


@st.cache_data(max_entries=32, show_spinner="Finding where the verdict flips with the KV pool…")
def pool_edge(trace_id: str, scenario_key: str, workload: dict, holds: bool, _scenario):
    """The replay's KV-pool margin (:func:`planner.sim.pool_margin.pool_margin`), cached as :func:`simulation`,
    whose replay at the scenario's pool gives ``holds``."""
    from planner.sim.fleet import Fleet
    from planner.sim.pool_margin import pool_margin

    return pool_margin(_sim_workload(trace_id, workload), _scenario,
                       fleet=Fleet(workload["replicas"], workload["router"]), holds=holds)


@st.cache_resource(show_spinner=False)
def _kept_results() -> tuple[OrderedDict, threading.Lock]:
    return OrderedDict(), threading.Lock()


def kept(key: tuple, compute):
    """``compute()``, kept per ``key`` for every session (the 16 most recent results). Not ``st.cache_data``: it
    would record a progress bar's updates and replay them into the page that asks next, which fails when that is
    another page (Report after Recommend)."""
    results, lock = _kept_results()
    with lock:
        if key in results:
            results.move_to_end(key)
            return results[key]
    out = compute()
    with lock:
        results[key] = out
        while len(results) > 16:
            results.popitem(last=False)
    return out


def forget_results() -> None:
    """Drop every cached result (the prefix reuse's too): they are cached per trace id, and a deleted trace's bytes
    ingested again with another mapping (no times, other units, no sessions) come back under the same id."""
    from pages._prefix import trace_reuse       # imports this module
    st.cache_data.clear()
    trace_reuse.clear()
    results, lock = _kept_results()
    with lock:
        results.clear()


def recommendation(trace_id: str, scenario, options, progress=None):
    """:func:`planner.recommend.plan.plan_recommendation` with details, kept per trace, scenario and options."""
    from dataclasses import replace

    from planner.recommend.plan import plan_recommendation
    from planner.workload.replay import from_trace

    options = replace(options, details=True)
    return kept(("recommend", trace_id, scenario.key, json.dumps(options.to_dict(), sort_keys=True)),
                 lambda: plan_recommendation(from_trace(connection(), trace_id, shared_prefix=options.shared_prefix),
                                             scenario, options, progress=progress))


def show_table(table, key: str, transpose: bool = False, **kwargs) -> None:
    """A :class:`planner.tables.Table` (or a list of records) as a data grid, the page's twin of the report's
    table: empty cells read "—", never "None"; ``transpose`` turns a wide table of a few rows (one per SLO class)
    on its side, so no column runs off the page's edge."""
    import polars as pl

    from planner.tables import Table

    table = table if isinstance(table, Table) else Table.of(list(table))
    if transpose:
        table = table.transposed()
        kwargs.setdefault("height", "content")     # a figure per row: every one shown, none behind a scrollbar
    st.dataframe(pl.DataFrame(table.display_columns(), strict=False), hide_index=True, key=key, width="stretch",
                 **kwargs)


def show_notes(*notes: str | None) -> None:
    """The warnings every simulating page shows above its figures: prompts that do not fit ``max_model_len``, a
    replay too short for its verdict (:attr:`planner.sim.results.SimulationSummary.notes`)."""
    for note in notes:
        if note:
            st.warning(note, icon=":material/warning:")
