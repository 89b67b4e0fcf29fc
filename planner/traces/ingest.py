"""Ingest a request log into the trace store: one transaction, nothing lost, nothing silently guessed.

Each source row either becomes a request (failed requests included, flagged) or a reject with its row number, raw
text and reason. Rows are parsed by DuckDB in one ``CREATE TABLE AS`` pass over its own reader.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.content_hash import ContentHash
from planner.traces.hash_ids import hash_ids_sql
from planner.traces.layouts import LATENCY_FIELDS, LATENCY_UNITS, Mapping, detect_mapping, latency_unit, normalize
from planner.traces.sources import Dialect, Source, open_source, read_error, sql_str
from planner.traces.timestamps import TimeKind, arrival_sql, infer_time_kind, seconds_sql

ProgressFn = Callable[[float, str], None]
_SAMPLE_ROWS = 20_000
_OPTIONAL_FIELDS = {"model": "VARCHAR", "session_id": "VARCHAR", "ttft_ms": "DOUBLE", "tpot_ms": "DOUBLE",
                    "e2e_ms": "DOUBLE", "status": "VARCHAR", "service": "VARCHAR", "hash_ids": "BIGINT[]"}
_TEXT_FIELDS = tuple(f for f, sql_type in _OPTIONAL_FIELDS.items() if sql_type == "VARCHAR")
_FAILURE_WORDS = "err|fail|timeout|timed.out|abort|cancel|reject|exception"
_MAX_WHOLE_TOKENS = 2.0 ** 53


@dataclass(frozen=True)
class IngestResult:
    """What an ingest stored (or, for a duplicate, what the earlier ingest stored)."""

    trace_id: str
    name: str
    rows: int
    rejected: int
    failed: int
    format: str
    mapping: dict[str, str]
    units: dict[str, str]
    has_timestamps: bool
    duplicate_of: str | None
    layout: str
    time_kind: str | None
    timestamp_resolution_s: float | None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _result_from_trace(info: store.TraceInfo, duplicate_of: str | None) -> IngestResult:
    return IngestResult(info.trace_id, info.name, info.rows, info.rejected, info.failed, info.format,
                        info.mapping, info.units, info.has_timestamps, duplicate_of, info.layout, info.time_kind,
                        info.timestamp_resolution_s, info.notes)


def _sample(cur, source: Source, expr: str) -> list[str]:
    # execute, not sql(): a relation binds its query (sniffing the file again) and then binds it once more to run
    rows = cur.execute(f"SELECT CAST({expr} AS VARCHAR) AS v FROM {source.sample_sql} "
                       f"WHERE v IS NOT NULL AND trim(v) <> '' LIMIT {_SAMPLE_ROWS}").fetchall()
    return [r[0] for r in rows]


def _median(values: list[str]) -> float | None:
    nums = sorted(float(v) for v in values if _is_float(v))
    return nums[len(nums) // 2] if nums else None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Plan:
    """The SQL that turns source rows into canonical rows plus, for a bad row, its reason and raw text."""

    select_sql: str
    units: dict[str, str]
    time_kind: TimeKind | None
    stored: frozenset[str]  # optional canonical fields the data table holds
    failed_sql: str         # the failed flag over the data table's columns


def _label(fld: str, column: str) -> str:
    return sql_str(f"{fld} (column {column!r})")


def plan_parse(cur, source: Source, mapping: Mapping) -> _Plan:
    """Build the parsing SQL for a source and mapping, resolving time and latency units from a sample.

    The hot path only casts and tests each value; reason strings are built for bad rows alone.
    """
    cols = source.columns
    text = {fld: f"CAST({cols[col]} AS VARCHAR)" for fld, col in mapping.columns.items()}
    units = dict(mapping.units)
    time_kind = None
    input_ok = "false"
    parsed: list[str] = []
    bad: list[str] = []
    reasons: list[str] = []

    def blank(v: str) -> str:
        return f"({v} IS NULL OR trim({v}) = '')"

    for fld in ("input_tokens", "output_tokens"):
        v, x, lab = text[fld], f"__{fld}", _label(fld, mapping.columns[fld])
        parsed.append(f"TRY_CAST({v} AS DOUBLE) AS {x}")
        # NaN compares above everything in DuckDB, so the upper bound also rejects NaN and inf
        ok = f"coalesce({x} >= 0 AND {x} = floor({x}) AND {x} < {_MAX_WHOLE_TOKENS!r}, false)"
        if fld == "input_tokens":
            input_ok = ok
        bad.append(f"NOT {ok}")
        reasons.append(
            f"CASE WHEN {blank(v)} THEN {lab} || ': missing' "
            f"WHEN {x} IS NULL OR NOT isfinite({x}) THEN {lab} || ': ' || {v} || ' is not a number' "
            f"WHEN {x} < 0 THEN {lab} || ': ' || {v} || ' is negative' "
            f"WHEN {x} <> floor({x}) OR {x} >= {_MAX_WHOLE_TOKENS!r} "
            f"THEN {lab} || ': ' || {v} || ' is not a whole number of tokens' END")
    if "arrival" in mapping.columns:
        time_kind = infer_time_kind(_sample(cur, source, cols[mapping.columns["arrival"]]), units["arrival"])
        units["arrival"] = time_kind.kind
        v, lab = text["arrival"], _label("arrival", mapping.columns["arrival"])
        parsed.append(f"{arrival_sql(v, time_kind)} AS __arrival")
        bad.append("NOT coalesce(isfinite(__arrival), false)")
        reasons.append(f"CASE WHEN {blank(v)} THEN {lab} || ': missing' "
                       f"WHEN NOT coalesce(isfinite(__arrival), false) "
                       f"THEN {lab} || ': cannot read ' || {v} || ' as {time_kind.kind}' END")
    for fld in LATENCY_FIELDS:
        if fld not in mapping.columns:
            continue
        unit = latency_unit(fld, units[fld], _median(_sample(cur, source, cols[mapping.columns[fld]]))
                            if units[fld] == "auto" else None)
        units[fld] = unit
        v, x, lab = text[fld], f"__{fld}", _label(fld, mapping.columns[fld])
        parsed.append(f"TRY_CAST({v} AS DOUBLE) * {LATENCY_UNITS[unit]!r} AS {x}")
        # a missing latency is fine (NULL); an unreadable or negative one is not
        bad.append(f"(NOT coalesce({x} >= 0 AND isfinite({x}), false) AND NOT {blank(v)})")
        reasons.append(f"CASE WHEN {blank(v)} THEN NULL "
                       f"WHEN {x} IS NULL OR NOT isfinite({x}) THEN {lab} || ': ' || {v} || ' is not a number' "
                       f"WHEN {x} < 0 THEN {lab} || ': ' || {v} || ' is negative' END")
    for fld in _TEXT_FIELDS:
        if fld in mapping.columns:
            parsed.append(f"nullif({text[fld]}, '') AS __{fld}")
    if "hash_ids" in mapping.columns:   # nothing parsed, tested or stored for a trace without them
        label = _label("hash_ids", mapping.columns["hash_ids"])
        for part, sql in zip((parsed, bad, reasons), hash_ids_sql(cur, source, mapping, input_ok, label), strict=True):
            part.append(sql)

    status_failed = "false"
    if "status" in mapping.columns:
        if normalize(mapping.columns["status"]) in ("error", "errors"):
            status_failed = "__status IS NOT NULL"
        else:
            status_failed = (f"coalesce(regexp_matches(lower(__status), '{_FAILURE_WORDS}') "
                             f"OR TRY_CAST(__status AS DOUBLE) >= 400, false)")

    bad_sql = " OR ".join(bad)
    # Every stored column costs about a tenth of a bare load's time, all-NULL or not, so the data table holds only
    # what the view needs: the fields the source has (the view adds the rest as NULL), a failed flag only where a
    # status takes a test to read (zero output tokens is tested in the view), and one reject column.
    optional = [f"__{fld} AS {fld}" for fld in _OPTIONAL_FIELDS if fld in mapping.columns]
    stored_failed = status_failed != "false"
    final = [
        *(["__arrival AS arrival_abs"] if time_kind else []),
        # rejected rows keep whatever casts (the view hides them); TRY_CAST keeps NaN/inf from failing the load
        "TRY_CAST(__input_tokens AS BIGINT) AS input_tokens",
        "TRY_CAST(__output_tokens AS BIGINT) AS output_tokens",
        *optional,
        *([f"(__output_tokens = 0 OR {status_failed}) AS failed"] if stored_failed else []),
        # [reason, raw text] of a bad row, NULL for a good one: a list stores nothing for NULL rows, where a STRUCT
        # or two text columns store a NULL per row (and cost as much as any other column)
        f"CASE WHEN {bad_sql} THEN [concat_ws('; ', {', '.join(reasons)}), {source.raw_row_sql()}] END AS reject",
    ]
    # two flat levels: casts, then checks (a third level for a shared "bad" flag costs a third more time)
    select_sql = f"SELECT {', '.join(final)} FROM (SELECT *, {', '.join(parsed)} FROM {source.reader_sql})"
    # a stored row is a good one: its output_tokens is the parsed count itself
    failed_sql = "failed" if stored_failed else "output_tokens = 0"
    return _Plan(select_sql, units, time_kind, frozenset(f for f in _OPTIONAL_FIELDS if f in mapping.columns),
                 failed_sql)


class _ProgressPoller:
    """Report DuckDB's query progress for one long statement, from a background thread."""

    def __init__(self, con, on_progress: ProgressFn | None, start: float, end: float, message: str):
        self.con, self.on_progress, self.start, self.end, self.message = con, on_progress, start, end, message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                pct = self.con.query_progress()
            except Exception:  # progress is best effort: the query may have just finished
                return
            if pct is not None and pct >= 0:
                self.on_progress(self.start + (self.end - self.start) * min(pct, 100.0) / 100.0, self.message)

    def __enter__(self):
        if self.on_progress:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _structural_rejects(cur, source: Source) -> list[tuple[int, str, str]]:
    """Lines DuckDB's CSV reader could not split into the header's columns: ``(row, raw, reason)``."""
    if not source.rejects_table:
        return []
    header = 1 if source.dialect and source.dialect.header else 0
    rows = cur.execute(f"SELECT line, csv_line, error_type, error_message FROM {source.rejects_table} "
                       "ORDER BY line").fetchall()
    return [(int(line) - header, raw, f"{etype.lower()}: {msg}") for line, raw, etype, msg in rows]


