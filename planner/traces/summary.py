"""Traces stored as their summary: the tables ``summary.sql`` produces (in DuckDB, Spark SQL or Trino, wherever the
log lives) instead of one row per request. What a summary holds exactly, the planner computes exactly from it:
length percentiles and fits, the rate, the dispersion of counts per bin; a replay draws lengths from the fits at
the summary's per-second rates. What needs each request (inter-arrival gaps, exact latency percentiles) is
refused or given from the histograms with its error bound."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from planner.errors import PlannerError, first_line
from planner.traces import store
from planner.traces.content_hash import ContentHash
from planner.traces.files import resolve_files
from planner.traces.sources import open_source

SUMMARY_SQL = Path(__file__).with_name("summary.sql")
SUMMARY_LAYOUT = "summary"
LOG2_BINS_PER_OCTAVE = 8          # latency_histograms' bins: 2^(bin/8) ms, each 9% wide
LATENCY_BUCKET_EDGES = (512, 2048)  # latency_histograms' input-length buckets (the Workload page's default edges)


@dataclass(frozen=True)
class SummaryTable:
    """One table of a summary: its columns (name -> DuckDB type) and the check every row must pass."""

    name: str
    columns: dict[str, str]
    check: str
    expected: str
    required: bool = False


TABLES = (
    SummaryTable("length_counts", {"field": "VARCHAR", "tokens": "BIGINT", "requests": "BIGINT"},
                 "field IN ('input_tokens', 'output_tokens') AND tokens >= 0 AND requests >= 1",
                 "field input_tokens or output_tokens, tokens >= 0, requests >= 1", required=True),
    SummaryTable("arrival_counts", {"arrival_second": "BIGINT", "requests": "BIGINT"},
                 "arrival_second >= 0 AND requests >= 1", "arrival_second >= 0, requests >= 1"),
    SummaryTable("arrival_span", {"first_arrival_s": "DOUBLE", "last_arrival_s": "DOUBLE", "requests": "BIGINT"},
                 "isfinite(first_arrival_s) AND last_arrival_s >= first_arrival_s AND requests >= 1",
                 "finite first_arrival_s <= last_arrival_s, requests >= 1"),
    SummaryTable("latency_histograms", {"metric": "VARCHAR", "input_bucket": "BIGINT", "log2_bin": "BIGINT",
                                        "requests": "BIGINT"},
                 "metric IN ('ttft_ms', 'tpot_ms', 'e2e_ms') AND input_bucket BETWEEN 0 AND 2 AND requests >= 1",
                 "metric ttft_ms, tpot_ms or e2e_ms, input_bucket 0-2, requests >= 1"),
)


def summary_statements() -> dict[str, str]:
    """``summary.sql``'s statements by the table each produces."""
    text = SUMMARY_SQL.read_text()
    parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def summary_table(trace_id: str, table: str) -> str:
    """The quoted name of a stored summary's table."""
    return store.quote_ident(f"summary_{trace_id}_{table}")


def is_summary(con: duckdb.DuckDBPyConnection, trace_id: str) -> bool:
    return store.get_trace(con, trace_id).layout == SUMMARY_LAYOUT


def _table_files(folder: Path, table: str) -> list[Path]:
    """A table's files in the folder: ``table/`` (a Spark or Trino output folder) or ``table.*``."""
    if (folder / table).is_dir():
        return list(resolve_files(folder / table).paths)
    return sorted(p for p in folder.glob(f"{table}.*") if p.is_file())


def ingest_summary(con: duckdb.DuckDBPyConnection, folder: str | Path, *, name: str | None = None,
                   owner: str | None = None):
    """Store the summary tables in ``folder`` as one trace (all or nothing, one transaction).

    Returns
    -------
    planner.traces.ingest.IngestResult
        ``rows`` is the number of requests the summary counts (non-failed ones); for a summary of identical
        bytes stored before, that trace with ``duplicate_of`` set.

    Raises
    ------
    PlannerError
        When the folder lacks ``length_counts``, a table lacks a column, or a row breaks its table's rule (the
        first such row is named); nothing is stored.
    """
    from planner.traces.ingest import already_stored, result_from_trace

    store.check_name(name)
    folder = Path(folder)
    if not folder.is_dir():
        raise PlannerError(f"--summary {folder}: expected a folder holding summary.sql's tables "
                           "(length_counts, and optionally arrival_counts, arrival_span, latency_histograms)")
    found = {t.name: _table_files(folder, t.name) for t in TABLES}
    found = {k: v for k, v in found.items() if v}
    if "length_counts" not in found:
        raise PlannerError(f"{folder} has no length_counts table (length_counts/ or length_counts.parquet|csv); "
                           "expected the output of summary.sql (docs/SUMMARY.md)")
    paths = [p for files in found.values() for p in files]
    sha = ContentHash(paths).value()
    trace_id = sha[:16]
    with store.transaction(con) as cur:
        # under the write lock: the same tables ingested by another session are either stored or not begun
        if (duplicate := already_stored(cur, sha, owner)) is not None:
            return duplicate
        sources = {}
        for table in TABLES:
            if table.name in found:
                sources[table.name] = _load(cur, trace_id, table, found[table.name])
        requests = cur.execute(f"SELECT coalesce(sum(requests), 0) FROM {summary_table(trace_id, 'length_counts')} "
                               "WHERE field = 'input_tokens'").fetchone()[0]
        if not requests:
            raise PlannerError(f"{folder}: length_counts counts no input_tokens; expected the requests' input "
                               "lengths")
        timed = "arrival_counts" in found
        notes = [f"a summary ({', '.join(found)}) of {requests:,} requests, read from {len(paths):,} files: "
                 "lengths and rates are exact, inter-arrival gaps and request-level latencies are not kept"]
        trace_name = store.unique_name(cur, name or folder.resolve().name, notes)
        cur.execute(
            "INSERT INTO traces (trace_id, name, source_file, content_sha256, format, compression, layout, "
            "mapping, units, dialect, rows, rejected, failed, has_timestamps, time_kind, timestamp_resolution_s, "
            "start_epoch_s, notes, created, files) VALUES ($id, $name, $src, $sha, $fmt, 'none', $layout, '{}', "
            "$units, NULL, $rows, 0, 0, $timed, $kind, $res, NULL, $notes, now()::TIMESTAMP, $files)",
            {"id": trace_id, "name": trace_name, "src": str(folder), "sha": sha, "fmt": sources["length_counts"],
             "layout": SUMMARY_LAYOUT, "units": json.dumps({"arrival": "relative_s"} if timed else {}),
             "rows": int(requests),
             "timed": timed, "kind": "relative_s" if timed else None, "res": 1.0 if timed else None,
             "notes": json.dumps(notes), "files": len(paths)})
        store.link_owner(cur, trace_id, owner)
    return result_from_trace(store.get_trace(con, trace_id), None)


