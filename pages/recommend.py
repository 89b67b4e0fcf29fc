"""Recommend: per SLO class, the engine settings that carry the most traffic on this trace, and why."""

import streamlit as st

from pages._scenario import current
from pages._shared import recommendation, require_frame, selected_trace, show_rejections, show_table
from planner.charts import recommend as recommend_charts
from planner.errors import PlannerError
from planner.recommend.table import class_table

require_frame()
s, options = current(search=True)
info = selected_trace()
if info is None or not info.has_timestamps:
    st.info("Select a trace with timestamps in the sidebar: recommendations replay its arrivals.")
    st.stop()
bar = st.progress(0.0, text="searching…")
try:
    out = recommendation(info.trace_id, s, options, lambda f, msg: bar.progress(min(f, 1.0), text=msg))
except PlannerError as exc:
    bar.empty()
    st.error(str(exc))
    st.stop()
bar.progress(1.0, text=f"{out.simulations} simulations")
show_rejections(out.rejection_note)

show_table(class_table(out), "recommend_table", transpose=True)
st.caption(f"Trace rate {out.trace_rate_rps:.2f} req/s; peak (p99 of per-minute rates) "
           f"{out.peak_rate_rps or 0:.2f} req/s × headroom {options.headroom:g}. Every configuration is this "
           f"scenario ({s.engine}, {s.kv_cache_dtype} KV, {s.weight_dtype} weights, block {s.block_size}) with the "
           "settings shown." + (" Not compared: " + "; ".join(out.skipped) if out.skipped else ""))
for r in out.classes:
    with st.expander(f"{r.name}: " + ("feasible" if r.feasible else "not feasible"), expanded=r.feasible):
        st.code(r.launch_command, language="bash")
        if len(r.compared) > 1:
            show_table(r.compared, f"{r.name}_compared")
        for note in (r.details or {}).get("diagnosis", []):
            st.markdown(f"- {note}")
        charts = recommend_charts.class_charts(r)
        for name in ("max_num_seqs", "max_num_batched_tokens", "rate_rps"):
            if name in charts:
                st.altair_chart(charts[name], key=f"{r.name}_{name}")
        if "pareto" in charts:
            c1, c2 = st.columns(2)
            c1.altair_chart(charts["pareto"], key=f"{r.name}_pareto")
            c2.altair_chart(charts["tornado"], key=f"{r.name}_tornado")
