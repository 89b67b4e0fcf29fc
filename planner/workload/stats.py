"""Exact summary statistics of a stored trace, computed in DuckDB.

Percentiles interpolate linearly between order statistics (numpy's default). Every statistic covers the non-failed
requests, arrival statistics too: they are the requests the planner replays, so the rate here is the rate every
replay, search and recommendation scales (:func:`planner.workload.rates.request_rate_rps`); failed requests are
counted apart, and ``offered_rate_rps`` gives the rate the clients offered, failed requests included.
"""

from __future__ import annotations

import math

import duckdb

from planner.jsonable import PERCENTILES
from planner.traces import store
from planner.traces.layouts import LATENCY_FIELDS
from planner.workload.fitting.arrivals import whole_bins
from planner.workload.rates import request_rate_rps

DISPERSION_BINS_S = {"1s": 1.0, "10s": 10.0, "60s": 60.0}
LENGTH_FIELDS = ("input_tokens", "output_tokens", "total_tokens")


def _expr(fld: str) -> str:
    return "(input_tokens + output_tokens)" if fld == "total_tokens" else store.quote_ident(fld)


def percentile_blocks(cur, view: str, expr: str, where: str = "true", key: str = "NULL",
                      quantiles: dict[str, float] = PERCENTILES, weight: str | None = None) -> dict:
    """Exact percentile blocks (``mean, p50 … p999, max``, with ``n``) of ``expr`` over the rows of ``view`` that
    pass ``where``, one per value of ``key`` (a constant key: one block), NULLs ignored.

    Computed from counts per distinct value with a running sum over them, never by holding every value at once:
    DuckDB's hash aggregate and window spill to disk, so memory stays bounded whatever the row count (a length
    has a few thousand distinct values however long the trace). The ``k``-th order statistic is the smallest
    value whose running count exceeds ``k``; a percentile interpolates linearly between the two around
    ``q·(n − 1)``, as numpy's default does. ``quantiles`` names the percentiles (``{"p50": 0.5, …}``);
    ``weight``, a column of ``view`` counting how many times each row's value occurs (a table of counts).

    Returns
    -------
    dict
        Key value -> block; keys with no values are absent.
    """
    picks = []
    for q in quantiles.values():
        pos = f"{q!r} * (total - 1)"
        picks.append(f"min(v) FILTER (WHERE upto > floor({pos})), min(v) FILTER (WHERE upto > ceil({pos}))")
    rows = cur.execute(
        f"WITH c AS (SELECT {key} AS g, {expr} AS v, {f'sum({weight})' if weight else 'count(*)'} AS n FROM {view} "
        f"WHERE ({where}) AND {expr} IS NOT NULL "
        f"GROUP BY ALL), "
        f"r AS (SELECT g, v, n, sum(n) OVER (PARTITION BY g ORDER BY v ROWS UNBOUNDED PRECEDING) AS upto, "
        f"sum(n) OVER (PARTITION BY g) AS total FROM c) "
        f"SELECT g, max(total), sum(v * n) / sum(n), max(v), {', '.join(picks)} FROM r GROUP BY g ORDER BY g"
    ).fetchall()
    out = {}
    for g, total, mean, maximum, *bounds in rows:
        block = {"mean": float(mean)}
        for i, (name, q) in enumerate(quantiles.items()):
            lo, hi = float(bounds[2 * i]), float(bounds[2 * i + 1])
            pos = q * (int(total) - 1)
            block[name] = lo + (hi - lo) * (pos - math.floor(pos))
        block["max"] = float(maximum)
        block["n"] = int(total)
        out[g] = block
    return out


def block_without_count(block: dict | None) -> dict | None:
    """A :func:`percentile_blocks` block as ``stats`` shows it: without its count ``n``."""
    return None if block is None else {k: v for k, v in block.items() if k != "n"}


def percentile_table(con: duckdb.DuckDBPyConnection, trace_id: str,
                     fields: tuple[str, ...] = LENGTH_FIELDS + LATENCY_FIELDS) -> dict[str, dict | None]:
    """Percentile blocks (``mean, p50, p90, p95, p99, p999, max``) of each field over non-failed requests
    (:func:`percentile_blocks`).

    Returns
    -------
    dict
        Field -> block, or None where the trace has no values for the field.
    """
    cur = con.cursor()
    out = {}
    for fld in fields:
        block = percentile_blocks(cur, store.requests_view(trace_id), _expr(fld), "NOT failed").get(None)
        out[fld] = block_without_count(block)
    return out


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
        # the gaps do not depend on how equal arrivals are ordered: sorting by arrival alone is half the work
        f"SELECT avg(g), stddev_pop(g) FROM (SELECT arrival - lag(arrival) OVER (ORDER BY arrival) AS g "
        f"FROM {view} WHERE arrival IS NOT NULL AND NOT failed) WHERE g IS NOT NULL").fetchall()[0]
    mean_gap, sd_gap = gaps
    cv = float(sd_gap / mean_gap) if mean_gap else None
    block = arrival_block(n, span, cv, resolution_s, lambda width, bins: cur.execute(
        f"SELECT sum(c), sum(c * c) FROM (SELECT count(*) AS c FROM {view} WHERE arrival IS NOT NULL AND NOT failed "
        f"AND floor((arrival - $t0) / $w) < $bins GROUP BY floor((arrival - $t0) / $w))",
        {"t0": first, "w": width, "bins": bins}).fetchone())
    # the load the clients offered, failed requests included (a rate limit's 429s were demand too): the rate the
    # replay serves leaves them out
    n_all, span_all = cur.execute(f"SELECT count(arrival), max(arrival) - min(arrival) FROM {view}").fetchall()[0]
    block["offered_rate_rps"] = request_rate_rps(n_all, float(span_all))
    return block


def arrival_block(n: int, span_s: float, cv: float | None, resolution_s: float | None, moments) -> dict:
    """The ``arrivals`` object of ``stats``: span, rate, inter-arrival CV and the dispersion of counts per bin of
    each width over the whole bins the span fills (:func:`planner.workload.fitting.arrivals.whole_bins`; None
    below two), from ``moments(width, bins)``: the requests and the sum of squared counts in the first ``bins``
    bins from the first arrival."""
    dispersion = {}
    for label, width in DISPERSION_BINS_S.items():
        nbins = whole_bins(span_s, width)
        if nbins < 2:
            dispersion[label] = None
            continue
        total, sum_sq = moments(width, nbins)
        # counts per bin, empty bins included: mean = total / nbins, variance from the sum of squares
        mean = float(total or 0) / nbins
        dispersion[label] = (float(sum_sq) / nbins - mean * mean) / mean if mean else None
    return {
        "span_s": span_s,
        "rate_rps": request_rate_rps(n, span_s),
        "interarrival_cv": cv,
        "timestamp_resolution_s": resolution_s,
        "dispersion": dispersion,
    }


def trace_stats(con: duckdb.DuckDBPyConnection, trace_ref: str) -> dict:
    """The ``stats`` CLI object: counts, percentile blocks and arrival statistics of one trace."""
    info = store.get_trace(con, trace_ref)
    if info.layout == "summary":
        from planner.workload.summary_stats import summary_stats

        return summary_stats(con, info)
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
