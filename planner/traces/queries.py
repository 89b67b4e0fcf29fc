"""The queries every layer reads a stored trace through: length counts, request lengths, arrival times."""

from __future__ import annotations

import uuid

import duckdb
import numpy as np

from planner.errors import PlannerError
from planner.traces import store
from planner.workload.fitting.arrivals import (
    GapSummary,
    PoissonTest,
    poisson_from_counts,
    poisson_width_s,
    tie_threshold_s,
    whole_bins,
)
from planner.workload.fitting.lengths import MAX_DISTINCT, QUANTILES, counts_of
from planner.workload.stats import LENGTH_FIELDS, percentile_blocks


# the requests a replay takes (planner.workload.replay): completed ones that produced output
REPLAYED_SQL = "NOT failed AND output_tokens > 0"


def model_counts(con: duckdb.DuckDBPyConnection, trace_id: str, replayed: bool = False) -> dict[str, int]:
    """Rows per model the trace's ``model`` column names (only those a replay takes where ``replayed``; all,
    failed ones included, else), most first, then by name; empty where it has no such column or names none."""
    where = f" AND {REPLAYED_SQL}" if replayed else ""
    rel = con.cursor().sql(f"SELECT model, count(*) AS n FROM {store.requests_view(trace_id)} WHERE model IS NOT NULL"
                           f"{where} GROUP BY model ORDER BY n DESC, model")
    return dict(rel.fetchall())


def length_expr(fld: str) -> str:
    if fld not in LENGTH_FIELDS:
        raise PlannerError(f"unknown length field {fld!r}: expected one of {', '.join(LENGTH_FIELDS)}")
    return "(input_tokens + output_tokens)" if fld == "total_tokens" else store.quote_ident(fld)


def length_counts(con: duckdb.DuckDBPyConnection, trace_id: str, fld: str) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of a length field over non-failed requests, ascending, with their counts (a trace stored
    as its summary has them as they are)."""
    from planner.traces.summary import is_summary, summary_length_counts_sql

    if is_summary(con, trace_id):
        sql = summary_length_counts_sql(trace_id, fld)
    else:
        expr = length_expr(fld)
        sql = (f"SELECT {expr} AS v, count(*) FROM {store.requests_view(trace_id)} "
               f"WHERE NOT failed AND {expr} IS NOT NULL GROUP BY v ORDER BY v")
    rows = con.cursor().execute(sql).fetchall()
    if not rows:
        return np.empty(0), np.empty(0)
    x, w = zip(*rows, strict=True)
    return np.asarray(x, dtype=float), np.asarray(w, dtype=float)


def _requests_of(con: duckdb.DuckDBPyConnection, trace_id: str, what: str) -> str:
    """The trace's requests view; a trace stored as its summary has none, and says so."""
    from planner.traces.summary import is_summary

    if is_summary(con, trace_id):
        raise PlannerError(f"trace {trace_id} is a summary: {what} needs each request, which a summary does not keep")
    return store.requests_view(trace_id)


def request_lengths(con: duckdb.DuckDBPyConnection, trace_id: str) -> tuple[np.ndarray, np.ndarray]:
    """Input and output tokens of every non-failed request, in arrival order."""
    frame = con.cursor().sql(f"SELECT input_tokens, output_tokens FROM {_requests_of(con, trace_id, 'lengths')} "
                             f"WHERE NOT failed ORDER BY arrival NULLS LAST, \"row\"").pl()
    return frame["input_tokens"].to_numpy().astype(float), frame["output_tokens"].to_numpy().astype(float)


def arrival_times(con: duckdb.DuckDBPyConnection, trace_id: str) -> np.ndarray:
    """Arrival times (s from the trace's first request) of the non-failed requests (those the planner replays),
    ascending."""
    rel = con.cursor().sql(f"SELECT arrival FROM {_requests_of(con, trace_id, 'arrival times')} "
                           f"WHERE arrival IS NOT NULL AND NOT failed ORDER BY arrival")
    return rel.pl().to_series().to_numpy().astype(float)



