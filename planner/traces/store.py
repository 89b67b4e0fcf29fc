"""The DuckDB trace store: one file holding traces, their requests and their rejected rows.

Requests live in one table per trace, named by the trace id (itself derived from the content hash), written in a
single ``CREATE TABLE AS`` pass so that a large ingest costs little more than DuckDB's own CSV load. A view of the
same name minus the ``_data`` suffix exposes the canonical fields with ``arrival`` relative to the first request.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from planner.errors import PlannerError, first_line
from planner.traces import query_progress
from planner.traces.store_path import check_store_path, store_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    trace_id VARCHAR PRIMARY KEY,
    name VARCHAR NOT NULL UNIQUE,
    source_file VARCHAR NOT NULL,
    content_sha256 VARCHAR NOT NULL,
    format VARCHAR NOT NULL,
    compression VARCHAR NOT NULL,
    layout VARCHAR NOT NULL,
    mapping VARCHAR NOT NULL,          -- JSON: canonical field -> source column
    units VARCHAR NOT NULL,            -- JSON: canonical field -> unit the source used
    dialect VARCHAR,                   -- JSON: CSV dialect used, null for other formats
    rows BIGINT NOT NULL,
    rejected BIGINT NOT NULL,
    failed BIGINT NOT NULL,
    has_timestamps BOOLEAN NOT NULL,
    time_kind VARCHAR,                 -- datetime | epoch_s | epoch_ms | epoch_us | epoch_ns | relative_s | relative_ms
    timestamp_resolution_s DOUBLE,
    start_epoch_s DOUBLE,              -- first request as epoch seconds, when the trace has wall-clock times
    notes VARCHAR NOT NULL,            -- JSON list of things the ingest noticed
    created TIMESTAMP NOT NULL,
    files BIGINT NOT NULL DEFAULT 1    -- files read as this one trace (a directory or a glob: see trace_files)
);
ALTER TABLE traces ADD COLUMN IF NOT EXISTS files BIGINT DEFAULT 1;  -- stores written before multi-file ingest
ALTER TABLE traces ADD COLUMN IF NOT EXISTS source_bytes BIGINT;     -- the files' total size (null: a summary)
CREATE TABLE IF NOT EXISTS trace_files (       -- the files of a trace read from several, in row order
    trace_id VARCHAR NOT NULL,
    idx BIGINT NOT NULL,
    path VARCHAR NOT NULL,
    bytes BIGINT NOT NULL,
    first_row BIGINT NOT NULL,         -- the trace's row number of the file's first row
    source_rows BIGINT NOT NULL,       -- its rows, stored and rejected
    PRIMARY KEY (trace_id, idx)
);
CREATE TABLE IF NOT EXISTS rejects (
    trace_id VARCHAR NOT NULL,
    "row" BIGINT NOT NULL,
    raw VARCHAR,
    reason VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS workspace_traces (  -- signed-in users' workspaces; an unlinked trace is shared
    owner VARCHAR NOT NULL,
    trace_id VARCHAR NOT NULL,
    PRIMARY KEY (owner, trace_id)
);
CREATE TABLE IF NOT EXISTS reports (           -- saved reports, opened by their unguessable id
    report_id VARCHAR PRIMARY KEY,
    created TIMESTAMP NOT NULL,
    trace_id VARCHAR NOT NULL,
    owner VARCHAR,
    title VARCHAR NOT NULL,
    body_json VARCHAR NOT NULL,
    body_html VARCHAR NOT NULL,
    body_md VARCHAR NOT NULL
);
"""

# DuckDB's memory limit for the store's connection (PLANNER_DUCKDB_MEMORY overrides): what bench/ingest_many.py's
# 100M-request trace needs to ingest, summarise and fit within 4 GiB of process memory
DEFAULT_DUCKDB_MEMORY = "2GB"

