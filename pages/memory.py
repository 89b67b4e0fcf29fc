"""Memory & capacity: how many requests fit, computed the way vLLM computes it, and what other engines reserve."""

import math
from dataclasses import replace

import polars as pl
import streamlit as st

from pages._scenario import URL, scenario
from pages._shared import request_lengths, require_frame, selected_trace
from planner.capacity.memory import Overheads, default_batched_tokens, default_max_num_seqs
from planner.capacity.report import memory_report
from planner.capacity.reservation import POLICIES
from planner.capacity.vllm_log import fit_overheads, parse_log
from planner.catalog.gpus import GiB
from planner.charts import capacity as capacity_charts
from planner.errors import PlannerError

require_frame()
st.title("Memory & capacity")
s = scenario()
model, gpu = s["model"], s["gpu"]
with st.expander("Scheduler limits and overheads (vLLM's defaults; paste a startup log to fit them)"):
    c = st.columns(4)
    batched = c[0].number_input("max_num_batched_tokens", 0, 1_000_000, 0, 256, key="batched", **URL,
                                help=f"0: vllm serve's default here ({default_batched_tokens(gpu)})")
    seqs = c[1].number_input("max_num_seqs", 0, 100_000, 0, 8, key="seqs", **URL,
                             help=f"0: vllm serve's default here ({default_max_num_seqs(gpu)})")
    activation = c[2].number_input("Activation peak (GiB)", 0.0, 100.0, 0.0, 0.1, key="act", **URL,
                                   help="0: estimated from max_num_batched_tokens and max_num_seqs")
    non_torch = c[3].number_input("Non-torch (GiB)", 0.0, 50.0, 0.0, 0.1, key="nontorch", **URL,
                                  help="0: 0.3 GiB, +1.2 GiB of NCCL buffers under TP")
    c = st.columns(4)
    graphs = c[0].number_input("CUDA graphs (GiB)", 0.0, 20.0, 0.0, 0.1, key="graphs", **URL,
                               help="0: estimated from the layers and max_num_seqs")
    counted = c[1].toggle("Graphs inside the budget", True, key="graphs_counted", **URL,
                          help="vLLM ≥ 0.21 subtracts estimated CUDA-graph memory before sizing the KV cache; "
                               "earlier versions captured graphs outside it")
    override = c[2].number_input("num_gpu_blocks override", 0, 100_000_000, 0, 1024, key="blocks", **URL)
    fit_n = c[3].number_input("Fit check: sequences", 1, 100_000, 32, key="fit_n", **URL)
    log_text = st.text_area("vLLM startup log", key="vllm_log", height=120,
                            placeholder="Model loading took 14.99 GiB …\nAvailable KV cache memory: 54.49 GiB …")

overheads = Overheads(activation_bytes=int(activation * GiB) if activation else None,
                      non_torch_bytes=int(non_torch * GiB) if non_torch else None,
                      cudagraph_bytes=int(graphs * GiB) if graphs else None, cudagraph_counted=counted)
if log_text.strip():
    parsed = parse_log(log_text)
    try:
        if parsed.total_bytes:
            gpu = replace(gpu, memory_bytes=parsed.total_bytes)
        overheads = fit_overheads(parsed, math.ceil(gpu.memory_bytes * s["gpu_memory_utilization"]))
        st.success("Overheads fitted from the log: " + ", ".join(f"{k} {v:,}" for k, v in parsed.found().items()))
    except PlannerError as exc:
        st.error(str(exc))

info = selected_trace()
lengths = request_lengths(info.trace_id) if info else None
report = memory_report(model, gpu, tp=s["tp"], gpu_memory_utilization=s["gpu_memory_utilization"],
                       kv_cache_dtype=s["kv_cache_dtype"], max_model_len=s["max_model_len"],
                       block_size=s["block_size"], max_num_batched_tokens=batched or None, max_num_seqs=seqs or None,
                       num_gpu_blocks=override or None, weight_dtype=s["weight_dtype"], overheads=overheads,
                       lengths=lengths, fit=(int(fit_n), s["max_model_len"] or model.max_position))
plan = report["plan"]

