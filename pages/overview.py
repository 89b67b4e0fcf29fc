"""Overview: counts, the exact percentile table and arrival statistics of the selected trace."""

import json

import polars as pl
import streamlit as st

from pages._shared import rejects_csv, selected_trace, show_table, trace_stats
from planner.traces.timestamps import describe_resolution
from planner.workload.stats import stats_percentile_rows

st.title("Overview")
info = selected_trace()
if info is None:
    st.info("No trace selected. Upload a request log on the **Traces** page.")
    st.stop()

stats = trace_stats(info.trace_id)
arrivals = stats["arrivals"]
st.caption(f"**{info.name}** · {info.source_file} · {info.format}"
           f"{'' if info.compression == 'none' else ' (' + info.compression + ')'} · layout `{info.layout}` · "
           f"ingested {info.created}")

cols = st.columns(5)
cols[0].metric("Requests", f"{info.rows:,}", help="Rows stored, failed requests included")
cols[1].metric("Failed", f"{info.failed:,}", help="Stored but flagged: zero output tokens or a failure status")
cols[2].metric("Rejected", f"{info.rejected:,}", help="Rows not stored, kept with their reason below")
if arrivals:
    cols[3].metric("Span", f"{arrivals['span_s'] / 60:,.1f} min")
    offered = arrivals.get("offered_rate_rps")
    cols[4].metric("Mean rate", f"{arrivals['rate_rps']:.3g} req/s" if arrivals["rate_rps"] else "—",
                   help="Of the non-failed requests, the rate every replay scales"
                   + (f"; {offered:.3g} req/s offered, failed requests included" if offered else ""))
else:
    cols[3].metric("Span", "no times")

st.subheader("Percentiles", help="Exact (linear interpolation between order statistics, as numpy's default), "
             "over non-failed requests")
show_table(stats_percentile_rows(stats), "overview_percentiles",
           column_config={c: st.column_config.NumberColumn(format="%.1f") for c in
                          ("mean", "p50", "p90", "p95", "p99", "p999", "max")})

st.subheader("Arrivals")
if arrivals is None:
    st.info("This trace has no timestamps: lengths only. Arrival-based views need a synthetic arrival process.")
else:
    a = st.columns(4)
    a[0].metric("Inter-arrival CV", f"{arrivals['interarrival_cv']:.3g}" if arrivals["interarrival_cv"] else "—",
                help="1 for Poisson arrivals; above 1 is bursty. Unreliable for coarse timestamps or on/off traffic")
    a[1].metric("Timestamp resolution", describe_resolution(arrivals["timestamp_resolution_s"]),
                help=f"Arrival column read as {info.time_kind}")
    disp = arrivals["dispersion"]
    a[2].metric("Dispersion 1 s", f"{disp['1s']:.3g}" if disp["1s"] is not None else "—",
                help="Variance-to-mean ratio of request counts per 1 s bin (1 for Poisson)")
    a[3].metric("Dispersion 60 s", f"{disp['60s']:.3g}" if disp["60s"] is not None else "—",
                help="Variance-to-mean ratio of request counts per minute: non-stationarity shows here")

with st.expander("Source and column mapping"):
    st.dataframe(pl.DataFrame([{"field": f, "column": c, "unit": info.units.get(f, "")}
                               for f, c in info.mapping.items()]), hide_index=True, key="overview_mapping")
    if info.dialect:
        st.caption("CSV dialect: " + json.dumps(info.dialect))
    for note in info.notes:
        st.caption(note)

if info.rejected:
    with st.expander(f"Rejected rows ({info.rejected:,})"):
        st.download_button("Download rejected rows (CSV)", rejects_csv(info.trace_id),
                           file_name=f"{info.name}-rejects.csv", mime="text/csv", on_click="ignore",
                           key="overview_rejects_download")
