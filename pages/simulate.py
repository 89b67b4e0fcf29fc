"""Simulate: replay the trace (or a synthetic workload) through the scenario's engine on its GPUs."""

import streamlit as st

from pages._calibration import calibration_section, measured_latency, served_by_choice, served_models, show_warning
from pages._prefix import shared_prefix
from pages._scenario import URL, current
from pages._shared import pool_edge, require_frame, selected_trace, show_notes, show_table, simulation
from planner.charts import sim as sim_charts
from planner.errors import PlannerError
from planner.sim.engines import get_engine
from planner.sim.routers import ROUTERS
from planner.sim.run import default_router
from planner.sim.trace_calibration import HOLDOUT_SHARE, latency_errors
from planner.workload.replay import names_model, replayed_as_another


def ms(value: float | None, digits: int = 0) -> str:
    """A latency metric; none measured (every request rejected, one-token outputs) is a dash, not 0 ms."""
    return "—" if value is None else f"{value:,.{digits}f} ms"


require_frame()
s, _ = current()
info = selected_trace()
c = st.columns(4)
source = c[0].selectbox("Workload", ["trace replay", "trace lengths, fitted", "synthetic"], key="source", **URL)
scale = c[1].number_input("Rate × (trace replay)", 0.01, 1000.0, 1.0, 0.25, key="scale", **URL)
qps = c[2].number_input("Requests/s (fitted)", 0.01, 10_000.0, 2.0, 0.5, key="qps", **URL)
spec = c[3].text_input("Synthetic spec", "requests=2000,input=512,output=uniform:64:1024,qps=8", key="spec", **URL,
                       help="requests=N,input=LEN,output=LEN,qps=Q[,arrival=poisson|gamma:CV][,seed=N]")
c = st.columns(4)
replicas = c[0].number_input("Replicas", 1, 4096, 1, 1, key="replicas", **URL,
                             help="identical replicas of the scenario behind one router, on one clock")
# an engine whose loop runs one replica is split round-robin (exact: the choice reads no state): offer only that
routers = list(ROUTERS) if get_engine(s.engine).fleet_loop else [default_router(s.engine)]
router = c[1].selectbox("Router", routers, index=routers.index(default_router(s.engine)), key="router", **URL,
                        help="; ".join(f"{r.name}: {r.help}" for r in ROUTERS.values() if r.name in routers))
if source != "synthetic" and info is None:
    st.info("Select a trace in the sidebar, or use a synthetic workload.")
    st.stop()
served_by = served_by_choice(c[2], info.trace_id) if source == "trace replay" else None

progress = st.progress(0.0, text="simulating…")
try:
    choice = {"source": source, "scale": scale, "qps": qps, "spec": spec, "replicas": int(replicas),
              "router": router, "prefix": shared_prefix(), "served_by": served_by}
    summary, ttft, tpot, holds = simulation(info.trace_id if info else "", s.key, choice, s)
except PlannerError as exc:
    progress.empty()
    st.error(str(exc))
    st.stop()
progress.progress(1.0, text=f"{summary.steps:,} steps simulated in {summary.sim_wall_s:.2f} s")
show_notes(*summary.notes)

m = st.columns(4)
m[0].metric("Completed", f"{summary.completed:,}", help=f"of {summary.requests:,} requests; "
            f"{summary.rejected:,} rejected")
m[1].metric("TTFT p99", ms(summary.ttft_ms.p99), help=f"p50 {ms(summary.ttft_ms.p50)}")
m[2].metric("TPOT p99", ms(summary.tpot_ms.p99, 1), help=f"p50 {ms(summary.tpot_ms.p50, 1)}")
m[3].metric("Output tok/s", f"{summary.throughput_tok_s['output']:,.0f}")
m = st.columns(4)
m[0].metric("Preemptions", f"{summary.preemptions:,}")
m[1].metric("Queue", summary.verdict, help="stable: requests waiting never exceed the noise floor over the "
            "arrivals; backlogged: a surge queued (and drained or plateaued); overloaded: the queue still grows when "
            "the arrivals end, so the offered rate exceeds what this fleet serves")
