"""Recommend: per SLO class, the vLLM settings that carry the most traffic on this trace, and why."""

import polars as pl
import streamlit as st

from pages._scenario import URL, scenario
from pages._shared import recommendation, require_frame, selected_trace
from planner import recommend_charts
from planner.errors import PlannerError
from planner.recommend import parse_slo
from planner.sim.engines import ENGINES

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
c = st.columns(3)
engine = c[0].selectbox("Engine", list(ENGINES), key="engine", **URL,
                        help="; ".join(f"{e.name}: {e.label}" for e in ENGINES.values())
                        + ". vllm-v0 also compares recompute and swap preemption.")
tp_text = c[1].text_input("Compare TP degrees", "", key="tp_search", placeholder="e.g. 1,2,4", **URL,
                          help="by requests/s per GPU; empty: the scenario's TP")
caps_text = c[2].text_input("Compare max_new_tokens caps", "", key="caps", placeholder="e.g. none,p95", **URL,
                            help="none, integers, or pNN percentiles of the trace's output lengths")
slos = tuple(t.strip() for t in slo_text.split(";") if t.strip()) + ("throughput:throughput",)
try:
    tp_options = tuple(int(t) for t in tp_text.replace(" ", "").split(",") if t)
except ValueError:
    st.error(f"Compare TP degrees {tp_text!r}: expected integers such as 1,2,4")
    st.stop()
params = {"model": repr(s["model"]), "gpu": repr(s["gpu"]), "tp": s["tp"], "util": s["gpu_memory_utilization"],
          "max_len": s["max_model_len"], "kv_dtype": s["kv_cache_dtype"], "slos": slos, "headroom": headroom,
          "engine": engine, "tp_options": tp_options, "caps": tuple(t for t in caps_text.split(",") if t.strip())}
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
           f"{out['peak_rate_rps'] or 0:.2f} req/s × headroom {headroom:g}."
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