m = st.columns(6)
m[0].metric("Parameters", f"{report['param_count'] / 1e9:.2f} B", help=model.help or None)
m[1].metric("KV per token", f"{report['kv_bytes_per_token'] / 1024:,.0f} KiB",
            help=f"All layers, one replica; per GPU {report['kv_bytes_per_token_per_gpu'] / 1024:,.1f} KiB")
m[2].metric("KV pool per GPU", f"{report['kv_pool_bytes'] / GiB:.2f} GiB", help="vLLM: Available KV cache memory")
m[3].metric("KV tokens per GPU", f"{report['kv_capacity_tokens']:,}", help=f"{report['num_blocks']:,} blocks")
m[4].metric("Max concurrency", f"{report['max_concurrency']:.2f}x",
            help=f"vLLM: Maximum concurrency for {plan['max_model_len']:,} tokens per request")
if "trace" in report:
    m[5].metric("This trace at once", f"{report['trace']['concurrency_at_mean']:.0f}",
                help=f"KV tokens / mean final length ({report['trace']['mean_final_tokens']:,.0f}); "
                     f"{report['trace']['concurrency_at_p95']:.0f} at the p95; binding: {report['trace']['binding']}")
st.altair_chart(capacity_charts.breakdown_bar(report["breakdown_gib"]), key="breakdown")
st.caption(f"Overheads: {plan['overheads_source']}. requested = ceil({s['gpu_memory_utilization']} × "
           f"{gpu.memory_bytes / GiB:.2f} GiB) = {plan['requested_bytes'] / GiB:.2f} GiB; weights "
           f"{plan['weights_bytes_per_gpu'] / GiB:.2f}, activation {plan['activation_bytes'] / GiB:.2f}, non-torch "
           f"{plan['non_torch_bytes'] / GiB:.2f} GiB.")

budget, reservation, other = st.tabs(["Concurrency and fit", "Reservation policies", "Padding and preemption"],
                                     key="memory_view", on_change="rerun", bind="query-params")
if budget.open:
    with budget:
        st.altair_chart(capacity_charts.concurrency_chart(report["concurrency_curve"], report.get("trace")),
                        key="concurrency")
        check = report["fit_check"]
        st.markdown(f"**Fit check** — {check['sequences']} sequences of {check['tokens']:,} tokens: "
                    + (f"smallest TP is **{check['tp']}**" if check["tp"] else "does not fit up to TP 64"))
        st.dataframe(pl.DataFrame(check["tried"]), hide_index=True, key="fit_table")
        st.markdown("**The seed article's arithmetic** (seed 003, not an engine's figure)")
        st.caption(report["seed"]["formula"])
        st.dataframe(pl.DataFrame(report["seed"]["rows"]), hide_index=True, key="seed_table")
if reservation.open:
    with reservation:
        if "reservations" not in report:
            st.info("Select a trace to size reservations against its lengths.")
        else:
            st.altair_chart(capacity_charts.reservation_chart(report["reservations"]), key="reservations")
            for policy in POLICIES.values():
                st.caption(f"**{policy.label}** — {policy.help}")
            st.markdown("**max_new_tokens at the trace's p90 / p95 / p99 output** (seed 002's procedure)")
            st.dataframe(pl.DataFrame(report["max_new_tokens_settings"]), hide_index=True, key="settings")
if other.open:
    with other:
        if "padding" not in report:
            st.info("Select a trace to see padding and preemption on its lengths.")
        else:
            c1, c2 = st.columns(2)
            c1.markdown("**Static batching: useful tokens** (prompt + output, padded to the longest)")
            c1.altair_chart(capacity_charts.padding_chart(report["padding"]), key="padding")
            pre = report["preemption"]
            c2.markdown("**Preemption: recompute vs swap** — " + (
                f"{pre['cheaper_at_shortest']} is cheaper up to {pre['crossover_tokens']:,.0f} tokens"
                if pre["crossover_tokens"] else f"{pre['cheaper_at_shortest']} is cheaper at every length")
                + f". {pre['note']}.")
            c2.altair_chart(capacity_charts.preemption_chart(pre["points"], pre["crossover_tokens"]), key="preempt")
