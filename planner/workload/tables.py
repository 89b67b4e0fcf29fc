"""Workload characterization of a stored trace: grouped percentiles, fits, joint view and latency by length bucket.

Everything exact is computed in DuckDB over the full trace; fits receive distinct values with their counts
(``GROUP BY``), so a 10M-request trace costs what its few thousand distinct lengths cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.queries import length_expr
from planner.workload.fits import arrival_fit_dict, arrival_overview
from planner.workload.replay import from_trace
from planner.workload.reuse import DEFAULT_BLOCK_SIZE, ReuseAnalysis, workload_reuse
from planner.workload.stats import LENGTH_FIELDS, PERCENTILES, percentile_blocks

DEFAULT_BUCKET_EDGES = (512, 2048)
JOINT_BINS_PER_OCTAVE = 2


# -- grouped percentiles -------------------------------------------------------------------------------------

def default_window_s(span_s: float) -> float:
    """A round window width giving roughly 6 to 24 windows over the trace."""
    for width in (60, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400, 604800):
        if span_s / width <= 24:
            return float(width)
    return float(2592000)


# per-window tables past this many rows say nothing a chart can show (and one per request at worst)
MAX_WINDOWS = 10_000


def check_window(window_s: float, span_s: float | None) -> None:
    """Refuse a window width that is not a positive number or cuts the trace's span into more than
    :data:`MAX_WINDOWS` windows.

    Raises
    ------
    PlannerError
        Naming the width and what was expected.
    """
    if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s > 0):
        raise PlannerError(f"--window {window_s!r}: expected a positive number of seconds")
    if span_s and span_s / window_s > MAX_WINDOWS:
        raise PlannerError(f"--window {window_s:g}: {span_s / window_s:,.0f} windows over the trace's {span_s:,.0f} s; "
                           f"expected at most {MAX_WINDOWS:,} (a width of at least {span_s / MAX_WINDOWS:.3g} s)")


def parse_bucket_edges(text: str) -> tuple[float, ...]:
    """Length bucket edges from ``512,2048``: positive, finite, strictly increasing token counts.

    Raises
    ------
    PlannerError
        Naming the text and what was expected.
    """
    try:
        edges = tuple(float(e) for e in text.split(","))
    except ValueError:
        edges = ()
    if not edges or not all(math.isfinite(e) and e > 0 for e in edges) or list(edges) != sorted(set(edges)):
        raise PlannerError(f"--buckets {text!r}: expected increasing positive token counts such as 512,2048")
    return edges


def grouped_percentiles(con: duckdb.DuckDBPyConnection, trace_id: str, by: str,
                        window_s: float | None = None) -> list[dict]:
    """Percentile blocks of input, output and total tokens per model or per time window (non-failed requests).

    Parameters
    ----------
    by : {"model", "window"}
        Group by the model column, or by windows of ``window_s`` seconds from the first request.
    window_s : float, optional
        Window width; required when ``by`` is ``"window"``.

    Returns
    -------
    list of dict
        One row per group and field: ``group, field, n, mean, p50 … p999, max``; for windows ``group`` is the
        window start in seconds.
    """
    if by == "model":
        key = "model"
    elif by == "window":
        if not window_s or window_s <= 0:
            raise PlannerError("per-window percentiles need a positive window width in seconds")
        key = f"floor(arrival / {float(window_s)!r}) * {float(window_s)!r}"
    else:
        raise PlannerError(f"cannot group by {by!r}: expected 'model' or 'window'")
    cur, view, out = con.cursor(), store.requests_view(trace_id), []
    blocks = {fld: percentile_blocks(cur, view, length_expr(fld), f"NOT failed AND {key} IS NOT NULL", key)
              for fld in LENGTH_FIELDS}
    for group in sorted(set().union(*blocks.values())):
        for fld in LENGTH_FIELDS:
            block = blocks[fld].get(group)
            if block is not None:
                out.append({"group": group, "field": fld, "n": block["n"], "mean": block["mean"],
                            **{k: block[k] for k in (*PERCENTILES, "max")}})
    return out


# -- joint view ----------------------------------------------------------------------------------------------

def spearman(con: duckdb.DuckDBPyConnection, trace_id: str) -> float | None:
    """Exact Spearman rank correlation of input and output tokens (average ranks for ties), non-failed requests."""
    view = store.requests_view(trace_id)
    value = con.cursor().execute(
        f"SELECT corr(ri, ro) FROM (SELECT "
        f"rank() OVER (ORDER BY input_tokens) + (count(*) OVER (PARTITION BY input_tokens) - 1) / 2.0 AS ri, "
        f"rank() OVER (ORDER BY output_tokens) + (count(*) OVER (PARTITION BY output_tokens) - 1) / 2.0 AS ro "
        f"FROM {view} WHERE NOT failed)").fetchall()[0][0]
    return None if value is None or not math.isfinite(value) else float(value)


def joint_histogram(con: duckdb.DuckDBPyConnection, trace_id: str,
                    bins_per_octave: int = JOINT_BINS_PER_OCTAVE) -> list[dict]:
    """2-D histogram of (input, output) tokens on log2 bins: ``input_lo, input_hi, output_lo, output_hi, count``.

    Lengths below 1 share the first bin ``[0, 1)``.
    """
    k = float(bins_per_octave)
    def bin_of(col: str) -> str:
        return f"CASE WHEN {col} < 1 THEN -1 ELSE floor(log2({col}) * {k!r}) END"
    rows = con.cursor().execute(
        f"SELECT {bin_of('input_tokens')} AS bi, {bin_of('output_tokens')} AS bo, count(*) "
        f"FROM {store.requests_view(trace_id)} WHERE NOT failed GROUP BY bi, bo ORDER BY bi, bo").fetchall()

    def edges(b: float) -> tuple[float, float]:
        return (0.0, 1.0) if b < 0 else (2 ** (b / k), 2 ** ((b + 1) / k))
    out = []
    for bi, bo, count in rows:
        (ilo, ihi), (olo, ohi) = edges(bi), edges(bo)
        out.append({"input_lo": ilo, "input_hi": ihi, "output_lo": olo, "output_hi": ohi, "count": int(count)})
    return out


# -- latency by length bucket --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LatencyBuckets:
    """Latency percentiles per length bucket and the bucket that drives the overall p99."""

    latency_field: str
    by_field: str
    overall_p99: float
    rows: list[dict]            # bucket, lo, hi, n, share, p50, p90, p99, tail_count, tail_share, tail_lift
    driver: str | None


def bucket_labels(edges: tuple[float, ...]) -> list[tuple[str, float, float]]:
    """``[(label, lo, hi)]`` for edges ``(512, 2048)``: 0–512, 512–2048, 2048+ (lo inclusive, hi exclusive)."""
    cuts = sorted({float(e) for e in edges if e > 0})
    bounds = [0.0] + cuts + [math.inf]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        label = f"{lo:g}+" if math.isinf(hi) else f"{lo:g}–{hi:g}"
        out.append((label, lo, hi))
    return out


def latency_buckets(con: duckdb.DuckDBPyConnection, trace_id: str, latency_field: str, by_field: str,
                    edges: tuple[float, ...] = DEFAULT_BUCKET_EDGES) -> LatencyBuckets | None:
    """p50/p90/p99 of a latency per length bucket, and which bucket holds most of the requests above the p99.

    The driver is the bucket with the largest share of the requests slower than the overall p99; ``tail_lift`` is
    that share over the bucket's share of all requests (above 1: the bucket is over-represented in the tail).

    Returns
    -------
    LatencyBuckets or None
        None when the trace has no values for ``latency_field``.
    """
    lat, by = store.quote_ident(latency_field), length_expr(by_field)
    view = store.requests_view(trace_id)
    cur = con.cursor()
    n_all, p99 = cur.execute(f"SELECT count({lat}), quantile_cont({lat}, 0.99) FROM {view} "
                             f"WHERE NOT failed").fetchall()[0]
    if not n_all:
        return None
    labels = bucket_labels(edges)
    case = " ".join(f"WHEN {by} < {hi!r} THEN {i}" for i, (_, _, hi) in enumerate(labels) if math.isfinite(hi))
    stats = {row[0]: row[1:] for row in cur.execute(
        f"SELECT CASE {case} ELSE {len(labels) - 1} END AS b, count(*), quantile_cont({lat}, [0.5, 0.9, 0.99]), "
        f"count(*) FILTER (WHERE {lat} > {float(p99)!r}) FROM {view} "
        f"WHERE NOT failed AND {lat} IS NOT NULL AND {by} IS NOT NULL GROUP BY b").fetchall()}
    n_tail = sum(int(s[2]) for s in stats.values())
    rows = []
    for i, (label, lo, hi) in enumerate(labels):
        n, quantiles, tail = stats.get(i, (0, [None] * 3, 0))
        share = n / n_all
        tail_share = tail / n_tail if n_tail else 0.0
        rows.append({"bucket": label, "lo": lo, "hi": hi, "n": int(n), "share": share,
                     **{k: (float(v) if v is not None else None) for k, v in zip(("p50", "p90", "p99"), quantiles,
                                                                                  strict=True)},
                     "tail_count": int(tail), "tail_share": tail_share,
                     "tail_lift": tail_share / share if share else None})
    driver = max(rows, key=lambda r: r["tail_count"])["bucket"] if n_tail else None
    return LatencyBuckets(latency_field, by_field, float(p99), rows, driver)


def trace_reuse(con: duckdb.DuckDBPyConnection, trace_ref: str, *, shared_prefix: str | None = None,
                block_size: int = DEFAULT_BLOCK_SIZE, progress=None) -> ReuseAnalysis:
    """What a stored trace's prompt reuse is worth (:mod:`planner.workload.reuse`), in its arrival order (row order
    without timestamps), with a declared ``shared_prefix`` where it carries no identity."""
    info = store.get_trace(con, trace_ref)
    work = from_trace(con, info.trace_id, qps=None if info.has_timestamps else 1.0, shared_prefix=shared_prefix)
    return workload_reuse(work, block_size, progress)


def workload_report(con: duckdb.DuckDBPyConnection, trace_ref: str, *, window_s: float | None = None,
                    edges: tuple[float, ...] = DEFAULT_BUCKET_EDGES, shared_prefix: str | None = None,
                    block_size: int = DEFAULT_BLOCK_SIZE, kv_bytes_per_token: int | None = None,
                    with_reuse: bool = True) -> dict:
    """The ``workload`` CLI object: every table the Workload page shows, from the same functions; the prefix
    reuse (:func:`trace_reuse`; in GiB as well given one token's KV bytes) unless ``with_reuse`` is off (the page
    caches it on its own)."""
    info = store.get_trace(con, trace_ref)
    if info.layout == "summary":
        raise PlannerError(f"trace {info.name!r} is a summary: the workload tables (per model, per window, joint, "
                           "latency buckets, prefix reuse) need each request, which a summary does not keep; "
                           "expected a trace of requests (stats and fit read a summary)")
    tid = info.trace_id
    arrivals = arrival_overview(con, info)
    if window_s is None and arrivals is not None:
        window_s = default_window_s(arrivals["span_s"])
    elif window_s is not None:
        check_window(window_s, arrivals["span_s"] if arrivals else None)
    latency = {}
    for lat_field in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for by_field in ("input_tokens", "output_tokens"):
            buckets = latency_buckets(con, tid, lat_field, by_field, edges)
            if buckets is not None:
                latency.setdefault(lat_field, {})[by_field] = {
                    "overall_p99": buckets.overall_p99, "driver": buckets.driver, "buckets": buckets.rows}
    return {
        "trace_id": tid, "name": info.name,
        "per_model": grouped_percentiles(con, tid, "model") if "model" in info.mapping else [],
        "window_s": window_s,
        "per_window": grouped_percentiles(con, tid, "window", window_s) if window_s else [],
        "spearman_input_output": spearman(con, tid),
        "joint_histogram": joint_histogram(con, tid),
        "latency_buckets": latency,
        "arrivals": None if arrivals is None else {
            "span_s": arrivals["span_s"], "fit": arrival_fit_dict(arrivals["fit"]),
            "dispersion": arrivals["dispersion"],
            "peaks": arrivals["peaks"]},
        "prefix_reuse": trace_reuse(con, tid, shared_prefix=shared_prefix,
                                    block_size=block_size).to_dict(kv_bytes_per_token) if with_reuse else None,
    }
