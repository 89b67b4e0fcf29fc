"""Recommend: per SLO class, the engine settings that carry the most traffic on this trace, and why."""

import streamlit as st

from pages._calibration import served_models, show_warning
from pages._scenario import current
from pages._shared import recommendation, require_frame, selected_trace, show_notes, show_table
from planner.charts import recommend as recommend_charts
from planner.errors import PlannerError
from planner.recommend.plan import searched_calibration_warnings
from planner.recommend.table import class_table, fleet_table
from planner.workload.replay import several_servers

require_frame()
s, options = current(search=True)
info = selected_trace()
if info is None or not info.has_timestamps:
    st.info("Select a trace with timestamps in the sidebar: recommendations replay its arrivals.")
    st.stop()
for warning in searched_calibration_warnings(s, options):
    if warning not in s.calibration_warnings:        # the scenario's own are shown above it
        show_warning(warning)
if note := several_servers(served_models(info.trace_id), s.model):
    show_warning(note)
bar = st.progress(0.0, text="searching…")
try:
    out = recommendation(info.trace_id, s, options, lambda f, msg: bar.progress(min(f, 1.0), text=msg))
except PlannerError as exc:
    bar.empty()
    st.error(str(exc))
    st.stop()
bar.progress(1.0, text=f"{out.simulations} simulations")
show_notes(out.rejection_note)

show_table(class_table(out), "recommend_table", transpose=True)
show_table(fleet_table(out), "fleet_table", transpose=True)
peak = f"{out.peak_rate_rps:.2f} req/s" if out.peak_rate_rps is not None else "— (the trace is under a minute)"
st.caption(f"Trace rate {out.trace_rate_rps:.2f} req/s (peak minute, p99: {peak}). "
           f"Each rate per replica holds its class with a stable queue and p99 queueing ≤ {out.max_queue_s:g} s; "
           f"replicas: the smallest fleet behind {out.router} that holds the class on the trace at its own rate × "
           f"{out.headroom:g}, simulated on one clock; the 90% figure holds in 90% of whole-minute block-bootstrap "
           "resamples. Every configuration is this "
           f"scenario ({s.engine}, {s.kv_cache_dtype} KV, {s.weight_dtype} weights, block {s.block_size}) with the "
           "settings shown." + (" Not compared: " + "; ".join(out.skipped) if out.skipped else ""))
for r in out.classes:
    with st.expander(f"{r.name}: " + ("feasible" if r.feasible else "not feasible"), expanded=r.feasible):
        st.code(r.launch_command, language="bash")
        if r.fleet and r.fleet.replicas:
            f = r.fleet
            st.markdown(f"**{f.replicas} replicas** behind {f.router} hold {r.name} on this trace"
                        + (f"; **{f.confident_replicas}** meet it with {f.confidence:.0%} confidence "
                           f"({f.resamples} resamples of whole {f.block_s:.0f}-s blocks; {f.replicas} hold in "
                           f"{f.held_share:.0%})" if f.confident_replicas else "")
                        + (f". Traffic × {f.growth:g} needs {f.growth_replicas}." if f.growth_replicas else
                           f". At traffic × {f.growth:g} no fleet up to 4,096 replicas holds it.")
                        + (f" Scaling per window instead of provisioning for the peak all day saves "
                           f"{f.gpu_hours_saved:,.1f} of {f.gpu_hours_peak:,.1f} GPU-hours over the trace."
                           if f.gpu_hours_saved is not None else ""))
        if len(r.compared) > 1:
            show_table(r.compared, f"{r.name}_compared")
        for note in (r.details or {}).get("diagnosis", []):
            st.markdown(f"- {note}")
        charts = recommend_charts.class_charts(r, out.max_queue_s)
        for name in ("fleet", "schedule"):
            if name in charts:
                st.altair_chart(charts[name], key=f"{r.name}_{name}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "rate_rps"):
            if name in charts:
                st.altair_chart(charts[name], key=f"{r.name}_{name}")
        if "pareto" in charts:
            c1, c2 = st.columns(2)
            c1.altair_chart(charts["pareto"], key=f"{r.name}_pareto")
            c2.altair_chart(charts["tornado"], key=f"{r.name}_tornado")
