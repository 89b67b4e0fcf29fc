"""The queries every layer reads a stored trace through: length counts, request lengths, arrival times."""

from __future__ import annotations

import duckdb
import numpy as np

from planner.errors import PlannerError
from planner.traces import store
from planner.workload.stats import LENGTH_FIELDS


def length_expr(fld: str) -> str:
    if fld not in LENGTH_FIELDS:
        raise PlannerError(f"unknown length field {fld!r}: expected one of {', '.join(LENGTH_FIELDS)}")
    return "(input_tokens + output_tokens)" if fld == "total_tokens" else store.quote_ident(fld)


def length_counts(con: duckdb.DuckDBPyConnection, trace_id: str, fld: str) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of a length field over non-failed requests, ascending, with their counts."""
    expr = length_expr(fld)
    rows = con.cursor().execute(
        f"SELECT {expr} AS v, count(*) FROM {store.requests_view(trace_id)} "
        f"WHERE NOT failed AND {expr} IS NOT NULL GROUP BY v ORDER BY v").fetchall()
    if not rows:
        return np.empty(0), np.empty(0)
    x, w = zip(*rows, strict=True)
    return np.asarray(x, dtype=float), np.asarray(w, dtype=float)


def request_lengths(con: duckdb.DuckDBPyConnection, trace_id: str) -> tuple[np.ndarray, np.ndarray]:
    """Input and output tokens of every non-failed request, in arrival order."""
    frame = con.cursor().sql(f"SELECT input_tokens, output_tokens FROM {store.requests_view(trace_id)} "
                             f"WHERE NOT failed ORDER BY arrival NULLS LAST, \"row\"").pl()
    return frame["input_tokens"].to_numpy().astype(float), frame["output_tokens"].to_numpy().astype(float)


def arrival_times(con: duckdb.DuckDBPyConnection, trace_id: str) -> np.ndarray:
    """Arrival times (s from the trace's first request) of the non-failed requests (those the planner replays),
    ascending."""
    rel = con.cursor().sql(f"SELECT arrival FROM {store.requests_view(trace_id)} "
                           f"WHERE arrival IS NOT NULL AND NOT failed ORDER BY arrival")
    return rel.pl().to_series().to_numpy().astype(float)

