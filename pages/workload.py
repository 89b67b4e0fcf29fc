"""Workload: length and arrival distributions fitted honestly, the joint view and latency by length bucket."""

import streamlit as st

from pages._prefix import shared_prefix, trace_reuse
from pages._shared import length_fit, rate_table, selected_trace, show_table, trace_stats, workload_report
from planner.charts import workload as charts
from planner.errors import PlannerError
from planner.workload.stats import LENGTH_FIELDS, percentile_rows
from planner.workload.tables import DEFAULT_BUCKET_EDGES, parse_bucket_edges

NUMBER = {c: st.column_config.NumberColumn(format="%.4g") for c in
          ("mean", "p50", "p90", "p95", "p99", "p999", "max", "aic", "delta_aic", "bic", "ks", "share",
           "tail_share", "tail_lift")}
# bound to the URL, and kept while their tab is closed (a hidden widget would otherwise drop its value)
URL = {"bind": "query-params", "persist_state": "page"}
WINDOWS = {"auto": None, "1 min": 60.0, "10 min": 600.0, "1 h": 3600.0, "1 day": 86400.0}

st.title("Workload")
info = selected_trace()
if info is None:
    st.info("No trace selected. Upload a request log on the **Traces** page.")
    st.stop()

tab_lengths, tab_arrivals, tab_joint, tab_latency, tab_reuse = st.tabs(
    ["Lengths", "Arrivals", "Joint", "Latency", "Prefix reuse"], key="view", on_change="rerun", bind="query-params")
# a trace stored as its summary has exact length counts, per-second arrivals and latency histograms, no requests
summary = info.layout == "summary"
if summary:
    for tab in (tab_arrivals, tab_joint, tab_latency):
        if tab.open:
            with tab:
                st.info("This trace is a summary (`ingest --summary`): it counts lengths and arrivals per second "
                        "but keeps no requests, so this view has nothing to show. Its rate, dispersion and "
                        "latency percentiles (from histograms) are on the **Overview** page; its length fits "
                        "are under **Lengths**.")

if tab_lengths.open:
    with tab_lengths:
        c1, c2, c3 = st.columns([2, 1, 1])
        field = c1.segmented_control("Field", LENGTH_FIELDS, default="input_tokens", key="field",
                                     **URL, required=True)
        cap = c2.number_input("Cap (tokens)", min_value=0, value=0, step=256, key="cap", **URL,
                              help="max_tokens or context length: values at or above it are censored there. "
                                   "0 = detect a spike at the maximum")
        detect = c3.toggle("Detect a cap", value=True, key="detect", **URL, disabled=cap > 0)
        try:
            x, w, fit = length_fit(info.trace_id, field, float(cap) if cap else None, detect)
        except PlannerError as exc:      # one request: no family to fit
            st.info(str(exc))
            fit = None
        if fit is not None and fit.point_mass:
            st.info(f"{field}: every length below any cap is {fit.empirical_quantiles['p50']:,.0f}: nothing to fit; "
                    "a replay of fitted lengths draws them as they are")
            fit = None
        if fit is not None:
            m = st.columns([1, 2, 1, 1])     # family names such as lognormal_pareto need the room
            m[0].metric("Requests fitted", f"{fit.n - fit.dropped_nonpositive:,}",
                        help="Non-failed requests with a positive value")
            m[1].metric("Best fit (AIC)", fit.best)
            m[2].metric("Cap", f"{fit.censored_at:g}" if fit.censored_at is not None else "none",
                        help="Values at or above it enter the likelihood through the survival function")
            m[3].metric("Censored", f"{fit.censored_fraction:.2%}")
            if fit.dropped_nonpositive:
                st.caption(f"{fit.dropped_nonpositive:,} zero-length requests are outside every family and not fitted.")
            show_table(fit.ranking_rows(), "fit_ranking",
                       column_config=NUMBER | {"p50": st.column_config.NumberColumn("p50 fitted", format="%.4g")})
            st.caption("Empirical quantiles: " + ", ".join(f"{k} {v:,.4g}" for k, v in fit.empirical_quantiles.items())
                       + ". Ranked by AIC; KS is a sanity check (ties and caps inflate it), not the ranking.")
            label = field.replace("_", " ")
            g1, g2, g3 = st.columns(3)
            g1.altair_chart(charts.length_histogram(x, w, fit, f"{label}: histogram and fits"), key="hist")
            g2.altair_chart(charts.cdf_chart(x, w, fit, f"{label}: CDF"), key="cdf")
            g3.altair_chart(charts.qq_chart(x, w, fit, f"{label}: QQ"), key="qq")

        st.subheader("Percentiles", help="Exact, over non-failed requests")
        stats = trace_stats(info.trace_id)
        show_table(percentile_rows({f: stats[f] for f in LENGTH_FIELDS}), "length_percentiles",
                   column_config=NUMBER)
        window_label = st.selectbox("Time window", list(WINDOWS), key="window", **URL,
                                    disabled=not info.has_timestamps or summary)
        report = {"per_model": [], "per_window": []} if summary else \
            workload_report(info.trace_id, WINDOWS[window_label], DEFAULT_BUCKET_EDGES)
        if report["per_model"]:
            st.markdown("**Per model**")
            show_table(report["per_model"], "per_model", column_config=NUMBER)
        if report["per_window"]:
            st.markdown(f"**Per {report['window_s']:g} s window** (group = window start, s from the first request)")
            show_table(report["per_window"], "per_window", column_config=NUMBER)