# Writes are serialized within the process (the app is one process with one connection): concurrent uploads
# from several sessions then never race on a name or a duplicate check, and each lands whole.
WRITE_LOCK = threading.RLock()


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection, progress: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of ``con`` (a :func:`~planner.traces.query_progress.progress_cursor` where ``progress``) in one
    write transaction, under :data:`WRITE_LOCK`: committed when the block ends (a ``return`` inside it included),
    rolled back when it raises (Streamlit's rerun and stop signals too), so the store holds all of the block's
    writes or none."""
    with WRITE_LOCK:
        cur = query_progress.progress_cursor(con) if progress else con.cursor()
        cur.execute("BEGIN")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")


def open_store(path: str | os.PathLike | None = None, create: bool = True) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the DuckDB store and make sure its tables exist.

    Parameters
    ----------
    path : path-like, optional
        The DuckDB file; defaults to :func:`default_db_path`.
    create : bool
        Create the store where none is. False for commands that read a stored trace: a mistyped ``--db`` is then
        one clear error, not an empty store left behind and a "no such trace" about it.

    Returns
    -------
    duckdb.DuckDBPyConnection
        A connection with the session time zone set to UTC, so zone-less timestamps read as UTC.
    """
    db_path = store_path(path)
    check_store_path(db_path)
    if not create and not db_path.exists():
        raise PlannerError(f"no trace store at {db_path}: expected the store a trace was ingested into (the same "
                           "--db, or $PLANNER_DB, as the ingest); nothing was created there")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(db_path))
    except duckdb.Error as exc:
        # DuckDB lets one process open a store: a running app holds its own ("block" in a corrupt file's message is
        # no lock)
        if "could not set lock" in str(exc).lower() or "conflicting lock" in str(exc).lower():
            raise PlannerError(f"the trace store {db_path} is open in another process (the app, while it runs, "
                               f"holds its store): {first_line(exc)}; expected it closed, or another --db for this "
                               "command") from None
        raise PlannerError(f"cannot open the trace store {db_path}: {exc}; expected a DuckDB 2.x file "
                           "not locked by another process") from None
    # GLOBAL: settings are per connection otherwise, and every unit of work runs on its own cursor
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    # a bounded buffer pool: DuckDB spills sorts, joins, aggregates and windows to disk beyond it (next to the
    # store), so a trace of any size is ingested and summarised in the same memory
    memory = os.environ.get("PLANNER_DUCKDB_MEMORY", DEFAULT_DUCKDB_MEMORY)
    try:
        con.execute("SET GLOBAL memory_limit = $m", {"m": memory})
    except duckdb.Error as exc:
        con.close()
        raise PlannerError(f"PLANNER_DUCKDB_MEMORY={memory!r}: {first_line(exc)}; expected a size such as 2GB or "
                           "512MB") from None
    con.execute(SCHEMA)
    return con


def quote_ident(name: str) -> str:
    """Quote an SQL identifier for DuckDB."""
    return '"' + name.replace('"', '""') + '"'


def requests_view(trace_id: str) -> str:
    """The quoted name of the view holding a trace's canonical requests."""
    return quote_ident(f"requests_{trace_id}")


def requests_data_table(trace_id: str) -> str:
    """The quoted name of the table behind :func:`requests_view` (rejected rows included, flagged)."""
    return quote_ident(f"requests_{trace_id}_data")


@dataclass(frozen=True)
class TraceInfo:
    """One row of the ``traces`` table."""

    trace_id: str
    name: str
    source_file: str
    format: str
    compression: str
    layout: str
    mapping: dict
    units: dict
    dialect: dict | None
    rows: int
    rejected: int
    failed: int
    has_timestamps: bool
    time_kind: str | None
    timestamp_resolution_s: float | None
    start_epoch_s: float | None
    notes: list
    created: str
    files: int = 1
    source_bytes: int | None = None


def _trace_from_row(cols: list[str], row: tuple) -> TraceInfo:
    rec = dict(zip(cols, row, strict=True))
    for key in ("mapping", "units", "notes"):
        rec[key] = json.loads(rec[key])
    rec["dialect"] = json.loads(rec["dialect"]) if rec["dialect"] else None
    rec.pop("content_sha256")
    rec["created"] = rec["created"].isoformat(timespec="seconds")
    return TraceInfo(**rec)


