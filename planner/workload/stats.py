"""Exact summary statistics of a stored trace, computed in DuckDB.

Percentiles interpolate linearly between order statistics (numpy's default). Every statistic covers the non-failed
requests, arrival statistics too: they are the requests the planner replays, so the rate here is the rate every
replay, search and recommendation scales (:func:`planner.workload.rates.request_rate_rps`); failed requests are
counted apart.
"""

from __future__ import annotations

import math

import duckdb

from planner.traces import store
from planner.traces.layouts import LATENCY_FIELDS
from planner.workload.rates import request_rate_rps

PERCENTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
DISPERSION_BINS_S = {"1s": 1.0, "10s": 10.0, "60s": 60.0}
LENGTH_FIELDS = ("input_tokens", "output_tokens", "total_tokens")


def _expr(fld: str) -> str:
    return "(input_tokens + output_tokens)" if fld == "total_tokens" else store.quote_ident(fld)


def percentile_block_sql(expr: str) -> str:
    """SQL selecting ``mean, p50 … p999, max, n`` of an expression (NULLs ignored)."""
    qs = ", ".join(repr(q) for q in PERCENTILES.values())
    return f"avg({expr}), quantile_cont({expr}, [{qs}]), max({expr}), count({expr})"


def _block(mean, quantiles, maximum) -> dict | None:
    if mean is None:
        return None
    block = {"mean": float(mean)}
    block.update({k: float(v) for k, v in zip(PERCENTILES, quantiles, strict=True)})
    block["max"] = float(maximum)
    return block


def percentile_table(con: duckdb.DuckDBPyConnection, trace_id: str,
                     fields: tuple[str, ...] = LENGTH_FIELDS + LATENCY_FIELDS) -> dict[str, dict | None]:
    """Percentile blocks (``mean, p50, p90, p95, p99, p999, max``) of each field over non-failed requests.

    Returns
    -------
    dict
        Field -> block, or None where the trace has no values for the field.
    """
    cur = con.cursor()
    parts = ", ".join(percentile_block_sql(_expr(f)) for f in fields)
    row = cur.execute(f"SELECT {parts} FROM {store.requests_view(trace_id)} WHERE NOT failed").fetchall()[0]
    return {f: _block(*row[i * 4:i * 4 + 3]) for i, f in enumerate(fields)}


def arrival_stats(con: duckdb.DuckDBPyConnection, trace_id: str, resolution_s: float | None) -> dict | None:
    """Span, mean rate, inter-arrival CV and count dispersion of a trace's arrivals (None without times).

    ``dispersion`` maps a bin width to the variance-to-mean ratio of request counts per bin, over every bin from
    the first arrival to the last (empty bins count: an idle minute is part of the burstiness).
    """
    cur = con.cursor()
    view = store.requests_view(trace_id)
    n, first, span = cur.execute(f"SELECT count(arrival), min(arrival), max(arrival) - min(arrival) FROM {view} "
                                 "WHERE NOT failed").fetchall()[0]
    if not n:
        return None
    span = float(span)
    gaps = cur.execute(
        f"SELECT avg(g), stddev_pop(g) FROM (SELECT arrival - lag(arrival) OVER (ORDER BY arrival, \"row\") AS g "
        f"FROM {view} WHERE arrival IS NOT NULL AND NOT failed) WHERE g IS NOT NULL").fetchall()[0]
    mean_gap, sd_gap = gaps
    cv = float(sd_gap / mean_gap) if mean_gap else None
    dispersion = {}
    for label, width in DISPERSION_BINS_S.items():
        nbins = int(math.floor(span / width)) + 1
        # counts per bin, empty bins included: mean = n / nbins, variance from sum of squares
        sum_sq = cur.execute(
            f"SELECT sum(c * c) FROM (SELECT count(*) AS c FROM {view} WHERE arrival IS NOT NULL AND NOT failed "
            f"GROUP BY floor((arrival - ?) / ?))", [first, width]).fetchall()[0][0]
        mean = n / nbins
        var = float(sum_sq) / nbins - mean * mean
        dispersion[label] = var / mean if nbins > 1 else None
    return {
        "span_s": span,
        "rate_rps": request_rate_rps(n, span),
        "interarrival_cv": cv,
        "timestamp_resolution_s": resolution_s,
        "dispersion": dispersion,
    }


def trace_stats(con: duckdb.DuckDBPyConnection, trace_ref: str) -> dict:
    """The ``stats`` CLI object: counts, percentile blocks and arrival statistics of one trace."""
    info = store.get_trace(con, trace_ref)
    table = percentile_table(con, info.trace_id)
    result = {"trace_id": info.trace_id, "name": info.name, "rows": info.rows, "failed": info.failed,
              "rejected": info.rejected}
    result.update({f: table[f] for f in LENGTH_FIELDS})
    result["latency_ms"] = {f.removesuffix("_ms"): table[f] for f in LATENCY_FIELDS if table[f] is not None}
    result["arrivals"] = (arrival_stats(con, info.trace_id, info.timestamp_resolution_s)
                          if info.has_timestamps else None)
    return result


def percentile_rows(table: dict[str, dict | None]) -> list[dict]:
    """Percentile blocks as table rows (``field, mean, p50 … max``), skipping fields without values."""
    return [{"field": f, **block} for f, block in table.items() if block is not None]


def stats_percentile_rows(stats: dict) -> list[dict]:
    """The percentile table of a ``stats`` object: lengths, then the measured latencies (``ttft_ms`` …), as the
    Overview page and the report show it."""
    return percentile_rows({k: stats[k] for k in LENGTH_FIELDS}
                           | {f"{k}_ms": v for k, v in (stats.get("latency_ms") or {}).items()})