if tab_arrivals.open and not summary:
    with tab_arrivals:
        report = workload_report(info.trace_id, None, DEFAULT_BUCKET_EDGES)
        arrivals = report["arrivals"]
        if arrivals is None:
            st.info("This trace has no timestamps: arrival views need an arrival column.")
        else:
            fit, peaks = arrivals["fit"], arrivals["peaks"]
            m = st.columns(3) + st.columns(3)       # five tiles in one row cut their values
            m[0].metric("Mean rate", f"{peaks['mean_rate_rps']:.3g} req/s" if peaks["mean_rate_rps"] else "—",
                        help="None when every request arrived at one instant")
            m[1].metric("Peak rate", f"{peaks['peak_rate_rps']:.3g} req/s" if peaks["peak_rate_rps"] else "—",
                        help="p99 of per-minute rates: the rate to provision for")
            m[2].metric("Peak/mean 1 s · 10 s · 60 s", " · ".join(
                f"{v:.2g}" if v else "—" for v in peaks["peak_to_mean"].values()))
            m[3].metric("Inter-arrival CV", f"{fit['cv']:.3g}" if fit["cv"] is not None else "—",
                        help="1 for Poisson; meaningless for coarse clocks or on/off traffic")
            test = fit["poisson_test"]
            m[4].metric("Poisson?", "untested" if test is None else "consistent" if test["consistent"] else "rejected",
                        help=(f"Index-of-dispersion test on {test['bins']:,} bins of {test['bin_s']:.3g} s: "
                              f"VMR {test['vmr']:.3g}, p = {test['p_value']:.2g} (reject below 0.01)")
                        if test else "Too few bins to test")
            if fit["quantized"]:
                st.warning(f"Timestamps are coarse: {fit['tie_fraction']:.0%} of gaps are ties and the clock ticks "
                           f"every ~{fit['quantum_s']:.3g} s. Inter-arrival fits and the CV are meaningless here; "
                           "judge burstiness by the dispersion of counts below.")
            st.altair_chart(charts.rate_timeline(rate_table(info.trace_id), peaks["mean_rate_rps"],
                                                 peaks["peak_rate_rps"]), key="timeline")
            c1, c2 = st.columns(2)
            c1.markdown("**Dispersion of counts against bin width**")
            c1.altair_chart(charts.dispersion_chart(arrivals["dispersion"]), key="dispersion")
            c2.markdown(f"**Inter-arrival fits** (gaps in seconds; {fit['tie_fraction']:.1%} ties censored below "
                        "the clock's resolution)")
            with c2:
                show_table([{"family": c["family"], "aic": c["aic"], "ks": c["ks"],
                             "params": ", ".join(f"{k}={v:.4g}" for k, v in c["params"].items())}
                            for c in fit["candidates"]], "gap_fits", column_config=NUMBER)