def list_traces(con: duckdb.DuckDBPyConnection, owner: str | None = None) -> list[TraceInfo]:
    """Stored traces, newest first: all of them, or those in ``owner``'s workspace plus the shared ones (linked
    to nobody: the bundled sample, CLI ingests)."""
    cur = con.cursor()
    if owner is None:
        rel = cur.sql("SELECT * FROM traces ORDER BY created DESC, name")
    else:
        rel = cur.sql("SELECT * FROM traces WHERE trace_id IN (SELECT trace_id FROM workspace_traces WHERE owner = $o)"
                      " OR trace_id NOT IN (SELECT trace_id FROM workspace_traces) ORDER BY created DESC, name",
                      params={"o": owner})
    cols = rel.columns
    return [_trace_from_row(cols, r) for r in rel.fetchall()]


def get_trace(con: duckdb.DuckDBPyConnection, ref: str) -> TraceInfo:
    """Find a trace by id or by name.

    Raises
    ------
    PlannerError
        If no trace has that id or name; the message lists the names that exist.
    """
    cur = con.cursor()
    rel = cur.sql("SELECT * FROM traces WHERE trace_id = $ref OR name = $ref ORDER BY trace_id = $ref DESC",
                  params={"ref": ref})
    cols, rows = rel.columns, rel.fetchall()
    if not rows:
        names = [t.name for t in list_traces(con)]
        known = ", ".join(names[:20]) if names else "none: ingest one with `python -m planner ingest PATH`"
        raise PlannerError(f"no trace with id or name {ref!r}; expected one of the stored traces ({known})")
    return _trace_from_row(cols, rows[0])


def read_as(mapping: dict, units: dict, dialect: dict | None) -> str:
    """How a trace's bytes were read (columns, units, CSV dialect), in one canonical string: the same bytes read
    another way are another trace."""
    return json.dumps([mapping, units, dialect], sort_keys=True)


def find_by_hash(con: duckdb.DuckDBPyConnection, sha256: str, reading: str | None = None) -> TraceInfo | None:
    """The trace stored from the same bytes, if any: read as ``reading`` (:func:`read_as`), or any way (None)."""
    cur = con.cursor()
    rel = cur.sql("SELECT * FROM traces WHERE content_sha256 = $h ORDER BY created", params={"h": sha256})
    cols = rel.columns
    found = [_trace_from_row(cols, row) for row in rel.fetchall()]
    return next((t for t in found if reading is None or read_as(t.mapping, t.units, t.dialect) == reading), None)


def may_hold_bytes(con: duckdb.DuckDBPyConnection, size: int) -> bool:
    """Whether a stored trace could hold files of ``size`` bytes in all: one of that size, or one stored before
    sizes were (whose size is unknown). Only then can a new file be a duplicate."""
    return con.cursor().execute("SELECT count(*) FROM traces WHERE layout <> 'summary' AND (source_bytes = $b OR "
                                "source_bytes IS NULL)", {"b": size}).fetchall()[0][0] > 0


def content_hash(con: duckdb.DuckDBPyConnection, trace_id: str) -> str:
    """SHA-256 of the bytes a trace was ingested from (a split's: of those bytes and the model it keeps,
    :func:`planner.traces.split.split_hash`)."""
    row = con.cursor().execute("SELECT content_sha256 FROM traces WHERE trace_id = $t", {"t": trace_id}).fetchone()
    if row is None:
        raise PlannerError(f"no trace with id {trace_id!r}")
    return row[0]


