"""Memory & capacity: how many requests fit, computed the way vLLM computes it, and what other engines reserve."""

import streamlit as st

from pages._prefix import shared_prefix, trace_reuse
from pages._scenario import URL, current
from pages._shared import request_lengths, require_frame, selected_trace, show_table
from planner.capacity.report import capacity_report, prefix_capacity_table
from planner.capacity.reservation import POLICIES
from planner.catalog.gpus import GiB
from planner.charts import capacity as capacity_charts
from planner.charts import workload as charts
from planner.errors import PlannerError

require_frame()
s, _ = current()
fit_n = st.number_input("Fit check: sequences of max_model_len", 1, 100_000, 32, key="fit_n", **URL,
                        help="The smallest TP degree with room for this many requests of max_model_len tokens")
info = selected_trace()
if info and info.layout == "summary":      # counts of each length apart: no request's final length to fit
    st.caption(f"{info.name} is a summary: it keeps no requests, so the capacity below is not checked against "
               "its requests' lengths.")
    info = None
try:
    report = capacity_report(s, lengths=request_lengths(info.trace_id) if info else None,
                             fit=(int(fit_n), s.max_model_len),
                             reuse=trace_reuse(info.trace_id, shared_prefix(), s.block_size) if info else None)
except PlannerError as exc:
    st.error(str(exc))
    st.stop()
plan = report.plan
for problem in s.memory_problems:       # above the figures: they describe a server that would not start
    st.warning(problem, icon=":material/memory:")

m = st.columns(3)
m[0].metric("Parameters", f"{plan.param_count / 1e9:.2f} B", help=s.model.help or None)
m[1].metric("KV per token", f"{plan.kv_bytes_per_token / 1024:,.0f} KiB",
            help=f"All layers, one replica; per GPU {plan.kv_bytes_per_token_per_gpu / 1024:,.1f} KiB")
m[2].metric("KV pool per GPU", f"{plan.kv_pool_bytes / GiB:.2f} GiB", help="vLLM: Available KV cache memory")
m = st.columns(3)
m[0].metric("KV tokens per GPU", f"{plan.kv_capacity_tokens:,}",
            help=f"{plan.num_blocks:,} blocks of {plan.block_size} tokens")
m[1].metric("Max concurrency", f"{plan.max_concurrency:.2f}x",
            help=f"vLLM: Maximum concurrency for {plan.max_model_len:,} tokens per request")
if report.trace:
    m[2].metric("This trace at once", f"{report.trace['concurrency_at_mean']:.0f}",
                help=f"KV tokens / mean final length ({report.trace['mean_final_tokens']:,.0f}); "
                     f"{report.trace['concurrency_at_p95']:.0f} at the p95; binding: {report.trace['binding']}")
st.altair_chart(capacity_charts.breakdown_bar(plan), key="breakdown")
st.caption(f"Overheads: {plan.overheads_source}. requested = ceil({s.gpu_memory_utilization} × "
           f"{s.gpu.memory_bytes / GiB:.2f} GiB) = {plan.requested_bytes / GiB:.2f} GiB; weights "
           f"{plan.weights_bytes_per_gpu / GiB:.2f}, activation {plan.activation_bytes / GiB:.2f}, non-torch "
           f"{plan.non_torch_bytes / GiB:.2f} GiB.")

if plan.override_warning:
    st.warning(plan.override_warning)
budget, reservation, other, cache_tab = st.tabs(
    ["Concurrency and fit", "Reservation policies", "Padding and preemption", "Prefix cache"], key="memory_view",
    on_change="rerun", bind="query-params")
if budget.open:
    with budget:
        st.altair_chart(capacity_charts.concurrency_chart(report.concurrency_curve, report.trace),
                        key="concurrency")
        check = report.fit_check
        st.markdown(f"**Fit check** — {check.sequences} sequences of {check.tokens:,} tokens: "
                    + (f"smallest TP is **{check.tp}**" if check.tp else "does not fit up to TP 64"))
        show_table(check.tried, "fit_table")
        st.markdown("**The seed article's arithmetic** (seed 003, not an engine's figure)")
        st.caption(report.seed["formula"])
        show_table(report.seed["rows"], "seed_table")
if reservation.open:
    with reservation:
        if report.reservations is None:
            st.info("Select a trace to size reservations against its lengths.")
        else:
            st.altair_chart(capacity_charts.reservation_chart(report.reservations), key="reservations")
            for policy in POLICIES.values():
                st.caption(f"**{policy.label}** — {policy.help}")
            st.markdown("**max_new_tokens at the trace's p90 / p95 / p99 output** (seed 002's procedure)")
            show_table(report.max_new_tokens_settings, "settings")
if other.open:
    with other:
        if report.padding is None:
            st.info("Select a trace to see padding and preemption on its lengths.")
        else:
            c1, c2 = st.columns(2)
            c1.markdown("**Static batching: useful tokens** (prompt + output, padded to the longest)")
            c1.altair_chart(capacity_charts.padding_chart(report.padding), key="padding")
            pre = report.preemption
            c2.markdown("**Preemption: recompute vs swap** — " + (
                f"{pre['cheaper_at_shortest']} is cheaper up to {pre['crossover_tokens']:,.0f} tokens"
                if pre["crossover_tokens"] else f"{pre['cheaper_at_shortest']} is cheaper at every length")
                + f". {pre['note']}.")
            c2.altair_chart(capacity_charts.preemption_chart(pre["points"], pre["crossover_tokens"]), key="preempt")
if cache_tab.open:
    with cache_tab:
        cache = report.prefix_cache
        if cache is None:
            st.info("Select a trace with a prefix identity (hash_ids, sessions, or a shared prefix declared in the "
                    "sidebar) to see how much of its reuse this KV pool holds.")
        else:
            m = st.columns(4)
            m[0].metric("LRU hit rate at this pool", f"{cache['lru_hit_rate_at_pool']:.1%}",
                        help=f"{cache['pool_tokens']:,} tokens: the whole pool as a cache, an upper bound (running "
                             "requests' blocks take part of it under load)")
            m[1].metric("Ideal hit rate", f"{cache['ideal_hit_rate']:.1%}")
            holding = cache["holding_gib"]          # None: no pool size reaches that share of the ideal
            m[2].metric(f"KV for {cache['holding_share']:.0%} of ideal",
                        f"{holding:,.1f} GiB" if holding is not None else "—",
                        help=f"{cache['holding_tokens']:,} tokens of this model's KV" if holding is not None else
                        "No KV size reaches that share of the ideal hit rate: the trace reuses (almost) nothing")
            util = cache["gpu_memory_utilization_to_hold"]
            m[3].metric("gpu_memory_utilization to hold it", f"{util:.2f}" if util is not None else "—",
                        delta="beyond these GPUs" if util is not None and util > 1 else None, delta_color="off",
                        help="Above 1: beyond these GPUs; offload "
                             f"{cache['offload_gib'] or 0:,.1f} GiB of KV to the host (e.g. LMCache) or add replicas")
            st.altair_chart(charts.reuse_curve(cache["curve"], cache["ideal_hit_rate"], cache["pool_gib"],
                                               x="cache_gib"), key="prefix_curve")
            show_table(prefix_capacity_table(cache), "prefix_capacity")