if tab_joint.open and not summary:
    with tab_joint:
        report = workload_report(info.trace_id, None, DEFAULT_BUCKET_EDGES)
        rho = report["spearman_input_output"]
        st.metric("Spearman ρ (input, output)", f"{rho:.3f}" if rho is not None else "—",
                  help="Rank correlation over non-failed requests; near 0 means lengths can be sampled independently")
        st.altair_chart(charts.joint_heatmap(report["joint_histogram"]), key="joint")

if tab_latency.open and not summary:
    with tab_latency:
        edges_text = st.text_input("Length bucket edges (tokens)", value="512,2048", key="buckets",
                                   **URL, help="Comma-separated; 512,2048 gives 0–512, 512–2048, 2048+")
        try:
            edges = parse_bucket_edges(edges_text)     # the CLI's rule: a 0 or a NaN edge broke the query
        except PlannerError as exc:
            st.error(str(exc).replace("--buckets", "Bucket edges"))
            st.stop()
        report = workload_report(info.trace_id, None, edges)
        if not report["latency_buckets"]:
            st.info("This trace carries no TTFT, TPOT or end-to-end latency.")
        for lat_field, by_fields in report["latency_buckets"].items():
            st.subheader(lat_field.removesuffix("_ms").upper() + " (ms)")
            cols = st.columns(len(by_fields))
            for col, (by_field, buckets) in zip(cols, by_fields.items(), strict=True):
                col.markdown(f"By **{by_field.replace('_', ' ')}**: overall p99 {buckets['overall_p99']:.1f} ms; "
                             f"bucket **{buckets['driver']}** holds most requests above it")
                col.altair_chart(charts.bucket_chart(buckets["buckets"], lat_field, by_field),
                                 key=f"bucket_{lat_field}_{by_field}")
            for by_field, buckets in by_fields.items():      # full width: nine columns do not fit half a page
                st.caption(f"By {by_field.replace('_', ' ')}")
                show_table([{k: v for k, v in b.items() if k not in ("lo", "hi")} for b in buckets["buckets"]],
                           f"buckets_{lat_field}_{by_field}", column_config=NUMBER)

if tab_reuse.open:
    with tab_reuse:
        block = st.segmented_control("KV block size", [16, 32, 64], default=16, key="reuse_block", **URL,
                                     required=True, help="vLLM's --block-size: hits are whole blocks")
        try:
            reuse = trace_reuse(info.trace_id, shared_prefix(), int(block))
        except PlannerError as exc:
            st.error(str(exc))
            st.stop()
        st.caption(f"Prefix identity: {reuse.describe}.")
        if not reuse.curve:
            st.info("Without a prefix identity the trace's reuse is unknown. Mooncake-style traces carry hash_ids; "
                    "traces with session ids give it by derivation; for others declare a shared prefix (a system "
                    "prompt) in the sidebar.")
            st.stop()
        groups = reuse.groups
        m = st.columns(4)
        m[0].metric("Ideal hit rate", f"{reuse.ideal_hit_rate:.1%}",
                    help="Prompt tokens an infinite cache would serve, requests one after another in arrival order")
        m[1].metric("Working set", f"{reuse.working_set_tokens:,} tokens",
                    help="Distinct KV blocks the ideal cache ends up holding")
        m[2].metric(f"Groups ({groups['by']})", f"{groups['multi_request_groups']:,}",
                    help=f"with two requests or more; {groups['mean_requests_per_group'] or 0:.2f} requests per "
                         "group on average")
        m[3].metric("Per-group hit rate p50 · p90", " · ".join(
            f"{v:.0%}" if v is not None else "—" for v in (groups["hit_rate_p50"], groups["hit_rate_p90"])),
            help="The ideal hit rate within each group of two requests or more")
        st.altair_chart(charts.reuse_curve(reuse.to_dict()["curve"], reuse.ideal_hit_rate), key="reuse_curve")
        st.caption("LRU hit rate against the cache's size, requests in arrival order with vLLM V1's rules (the last "
                   "prompt token always recomputed; a request's blocks freed last block first). The Memory page "
                   "puts this curve in GiB of the scenario's KV and marks its pool; the Simulate page measures the "
                   "hits under load.")
        show_table([{"cache tokens": p.cache_tokens, "cache blocks": p.cache_blocks, "LRU hit rate": p.hit_rate}
                    for p in reuse.curve], "reuse_table", column_config=NUMBER)