def trace_files(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[dict]:
    """The files a trace was read from, in row order (``path``, ``bytes``, ``first_row``, ``source_rows``); empty
    for a trace read from one file."""
    rel = con.cursor().sql("SELECT path, bytes, first_row, source_rows FROM trace_files WHERE trace_id = $t "
                           "ORDER BY idx", params={"t": trace_id})
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


def check_name(name: str | None) -> None:
    """Refuse a trace name the user chose (``--name``; None: none chosen) that is blank, or that reads as a trace id
    (16 hex digits): a trace is looked up by id first, so one so named could not be found by its name."""
    if name is not None and not name.strip():
        raise PlannerError(f"--name {name!r}: expected a trace name with at least one visible character")
    if name is not None and re.fullmatch(r"[0-9a-f]{16}", name):
        raise PlannerError(f"--name {name!r}: reads as a trace id (16 hex digits), which is looked up before any "
                           "name; expected another name")


def unique_name(con: duckdb.DuckDBPyConnection, wanted: str, notes: list[str] | None = None) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3``… if that name is taken (by a trace's name, or its id: a trace is
    looked up by id first); a note appended to ``notes`` says it was taken (a changed file ingested again under
    its default name is stored apart, and the old trace still answers to the name)."""
    cur = con.cursor()
    taken = {r[0] for r in cur.execute("SELECT name FROM traces UNION SELECT trace_id FROM traces").fetchall()}
    name, n = wanted, 2
    while name in taken:
        name, n = f"{wanted}-{n}", n + 1
    if notes is not None and name != wanted:
        notes.append(f"named {name}: a trace named {wanted} is stored already")
    return name


def rejects_of(con: duckdb.DuckDBPyConnection, trace_id: str, limit: int | None = None) -> list[tuple]:
    """``(row, raw, reason)`` of a trace's rejected rows in source order."""
    cur = con.cursor()
    sql = 'SELECT "row", raw, reason FROM rejects WHERE trace_id = $t ORDER BY "row"'
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return cur.execute(sql, {"t": trace_id}).fetchall()


def rejects_csv(con: duckdb.DuckDBPyConnection, trace_id: str) -> bytes:
    """A trace's rejected rows as CSV bytes (``row,raw,reason``), for download."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["row", "raw", "reason"])
    writer.writerows(rejects_of(con, trace_id))
    return buf.getvalue().encode("utf-8")


def link_owner(cur: duckdb.DuckDBPyConnection, trace_id: str, owner: str | None, existing: bool = False) -> None:
    """Add a trace to ``owner``'s workspace (no owner: nothing to do), on ``cur`` itself so an open transaction
    covers it. For a trace that was ``existing`` already, only when it is private: a shared trace (linked to
    nobody) stays visible to everyone."""
    if not owner:
        return
    with WRITE_LOCK:
        if existing and not cur.execute("SELECT count(*) FROM workspace_traces WHERE trace_id = $t",
                                        {"t": trace_id}).fetchone()[0]:
            return
        cur.execute("INSERT OR IGNORE INTO workspace_traces VALUES ($o, $t)", {"o": owner, "t": trace_id})


def owned_trace_ids(con: duckdb.DuckDBPyConnection, owner: str) -> set[str]:
    """Traces linked to ``owner``'s workspace (those a signed-in user may remove)."""
    rows = con.cursor().execute("SELECT trace_id FROM workspace_traces WHERE owner = $o", {"o": owner}).fetchall()
    return {r[0] for r in rows}


def remove_trace(con: duckdb.DuckDBPyConnection, trace_id: str, owner: str | None = None) -> None:
    """Take a trace out of ``owner``'s workspace, deleting it once no workspace keeps it; without an owner (a
    single-workspace app, the CLI) delete it outright. One transaction: a failure leaves links and data as they
    were (a half-done removal must never turn a private trace into a shared one).

    Raises
    ------
    PlannerError
        When the trace is not in ``owner``'s workspace (shared traces are not theirs to remove).
    """
    with transaction(con) as cur:
        if owner is not None:
            linked = cur.execute("DELETE FROM workspace_traces WHERE owner = $o AND trace_id = $t RETURNING 1",
                                 {"o": owner, "t": trace_id}).fetchall()
            if not linked:
                raise PlannerError(f"trace {trace_id!r} is not in your workspace; nothing was removed")
            others = cur.execute("SELECT count(*) FROM workspace_traces WHERE trace_id = $t",
                                 {"t": trace_id}).fetchone()[0]
            if others:
                return
        _drop_trace(cur, trace_id)


def _drop_trace(cur, trace_id: str) -> None:
    from planner.traces.summary import drop_summary_tables

    cur.execute(f"DROP VIEW IF EXISTS {requests_view(trace_id)}")
    cur.execute(f"DROP TABLE IF EXISTS {requests_data_table(trace_id)}")
    drop_summary_tables(cur, trace_id)
    for table in ("rejects", "trace_files", "workspace_traces", "traces"):
        cur.execute(f"DELETE FROM {table} WHERE trace_id = $t", {"t": trace_id})


def delete_trace(con: duckdb.DuckDBPyConnection, trace_id: str) -> None:
    """Remove a trace, its requests, its rejects and its workspace links in one transaction."""
    remove_trace(con, trace_id, None)
