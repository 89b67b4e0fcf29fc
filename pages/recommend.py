"""Recommend: per SLO class, the vLLM settings that carry the most traffic on this trace, and why."""

import polars as pl
import streamlit as st

from pages._scenario import scenario, search_controls
from pages._shared import recommendation, require_frame, selected_trace
from planner.charts import recommend as recommend_charts
from planner.errors import PlannerError

require_frame()
st.title("Recommend")
s = scenario()
info = selected_trace()
if info is None or not info.has_timestamps:
    st.info("Select a trace with timestamps in the sidebar: recommendations replay its arrivals.")
    st.stop()
params = search_controls(s)
bar = st.progress(0.0, text="searching…")
try:
    out = recommendation(info.trace_id, params, s["model"], s["gpu"],
                         lambda f, msg: bar.progress(min(f, 1.0), text=msg))
except PlannerError as exc:
    bar.empty()
    st.error(str(exc))
    st.stop()
bar.progress(1.0, text=f"{out['simulations']} simulations")

rows = out["classes"]
table = [{"class": r["name"], "SLO": ", ".join(f"{k} < {v:g}" for k, v in r["slo"].items()) or "throughput",
          "feasible": r["feasible"], "max_num_seqs": r["config"]["max_num_seqs"],
          "max_num_batched_tokens": r["config"]["max_num_batched_tokens"],
          "preemption": r["config"]["preemption_mode"], "TP": r["tp"], "max_new_tokens": r["max_new_tokens"],
          "TTFT p99 ms": (r["predicted"] or {}).get("ttft_ms", {}).get("p99"),
          "TPOT p99 ms": (r["predicted"] or {}).get("tpot_ms", {}).get("p99"),
          "output tok/s": r["throughput_tok_s"], "req/s per replica": r["max_qps_per_replica"],
          "replicas": r["replicas_for_peak"], "GPUs": r["gpus"], "$/hour": r["cost_per_hour"],
          "$/M output tokens": r["cost_per_million_output_tokens"]} for r in rows]
st.dataframe(pl.DataFrame(table), hide_index=True, key="recommend_table")
st.caption(f"Trace rate {out['trace_rate_rps']:.2f} req/s; peak (p99 of per-minute rates) "
           f"{out['peak_rate_rps'] or 0:.2f} req/s × headroom {params['headroom']:g}."
           + (" Not compared: " + "; ".join(out["skipped"]) if out["skipped"] else ""))
for r in rows:
    with st.expander(f"{r['name']}: " + ("feasible" if r["feasible"] else "not feasible"), expanded=r["feasible"]):
        st.code(r["launch_command"], language="bash")
        if len(r["compared"]) > 1:
            st.dataframe(pl.DataFrame(r["compared"]), hide_index=True, key=f"{r['name']}_compared")
        for note in r["details"]["diagnosis"]:
            st.markdown(f"- {note}")
        if "sweeps" in r["details"]:
            lines = dict(r["slo"])
            for knob, chosen in (("max_num_seqs", r["config"]["max_num_seqs"]),
                                 ("max_num_batched_tokens", r["config"]["max_num_batched_tokens"]),
                                 ("rate_rps", r["max_qps_per_replica"])):
                points = r["details"]["sweeps"]["rate" if knob == "rate_rps" else knob]
                bands = r["details"]["bands"] if knob == "rate_rps" else None
                st.altair_chart(recommend_charts.sweep_chart(points, knob, chosen, lines, bands),
                                key=f"{r['name']}_{knob}")
            c1, c2 = st.columns(2)
            c1.altair_chart(recommend_charts.pareto_chart(r["details"]["points"], r["details"]["pareto"]),
                            key=f"{r['name']}_pareto")
            c2.altair_chart(recommend_charts.tornado_chart(r["details"]["tornado"]), key=f"{r['name']}_tornado")