def _load(cur, trace_id: str, table: SummaryTable, paths: list[Path]) -> str:
    """Copy one summary table into the store, rows of equal keys added up; returns the files' format."""
    try:
        source = open_source(cur, paths)
    except PlannerError as exc:
        raise PlannerError(f"{table.name}: {exc}") from None
    missing = [c for c in table.columns if c not in source.columns]
    if missing:
        raise PlannerError(f"{table.name} has no column {', '.join(missing)} (columns found: "
                           f"{', '.join(source.columns)}); expected {', '.join(table.columns)} as summary.sql "
                           "writes them")
    casts = ", ".join(f"TRY_CAST({source.columns[c]} AS {t}) AS {c}" for c, t in table.columns.items())
    keys = [c for c in table.columns if c != "requests"]
    try:
        bad = cur.execute(f"SELECT * FROM (SELECT {casts} FROM {source.reader_sql}) WHERE NOT coalesce("
                          f"{' AND '.join(f'{c} IS NOT NULL' for c in table.columns)} AND {table.check}, false) "
                          "LIMIT 1").fetchall()
        if bad:
            raise PlannerError(f"{table.name}: the row {dict(zip(table.columns, bad[0], strict=True))} is not valid; "
                               f"expected {table.expected}")
        # a table split over files (or two runs' outputs side by side) may repeat a key: its counts add up
        cur.execute(f"CREATE TABLE {summary_table(trace_id, table.name)} AS SELECT {', '.join(keys)}, "
                    f"sum(requests) AS requests FROM (SELECT {casts} FROM {source.reader_sql}) GROUP BY ALL "
                    "ORDER BY ALL")
    except duckdb.Error as exc:
        raise PlannerError(f"{table.name}: cannot read it ({first_line(exc)}); expected Parquet or CSV files with "
                           f"the columns {', '.join(table.columns)}") from None
    return source.format


def summary_length_counts_sql(trace_id: str, fld: str) -> str:
    """SQL selecting a summary's distinct lengths of ``fld`` (ascending) and their counts."""
    if fld not in ("input_tokens", "output_tokens"):
        raise PlannerError(f"{fld}: a summary holds input_tokens and output_tokens counts apart (their sum needs "
                           "each request); expected input_tokens or output_tokens")
    return (f"SELECT tokens, requests FROM {summary_table(trace_id, 'length_counts')} WHERE field = '{fld}' "
            "ORDER BY tokens")


def summary_arrival_counts(con: duckdb.DuckDBPyConnection, trace_id: str) -> tuple[np.ndarray, np.ndarray]:
    """A summary's seconds from its first arrival that hold requests, and how many each holds."""
    info = store.get_trace(con, trace_id)
    if not info.has_timestamps:
        raise PlannerError(f"summary {info.name!r} has no arrival_counts: expected arrivals per second")
    rows = con.cursor().execute(f"SELECT arrival_second, requests FROM {summary_table(trace_id, 'arrival_counts')} "
                                "ORDER BY arrival_second").fetchall()
    s, c = zip(*rows, strict=True)
    return np.asarray(s, dtype=np.int64), np.asarray(c, dtype=np.int64)


def summary_span_s(con: duckdb.DuckDBPyConnection, trace_id: str) -> float | None:
    """The exact span (last arrival − first) where the summary has ``arrival_span``, else None."""
    try:
        row = con.cursor().execute(f"SELECT max(last_arrival_s) - min(first_arrival_s) FROM "
                                   f"{summary_table(trace_id, 'arrival_span')}").fetchone()
    except duckdb.CatalogException:
        return None
    return None if row[0] is None else float(row[0])


def drop_summary_tables(cur, trace_id: str) -> None:
    for table in TABLES:
        cur.execute(f"DROP TABLE IF EXISTS {summary_table(trace_id, table.name)}")