def _row_sql(structural: list[tuple[int, str, str]], first_rowid: int = 0) -> str:
    """Source row number of a stored row: its position, shifted past rows the CSV reader dropped.

    ``first_rowid`` is the rowid of the table's first row: 0 once committed, a large offset inside the
    transaction that created the table (DuckDB numbers transaction-local rows from ``2**55``).
    """
    position = f"(rowid - {first_rowid} + 1)"
    if not structural:
        return position
    # good rows preceding each dropped row; a stored row at position p sits after every dropped row with fewer
    before = [row - 1 - i for i, (row, _, _) in enumerate(structural)]
    return f"{position} + len(list_filter({before!r}, lambda g: g < {position}))"


def ingest_file(con: duckdb.DuckDBPyConnection, path: str | Path, *, name: str | None = None,
                fmt: str = "auto", overrides: dict[str, str] | None = None,
                unit_overrides: dict[str, str] | None = None, dialect: Dialect | None = None,
                source_file: str | None = None, on_progress: ProgressFn | None = None,
                owner: str | None = None) -> IngestResult:
    """Ingest one request log into the store, as a single transaction.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The store (see :func:`planner.traces.store.open_store`).
    path : str or Path
        The file; DuckDB streams it, Python reads only its first 64 KiB (and hashes it in chunks).
    name : str, optional
        Trace name; defaults to the file name without extensions, made unique.
    fmt : str
        ``auto`` or a format from :data:`planner.traces.sources.FORMATS`.
    overrides, unit_overrides : dict, optional
        ``field -> column`` and ``field -> unit`` replacing what was detected.
    dialect : Dialect, optional
        CSV dialect replacing the sniffed one.
    source_file : str, optional
        File name to record (an upload's original name rather than its temporary path).
    on_progress : callable, optional
        Called with ``(fraction, message)`` as the ingest proceeds.
    owner : str, optional
        The signed-in user whose workspace lists the trace (also when the bytes were stored before).

    Returns
    -------
    IngestResult
        For identical bytes ingested before: the earlier trace, with ``duplicate_of`` set and nothing stored.

    Raises
    ------
    PlannerError
        For unreadable, empty, binary or malformed files and unusable mappings; the store is left unchanged.
    """
    path = Path(path)
    report = on_progress or (lambda f, m: None)
    if not path.is_file():
        open_source(con, path)  # raises the precise "no such file"/"is a directory" error
    report(0.0, "hashing")
    content = ContentHash(path)
    if not content.background:
        existing = store.find_by_hash(con, content.value())
        if existing is not None:
            store.link_owner(con.cursor(), existing.trace_id, owner, existing=True)
            report(1.0, "already stored")
            return _result_from_trace(existing, existing.trace_id)

    cur = store.progress_cursor(con)
    report(0.05, "detecting format")
    staging = f"ingest_{uuid.uuid4().hex[:12]}"
    source = open_source(cur, path, fmt, dialect, rejects_name=staging)
    mapping = detect_mapping(list(source.columns), overrides, unit_overrides)
    plan = plan_parse(cur, source, mapping)
    notes = list(source.notes)
    with store.WRITE_LOCK:      # one writer at a time: names stay unique, duplicates are seen
        cur.execute("BEGIN")
        try:
            with _ProgressPoller(cur, on_progress, 0.1, 0.9, "parsing rows"):
                cur.execute(f"CREATE TABLE {store.quote_ident(staging)} AS {plan.select_sql}")
            sha = content.value()
            existing = store.find_by_hash(cur, sha)
            if existing is not None:  # a large duplicate, found once its background hash was done
                cur.execute("ROLLBACK")
                store.link_owner(cur, existing.trace_id, owner, existing=True)
                report(1.0, "already stored")
                return _result_from_trace(existing, existing.trace_id)
            trace_id = sha[:16]
            data = store.requests_data_table(trace_id)
            cur.execute(f"ALTER TABLE {store.quote_ident(staging)} RENAME TO {data}")
            report(0.9, "collecting rejects")
            structural = _structural_rejects(cur, source)
            time_kind = plan.time_kind
            has_time = time_kind is not None
            first_arrival = seconds_sql("min(arrival_abs) FILTER (reject IS NULL)", time_kind) if has_time else "NULL"
            rows, bad, failed, t0, first_rowid = cur.execute(
                f"SELECT count(*) FILTER (reject IS NULL), count(*) FILTER (reject IS NOT NULL), "
                f"count(*) FILTER (reject IS NULL AND {plan.failed_sql}), {first_arrival}, coalesce(min(rowid), 0) "
                f"FROM {data}").fetchall()[0]
            if structural:
                cur.executemany("INSERT INTO rejects VALUES (?, ?, ?, ?)",
                                [(trace_id, row, raw, reason) for row, raw, reason in structural])
            if bad:
                cur.execute(f"INSERT INTO rejects SELECT $t, {_row_sql(structural, first_rowid)}, reject[2], "
                            f"reject[1] FROM {data} WHERE reject IS NOT NULL", {"t": trace_id})
            rejected = bad + len(structural)
            if rows == 0:
                first = cur.execute("SELECT reason FROM rejects WHERE trace_id = $t ORDER BY row LIMIT 3",
                                    {"t": trace_id}).fetchall()
                detail = "; ".join(r[0] for r in first) or "the file has a header but no data rows"
                raise PlannerError(f"{path.name}: no usable requests ({rejected} rows rejected: {detail}); expected "
                                   "rows with whole, non-negative input and output token counts")
            arrival = f"{seconds_sql('arrival_abs', time_kind)} - {float(t0)!r}" if has_time else "CAST(NULL AS DOUBLE)"
            optional = ", ".join(fld if fld in plan.stored else f"CAST(NULL AS {sql_type}) AS {fld}"
                                 for fld, sql_type in _OPTIONAL_FIELDS.items())
            cur.execute(
                f"CREATE VIEW {store.requests_view(trace_id)} AS SELECT {_row_sql(structural)} AS \"row\", "
                f"{arrival} AS arrival, input_tokens, output_tokens, {optional}, {plan.failed_sql} AS failed "
                f"FROM {data} WHERE reject IS NULL")
            if rejected:
                notes.append(f"{rejected} rows rejected; see the rejects (row number, raw text, reason)")
            trace_name = store.unique_name(cur, name or _stem(source_file or path.name))
            cur.execute(
                "INSERT INTO traces VALUES ($id, $name, $src, $sha, $fmt, $comp, $layout, $mapping, $units, $dialect, "
                "$rows, $rejected, $failed, $has_time, $kind, $res, $start, $notes, now()::TIMESTAMP)",
                {"id": trace_id, "name": trace_name, "src": source_file or path.name, "sha": sha,
                 "fmt": source.format, "comp": source.compression, "layout": mapping.layout,
                 "mapping": json.dumps(mapping.columns), "units": json.dumps(plan.units),
                 "dialect": json.dumps(source.dialect.as_dict()) if source.dialect else None,
                 "rows": rows, "rejected": rejected, "failed": failed, "has_time": has_time,
                 "kind": time_kind.kind if has_time else None,
                 "res": time_kind.resolution_s if has_time else None,
                 "start": float(t0) if has_time and time_kind.is_wall_clock else None, "notes": json.dumps(notes)})
            store.link_owner(cur, trace_id, owner)
            cur.execute("COMMIT")
        except duckdb.Error as exc:
            _rollback(cur)
            raise read_error(path, source.format, exc) from None
        except BaseException:           # PlannerError, and Streamlit's rerun/stop signals raised from progress
            _rollback(cur)
            raise
        finally:
            for table in (source.rejects_table, f"{staging}_scans"):
                if table:
                    try:
                        cur.execute(f"DROP TABLE IF EXISTS {store.quote_ident(table)}")
                    except duckdb.Error:
                        pass        # temporary tables: they go with the connection anyway
        report(1.0, "stored")
        return _result_from_trace(store.get_trace(con, trace_id), None)


def _rollback(cur) -> None:
    try:
        cur.execute("ROLLBACK")
    except duckdb.TransactionException:     # already rolled back (the duplicate branch)
        pass


def _stem(filename: str) -> str:
    stem = Path(filename).name
    for _ in range(3):
        base, dot, ext = stem.rpartition(".")
        if dot and ext.lower() in ("csv", "tsv", "json", "jsonl", "ndjson", "parquet", "gz", "zst", "zstd", "txt"):
            stem = base
    return stem or "trace"
