"""Simulate: replay the trace (or a synthetic workload) through a scheduler on the chosen GPUs."""

import numpy as np
import polars as pl
import streamlit as st

from pages._scenario import URL, scenario
from pages._shared import require_frame, selected_trace, simulation
from planner.charts import sim as sim_charts
from planner.sim.engines import ENGINES

require_frame()
st.title("Simulate")
s = scenario()
info = selected_trace()
c = st.columns(4)
engine = c[0].selectbox("Engine", list(ENGINES), key="engine", **URL,
                        help=" ".join(f"{e.label}: {e.help}" for e in ENGINES.values()))
seqs = c[1].number_input("max_num_seqs", 0, 100_000, 0, 8, key="seqs", **URL, help="0: vllm serve's default")
batched = c[2].number_input("max_num_batched_tokens", 0, 1_000_000, 0, 256, key="batched", **URL,
                            help="0: vllm serve's default")
max_new = c[3].number_input("max_new_tokens", 0, 1_000_000, 0, 64, key="max_new", **URL,
                            help="0: no cap; reserving engines then reserve up to max_model_len")
c = st.columns(4)
chunked = c[0].toggle("Chunked prefill", True, key="chunked", **URL)
preemption = c[1].selectbox("Preemption (vLLM V0)", ["recompute", "swap"], key="preemption", **URL)
remedy = c[2].selectbox("Remedy (vLLM V1)", ["none", "reserve predicted p75", "reserve predicted p95",
                                             "shortest predicted first"], key="remedy", **URL)
source = c[3].selectbox("Workload", ["trace replay", "trace lengths, fitted", "synthetic"], key="source", **URL)
c = st.columns(3)
scale = c[0].number_input("Rate × (trace replay)", 0.01, 1000.0, 1.0, 0.25, key="scale", **URL)
qps = c[1].number_input("Requests/s (fitted)", 0.01, 10_000.0, 2.0, 0.5, key="qps", **URL)
spec = c[2].text_input("Synthetic spec", "requests=2000,input=512,output=uniform:64:1024,qps=8", key="spec", **URL,
                       help="requests=N,input=LEN,output=LEN,qps=Q[,arrival=poisson|gamma:CV][,seed=N]")
if source != "synthetic" and info is None:
    st.info("Select a trace in the sidebar, or use a synthetic workload.")
    st.stop()

params = {"model": s["model"].name, "gpu": s["gpu"].name, "tp": s["tp"], "util": s["gpu_memory_utilization"],
          "max_len": s["max_model_len"], "kv_dtype": s["kv_cache_dtype"], "block": s["block_size"],
          "engine": engine, "seqs": int(seqs) or None, "batched": int(batched) or None,
          "max_new": int(max_new) or None, "chunked": chunked, "preemption": preemption, "remedy": remedy,
          "source": source, "scale": scale, "qps": qps, "spec": spec}
progress = st.progress(0.0, text="simulating…")
try:
    summary, ttft, tpot = simulation(info.trace_id if info else "", params | {"spec_of_model": repr(s["model"])},
                                     s["model"], s["gpu"])
except Exception as exc:  # noqa: BLE001 - the planner's message is the user's answer
    progress.empty()
    st.error(str(exc))
    st.stop()
progress.progress(1.0, text=f"{summary['steps']:,} steps simulated in {summary['sim_wall_s']:.2f} s")

m = st.columns(6)
m[0].metric("Completed", f"{summary['completed']:,}/{summary['requests']:,}")
m[1].metric("TTFT p50 / p99", f"{summary['ttft_ms']['p50']:,.0f} / {summary['ttft_ms']['p99']:,.0f} ms")
m[2].metric("TPOT p50 / p99", f"{summary['tpot_ms']['p50']:.1f} / {summary['tpot_ms']['p99']:.1f} ms")
m[3].metric("Output tok/s", f"{summary['throughput_tok_s']['output']:,.0f}")
m[4].metric("Preemptions", f"{summary['preemptions']:,}")
m[5].metric("Saturated", "yes" if summary["saturated"] else "no",
            help="The queue keeps growing: the offered rate exceeds what this configuration serves")
st.caption(f"{summary['workload']} · {ENGINES[engine].label} · settings {summary['settings']}")

rows = [{"metric": k.removesuffix("_ms"), **summary[k]} for k in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")]
st.dataframe(pl.DataFrame(rows), hide_index=True, key="sim_percentiles")
st.markdown("**By input length**")
st.dataframe(pl.DataFrame([{"bucket": b["bucket"], "n": b["n"], "ttft_p50": b["ttft_ms"]["p50"],
                            "ttft_p99": b["ttft_ms"]["p99"], "tpot_p50": b["tpot_ms"]["p50"],
                            "tpot_p99": b["tpot_ms"]["p99"]} for b in summary["per_input_bucket"]]),
             hide_index=True, key="sim_buckets")
c1, c2 = st.columns(2)
c1.altair_chart(sim_charts.cdf_chart(pl.concat([sim_charts.latency_quantiles(np.asarray(ttft), "TTFT"),
                                                sim_charts.latency_quantiles(np.asarray(tpot), "TPOT")]),
                                     "Latency CDFs"), key="sim_cdf")
c2.altair_chart(sim_charts.timeline_chart(summary["timeline"]), key="sim_timeline")