m[2].metric("Queueing p99", ms(summary.queue_ms.p99))
m[3].metric("KV blocks", f"{s.settings.num_blocks:,}", help=f"{s.block_size}-token blocks the engine schedules "
            "against (the Memory page's plan)")
edge_slot = st.empty()      # filled last: the margin replays the workload at other pools
fleet_text = f"{summary.replicas} replicas ({summary.router}), each " if summary.replicas > 1 else ""
st.caption(f"{summary.workload} · {fleet_text}{s.engine} on {s.tp}× {s.gpu.name} · weights {s.weight_dtype}, KV "
           f"{s.kv_cache_dtype} in {s.block_size}-token blocks · max_num_seqs {s.max_num_seqs}, max_num_batched_tokens "
           f"{s.max_num_batched_tokens}, max_model_len {s.max_model_len}")

show_table(summary.latency_table(), "sim_percentiles")
show_table(summary.prefix_cache_table(), "sim_prefix_cache")
if summary.prefix_cache["identity"] is None and summary.prefix_cache["enabled"]:
    st.caption("The prefix cache is on but this workload carries no prefix identity (hash_ids or sessions), so no "
               "prompt can hit another's blocks (a preempted request still finds its own again): declare a shared "
               "prefix in the sidebar to see what a system prompt is worth.")
if len(summary.per_replica) > 1:       # one replica's row is the fleet's
    show_table(summary.replica_table(), "sim_replicas")
st.markdown("**By input length**")
show_table(summary.bucket_table(), "sim_buckets")
# a replay of the trace at its own rate is comparable with what the trace measured, where it carries latencies and
# the replay's requests are one server's
own_load = source == "trace replay" and scale == 1.0
servers = served_models(info.trace_id) if own_load else {}
measured, shown = None, ()          # shown: the warnings drawn here, not repeated by the calibration
if own_load and len(servers) > 1 and served_by is None:
    if measured_latency(info.trace_id) is not None:
        st.caption(f"The trace's latencies were measured on {len(servers)} servers ({', '.join(servers)}): replay "
                   "one server's requests (Requests served by) to set the replay beside its latencies and calibrate.")
elif own_load:
    measured = measured_latency(info.trace_id, served_by)
    if measured is not None and served_by is not None and not names_model(served_by, s.model):
        shown = (replayed_as_another(served_by, s.model),)
        show_warning(f"{shown[0]}: the comparison and a calibration describe another model than the one these "
                     "latencies were measured on.")
if measured is not None:
    st.markdown("**Predicted against the trace's measured latencies**")
    show_table(latency_errors(ttft, tpot, *measured), "sim_vs_measured")
    st.caption("error = predicted / measured − 1. Far off? Calibrate: MFU and MBU are fitted to the first "
               f"{1 - HOLDOUT_SHARE:.0%} of the trace's arrivals, and the rest is predicted (`calibrate --trace`).")
    if int(replicas) > 1 or choice["prefix"]:
        st.caption("Calibration fits one server to the trace as stored: set Replicas to 1 and clear the declared "
                   "shared prefix to calibrate.")
    else:
        if st.button("Calibrate the cost model to these latencies", key="calibrate"):
            st.session_state["calibrate_for"] = (info.trace_id, served_by, s.key)
        if st.session_state.get("calibrate_for") == (info.trace_id, served_by, s.key):
            calibration_section(info, s, served_by, shown)
c1, c2 = st.columns(2)
c1.altair_chart(sim_charts.latency_cdf_chart(ttft, tpot, "Latency CDFs" + (": predicted and measured" if measured
                                                                            else ""), measured), key="sim_cdf")
c2.altair_chart(sim_charts.timeline_chart(summary.timeline), key="sim_timeline")

margin = pool_edge(info.trace_id if info else "", s.key, choice, holds, s)
(edge_slot.warning if margin.near else edge_slot.caption)("KV pool margin: " + margin.sentence())
