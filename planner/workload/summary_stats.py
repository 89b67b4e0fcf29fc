"""The ``stats`` object of a trace stored as its summary (:mod:`planner.traces.summary`): what the summary holds,
computed exactly as for a trace of requests, and what it does not hold, said so."""

from __future__ import annotations

import duckdb

from planner.traces import store
from planner.traces.summary import LOG2_BINS_PER_OCTAVE, summary_span_s, summary_table
from planner.workload.stats import LENGTH_FIELDS, arrival_block, block_without_count, percentile_blocks

# a latency read from its log2 bin's middle is within half a bin of the truth
HISTOGRAM_RELATIVE_ERROR = 2 ** (0.5 / LOG2_BINS_PER_OCTAVE) - 1


def summary_stats(con: duckdb.DuckDBPyConnection, info: store.TraceInfo) -> dict:
    """``stats`` of a summary: exact length percentiles, rate and dispersion; no inter-arrival CV (the gaps are
    not kept) and no total-token percentiles (the summary counts input and output lengths apart); latency
    percentiles from the histograms, each within :data:`HISTOGRAM_RELATIVE_ERROR` of a bin's middle."""
    cur, tid = con.cursor(), info.trace_id
    lengths = summary_table(tid, "length_counts")
    result = {"trace_id": tid, "name": info.name, "rows": info.rows, "failed": info.failed,
              "rejected": info.rejected, "summary": True}
    for fld in LENGTH_FIELDS:
        block = percentile_blocks(cur, lengths, "tokens", f"field = '{fld}'", weight="requests").get(None) \
            if fld != "total_tokens" else None
        result[fld] = block_without_count(block)
    result["latency_ms"] = {}
    histograms = _latency_from_histograms(cur, tid)
    if histograms:
        result["latency_ms_from_histograms"] = {"relative_error": HISTOGRAM_RELATIVE_ERROR, **histograms}
    result["arrivals"] = _arrivals(cur, tid, info) if info.has_timestamps else None
    result["not_in_summary"] = ["total_tokens (input and output are counted apart)",
                                "interarrival_cv (gaps between requests are not kept)",
                                "exact latency percentiles (latencies are kept as log2 histograms)"]
    return result


def _arrivals(cur, tid: str, info: store.TraceInfo) -> dict:
    counts = summary_table(tid, "arrival_counts")
    n, last = cur.execute(f"SELECT sum(requests), max(arrival_second) FROM {counts}").fetchone()
    # without arrival_span the last second stands for the span: the bin counts below are the same either way
    # (floor(span / w) = floor(floor(span) / w) for whole widths), only the rate's denominator is coarser
    span = summary_span_s(cur, tid)
    span = float(last) if span is None else span
    return arrival_block(int(n), span, None, 1.0, lambda width, bins: cur.execute(
        f"SELECT sum(c), sum(c * c) FROM (SELECT sum(requests) AS c FROM {counts} "
        f"WHERE arrival_second // $w < $bins GROUP BY arrival_second // $w)",
        {"w": int(width), "bins": bins}).fetchone())


def _latency_from_histograms(cur, tid: str) -> dict:
    try:
        table = summary_table(tid, "latency_histograms")
        out = {}
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            middle = f"power(2, (log2_bin + 0.5) / {LOG2_BINS_PER_OCTAVE})"
            block = percentile_blocks(cur, table, middle, f"metric = '{metric}'", weight="requests").get(None)
            if block is not None:
                out[metric.removesuffix("_ms")] = block_without_count(block)
        return out
    except duckdb.CatalogException:      # the summary has no latency_histograms
        return {}
