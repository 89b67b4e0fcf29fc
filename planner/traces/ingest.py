"""Ingest a request log into the trace store: one transaction, nothing lost, nothing silently guessed.

Each source row either becomes a request (failed requests included, flagged) or a reject with its row number, raw
text and reason. Rows are parsed by DuckDB in one ``CREATE TABLE AS`` pass over its own reader.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

from planner.errors import PlannerError
from planner.traces import query_progress, store
from planner.traces.content_hash import ContentHash
from planner.traces.files import FileSet, resolve_files
from planner.traces.layouts import check_overrides, detect_mapping
from planner.traces.parsing import OPTIONAL_FIELDS, plan_parse
from planner.traces.query_progress import ProgressFn
from planner.traces.row_numbers import FileRows, number_dropped, row_sql, structural_rejects
from planner.traces.sources import FORMATS, Dialect, open_source, read_error
from planner.traces.timestamps import seconds_sql


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
    files: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


def result_from_trace(info: store.TraceInfo, duplicate_of: str | None) -> IngestResult:
    return IngestResult(info.trace_id, info.name, info.rows, info.rejected, info.failed, info.format,
                        info.mapping, info.units, info.has_timestamps, duplicate_of, info.layout, info.time_kind,
                        info.timestamp_resolution_s, info.notes, info.files)


def already_stored(cur: duckdb.DuckDBPyConnection, sha256: str, owner: str | None,
                   reading: str | None = None) -> IngestResult | None:
    """The trace stored from the same content (``sha256``), read the same way (``reading``,
    :func:`planner.traces.store.read_as`; None: the hash is the whole identity), now in ``owner``'s workspace too,
    as a duplicate's result; None where none is."""
    existing = store.find_by_hash(cur, sha256, reading)
    if existing is None:
        return None
    store.link_owner(cur, existing.trace_id, owner, existing=True)
    return result_from_trace(existing, existing.trace_id)


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
        The file, a directory (every file under it, hidden and ``_``-prefixed names skipped) or a glob, read as one
        trace of one layout, rows numbered through the files in path order (:func:`planner.traces.files.resolve_files`).
        DuckDB streams them with bounded memory; Python reads only each file's first 64 KiB (and hashes them in
        chunks).
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
    store.check_name(name)
    if fmt != "auto" and fmt not in FORMATS:
        raise PlannerError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    check_overrides(overrides, unit_overrides)
    fileset = resolve_files(path)
    path = fileset.paths[0]
    report = on_progress or (lambda f, m: None)
    report(0.0, "hashing")
    content = ContentHash(fileset.paths)
    cur = query_progress.progress_cursor(con)
    report(0.05, "detecting format")
    staging = f"ingest_{uuid.uuid4().hex[:12]}"
    source = open_source(cur, fileset.paths, fmt, dialect, rejects_name=staging)
    mapping = detect_mapping(list(source.columns), overrides, unit_overrides)
    try:
        plan = plan_parse(cur, source, mapping)      # samples values: the first read of every file
    except duckdb.Error as exc:
        raise read_error(path, source.format, exc) from None
    # a trace is its bytes as read: the same file ingested again with other columns, units or dialect (a unit
    # guessed wrong, corrected by --unit) is another trace, not the first one answered again
    read = (mapping.columns, plan.units, source.dialect.as_dict() if source.dialect else None)
    reading = store.read_as(*read)
    # a large file's hash overlaps its load, unless a stored trace has its very size: a duplicate's load, rolled
    # back, would still grow the store file by the blocks it wrote, so then the hash decides first
    if not content.background or store.may_hold_bytes(con, fileset.total_bytes):
        duplicate = already_stored(con.cursor(), content.value(), owner, reading)
        if duplicate is not None:
            report(1.0, "already stored")
            return duplicate
    notes = [*source.notes, *plan.notes]
    if fileset.kind == "glob":      # what a pattern named is worth saying: it may match more, or fewer, than meant
        notes.insert(0, f"the glob {fileset.spec!r} matched {len(fileset.paths):,} "
                        f"file{'s' if len(fileset.paths) > 1 else ''}")
    with store.WRITE_LOCK:      # one writer at a time: names stay unique, duplicates are seen
        cur.execute("BEGIN")
        try:
            with query_progress.QueryProgress(cur, on_progress, 0.1, 0.9, "parsing rows"):
                cur.execute(f"CREATE TABLE {store.quote_ident(staging)} AS {plan.select_sql}")
            sha = content.value()
            if store.find_by_hash(cur, sha, reading) is not None:   # a large duplicate, found once hashed
                cur.execute("ROLLBACK")                              # its load undone before the link is written
                duplicate = already_stored(cur, sha, owner, reading)
                report(1.0, "already stored")
                return duplicate
            trace_id = _trace_id(cur, sha, read, reading, notes, owner)
            data = store.requests_data_table(trace_id)
            cur.execute(f"ALTER TABLE {store.quote_ident(staging)} RENAME TO {data}")
            report(0.9, "collecting rejects")
            structural = structural_rejects(cur, source)
            spans = FileRows.count(cur, data, source, structural, plan.file_column) if plan.many_files else None
            dropped = number_dropped(structural, spans)
            time_kind = plan.time_kind
            has_time = time_kind is not None
            first_arrival = seconds_sql("min(arrival_abs) FILTER (reject IS NULL)", time_kind) if has_time else "NULL"
            rows, bad, failed, t0, first_rowid = cur.execute(
                f"SELECT count(*) FILTER (reject IS NULL), count(*) FILTER (reject IS NOT NULL), "
                f"count(*) FILTER (reject IS NULL AND {plan.failed_sql}), {first_arrival}, coalesce(min(rowid), 0) "
                f"FROM {data}").fetchall()[0]
            if dropped:
                cur.executemany("INSERT INTO rejects VALUES (?, ?, ?, ?)",
                                [(trace_id, row, raw, reason) for row, raw, reason in dropped])
            if bad:
                number = row_sql(dropped, first_rowid)
                reason = f"{spans.prefix_sql(number)} || reject[1]" if spans else "reject[1]"
                cur.execute(f"INSERT INTO rejects SELECT $t, {number}, reject[2], {reason} FROM {data} "
                            "WHERE reject IS NOT NULL", {"t": trace_id})
            rejected = bad + len(dropped)
            if rows == 0:
                first = cur.execute("SELECT reason FROM rejects WHERE trace_id = $t ORDER BY row LIMIT 3",
                                    {"t": trace_id}).fetchall()
                detail = "; ".join(r[0] for r in first) or "the file has a header but no data rows"
                expected = "rows with whole, non-negative input and output token counts"
                if first and all(r[0].startswith("arrival") and r[0].endswith(": missing") for r in first):
                    # an arrival column empty throughout: the counts may be fine, the times are what is missing
                    expected = ("arrival times in the arrival column, or the trace ingested without times "
                                "(--map arrival=)")
                raise PlannerError(f"{fileset.label()}: no usable requests ({rejected} rows rejected: {detail}); "
                                   f"expected {expected}")
            arrival = f"{seconds_sql('arrival_abs', time_kind)} - {float(t0)!r}" if has_time else "CAST(NULL AS DOUBLE)"
            optional = ", ".join(fld if fld in plan.stored else f"CAST(NULL AS {sql_type}) AS {fld}"
                                 for fld, sql_type in OPTIONAL_FIELDS.items())
            cur.execute(
                f"CREATE VIEW {store.requests_view(trace_id)} AS SELECT {row_sql(dropped)} AS \"row\", "
                f"{arrival} AS arrival, input_tokens, output_tokens, {optional}, {plan.failed_sql} AS failed "
                f"FROM {data} WHERE reject IS NULL")
            if rejected:
                notes.append(f"{rejected} rows rejected; see the rejects (row number, raw text, reason)")
            if has_time and not time_kind.is_wall_clock and plan.file_column:
                notes.extend(_overlaid_files(cur, data, spans.names, float(t0)))
            trace_name = store.unique_name(cur, name or _stem(source_file or _set_name(fileset)), notes)
            if spans:
                notes.append(f"read from {len(fileset.paths):,} files ({fileset.kind} {fileset.spec}); rows are "
                             "numbered through them in path order, and a reject names its file and its row there")
                cur.executemany("INSERT INTO trace_files VALUES (?, ?, ?, ?, ?, ?)",
                                [(trace_id, i, str(p), p.stat().st_size, spans.first_row[i], spans.source_rows[i])
                                 for i, p in enumerate(fileset.paths)])
            cur.execute(
                "INSERT INTO traces (trace_id, name, source_file, content_sha256, format, compression, layout, "
                "mapping, units, dialect, rows, rejected, failed, has_timestamps, time_kind, timestamp_resolution_s, "
                "start_epoch_s, notes, created, files, source_bytes) VALUES ($id, $name, $src, $sha, $fmt, $comp, "
                "$layout, $mapping, $units, $dialect, $rows, $rejected, $failed, $has_time, $kind, $res, $start, "
                "$notes, now()::TIMESTAMP, $files, $bytes)",
                {"id": trace_id, "name": trace_name, "files": len(fileset.paths), "bytes": fileset.total_bytes,
                 "src": source_file or (path.name if fileset.kind == "file" else fileset.spec), "sha": sha,
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
        return result_from_trace(store.get_trace(con, trace_id), None)


def _overlaid_files(cur, data: str, names: list[str], first_s: float) -> list[str]:
    """A note where several files' relative times each start at the trace's first (within a second): read as one
    clock their requests overlay, where the files may be stretches of time one after another."""
    starts = cur.execute(f"SELECT file, min(arrival_abs) FROM {data} WHERE reject IS NULL GROUP BY file "
                         "ORDER BY file").fetchall()
    together = [names[f] for f, start in starts if start - first_s <= 1.0]
    if len(together) < 2:
        return []
    return [f"{len(together)} files count their times from the same start ({', '.join(together[:3])}"
            f"{', …' if len(together) > 3 else ''}): read as one clock, their requests overlay; where each is a "
            "later stretch of time, ingest them as traces of their own"]


def _trace_id(cur: duckdb.DuckDBPyConnection, sha256: str, read: tuple[dict, dict, dict | None], reading: str,
              notes: list[str], owner: str | None = None) -> str:
    """The id of a new trace of these bytes, read as ``read`` (columns, units, dialect; ``reading`` is its
    :func:`planner.traces.store.read_as`): their hash's first 16 digits, or, where those bytes are stored read
    another way, the hash of both (and a note naming that trace, where ``owner``'s workspace sees it: another
    workspace's trace names and ids are its own)."""
    other = store.find_by_hash(cur, sha256)
    if other is None:
        return sha256[:16]
    if owner is None or any(t.trace_id == other.trace_id for t in store.list_traces(cur, owner)):
        changed = [what for what, was, now in zip(("columns", "units", "CSV dialect"),
                                                  (other.mapping, other.units, other.dialect), read, strict=True)
                   if was != now]
        notes.append(f"the same bytes are stored as {other.name} ({other.trace_id}), read with other "
                     f"{' and '.join(changed)}: this is another reading of them")
    return hashlib.sha256(f"{sha256}\n{reading}".encode()).hexdigest()[:16]


def _rollback(cur) -> None:
    try:
        cur.execute("ROLLBACK")
    except duckdb.TransactionException:     # already rolled back (the duplicate branch)
        pass


def _set_name(fileset: FileSet) -> str:
    """A trace's default name: the file's, the directory's, or a glob's last folder before its wildcards."""
    if fileset.kind == "file":
        return fileset.paths[0].name
    if fileset.kind == "directory":
        return Path(fileset.spec).resolve().name
    fixed = []
    for part in Path(fileset.spec).parts:
        if set(part) & set("*?["):
            break
        fixed.append(part)
    return Path(*fixed).resolve().name if fixed else "trace"


def _stem(filename: str) -> str:
    stem = Path(filename).name
    for _ in range(3):
        base, dot, ext = stem.rpartition(".")
        if dot and ext.lower() in ("csv", "tsv", "json", "jsonl", "ndjson", "parquet", "gz", "zst", "zstd", "txt"):
            stem = base
    return stem or "trace"