def gap_summary_of_trace(con: duckdb.DuckDBPyConnection, trace_id: str,
                         resolution_s: float | None) -> GapSummary | None:
    """:func:`planner.workload.fitting.arrivals.gap_summary` of a stored trace's replayed arrivals, computed by
    DuckDB out of core: the arrivals are sorted once and their gaps counted per multiple of the clock's resolution.
    A gap between two timestamps read at that resolution is such a multiple (floating-point differences blur it by
    far less), so the counts are few however long the trace; every statistic and the fit read them, and only they
    reach Python. A trace with more distinct gaps than :data:`MAX_DISTINCT` (no known resolution) is fitted on a
    seeded sample of that many gaps, as the array's summary is."""
    cur = con.cursor()
    view = store.requests_view(trace_id)
    counts = store.quote_ident(f"gap_counts_{uuid.uuid4().hex[:12]}")
    tie = tie_threshold_s(resolution_s)
    span = cur.execute(f"SELECT max(arrival) - min(arrival) FROM {view} WHERE NOT failed").fetchone()[0]
    gaps = (f"SELECT g FROM (SELECT arrival - lag(arrival) OVER (ORDER BY arrival) AS g FROM {view} "
            "WHERE arrival IS NOT NULL AND NOT failed) WHERE g IS NOT NULL")
    grid = f"round(g / {resolution_s!r}) * {resolution_s!r}" if resolution_s else "g"
    cur.execute(f"CREATE TEMP TABLE {counts} AS SELECT {grid} AS g, count(*) AS n FROM ({gaps}) GROUP BY ALL")
    try:
        n, distinct, mean, ties = cur.execute(
            f"SELECT sum(n), count(*), sum(g * n) / sum(n), sum(CASE WHEN g <= $tie THEN n ELSE 0 END) / sum(n) "
            f"FROM {counts}", {"tie": tie}).fetchone()
        if not n or n < 2:
            return None
        # the variance about the mean, in a second pass over the counts (no cancellation of two large sums)
        var = cur.execute(f"SELECT sum(n * (g - $m) * (g - $m)) / sum(n) FROM {counts}", {"m": mean}).fetchone()[0]
        everything = percentile_blocks(cur, counts, "g", quantiles=QUANTILES, weight="n")[None]
        positive = percentile_blocks(cur, counts, "g", f"g > {tie!r}", quantiles={"p5": 0.05, "p50": 0.5},
                                     weight="n").get(None)
        if distinct <= MAX_DISTINCT:
            frame = cur.sql(f"SELECT g, n FROM {counts} ORDER BY g").pl()
            x, w = frame["g"].to_numpy().astype(float), frame["n"].to_numpy().astype(float)
        else:
            x, w = counts_of(cur.sql(f"{gaps} USING SAMPLE reservoir({MAX_DISTINCT} ROWS) REPEATABLE (0)")
                             .pl().to_series().to_numpy())
    finally:
        cur.execute(f"DROP TABLE IF EXISTS {counts}")
    return GapSummary(int(n) + 1, float(span), float(mean), float(var) ** 0.5, float(ties),
                      positive["p5"] if positive else None, positive["p50"] if positive else None,
                      {k: everything[k] for k in QUANTILES}, x, w * (n / w.sum()))


def poisson_test_of_trace(con: duckdb.DuckDBPyConnection, trace_id: str, arrivals: int, span_s: float,
                          min_bin_s: float = 0.0) -> PoissonTest | None:
    """:func:`planner.workload.fitting.arrivals.poisson_test` of a stored trace's replayed arrivals, from counts
    per bin that DuckDB aggregates (empty bins count: they are the bins no count row holds)."""
    width = poisson_width_s(arrivals, span_s, min_bin_s)
    if width is None:
        return None
    view = store.requests_view(trace_id)
    cur = con.cursor()
    first = cur.execute(f"SELECT min(arrival) FROM {view} WHERE NOT failed").fetchone()[0]
    bins = whole_bins(span_s, width)
    total, sum_sq = cur.execute(
        f"SELECT sum(c), sum(c * c) FROM (SELECT count(*) AS c FROM {view} WHERE arrival IS NOT NULL AND NOT failed "
        f"AND floor((arrival - $t0) / $w) < $bins GROUP BY floor((arrival - $t0) / $w))",
        {"t0": first, "w": width, "bins": bins}).fetchone()
    return poisson_from_counts(width, bins, float(total or 0), float(sum_sq or 0))
