"""Recommend: per SLO class, the vLLM settings that carry the most traffic on this trace, and why."""

import polars as pl
import streamlit as st

from pages._scenario import URL, scenario
from pages._shared import recommendation, require_frame, selected_trace
from planner import recommend_charts
from planner.errors import PlannerError
from planner.recommend import parse_slo

require_frame()
st.title("Recommend")
s = scenario()
info = selected_trace()
if info is None or not info.has_timestamps:
    st.info("Select a trace with timestamps in the sidebar: recommendations replay its arrivals.")
    st.stop()
c = st.columns([3, 1])
slo_text = c[0].text_input("SLO classes", "ttft:ttft_p99<200; tpot:tpot_p99<50", key="slos", **URL,
                           help="NAME:METRIC<VALUE separated by ';' (METRIC ttft_pNN, tpot_pNN or e2e_pNN in ms); "
                                "a throughput class (no latency bound) is always added")
headroom = c[1].number_input("Peak headroom ×", 1.0, 5.0, 1.0, 0.1, key="headroom", **URL)
slos = tuple(t.strip() for t in slo_text.split(";") if t.strip())
params = {"model": repr(s["model"]), "gpu": repr(s["gpu"]), "tp": s["tp"], "util": s["gpu_memory_utilization"],
          "max_len": s["max_model_len"], "kv_dtype": s["kv_cache_dtype"], "slos": slos, "headroom": headroom}
bar = st.progress(0.0, text="searching…")
try:
    for text in slos:            # a malformed class fails here, before the search
        parse_slo(text)
    out = recommendation(info.trace_id, params, s["model"], s["gpu"],
                         lambda f, msg: bar.progress(min(f, 1.0), text=msg))
except PlannerError as exc:
    bar.empty()
    st.error(str(exc))
    st.stop()
bar.progress(1.0, text=f"{out['simulations']} simulations")

rows = out["rows"]
table = [{"class": r["name"], "SLO": ", ".join(f"{k} < {v:g}" for k, v in r["slo"].items()) or "throughput",
          "feasible": r["feasible"], "max_num_seqs": r["config"]["max_num_seqs"],
          "max_num_batched_tokens": r["config"]["max_num_batched_tokens"], "preemption": "recompute",
          "TTFT p99 ms": (r["predicted"] or {}).get("ttft_ms", {}).get("p99"),
          "TPOT p99 ms": (r["predicted"] or {}).get("tpot_ms", {}).get("p99"),
          "output tok/s": r["throughput_tok_s"], "req/s per replica": r["max_qps_per_replica"],
          "replicas": r["replicas_for_peak"], "GPUs": r["gpus"], "$/hour": r["cost_per_hour"],
          "$/M output tokens": r["cost_per_million_output_tokens"]} for r in rows]
st.dataframe(pl.DataFrame(table), hide_index=True, key="recommend_table")
st.caption(f"Trace rate {out['trace_rate_rps']:.2f} req/s; peak (p99 of per-minute rates) "
           f"{out['peak_rate_rps'] or 0:.2f} req/s × headroom {headroom:g}.")
for r in rows:
    with st.expander(f"{r['name']}: " + ("feasible" if r["feasible"] else "not feasible"), expanded=r["feasible"]):
        st.code(f"vllm serve {s['model'].hf_id or s['model'].name} {r['vllm_args']}", language="bash")
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
