"""One server's requests split off a stored trace that holds several servers' traffic, as a trace of its own.

A log whose ``model`` column names several models is several servers' traffic; every view of it (statistics, fits,
prefix reuse, replays, recommendations, reports) describes their sum. Its split holds the requests one model
served, failed ones included, with the source rows' numbers and its arrivals counted from its own first request,
so each of those views describes that one server. It is stored like an ingest (one transaction, a name of its own,
in the owner's workspace) and identified by its source's content hash, how that was read and the model, so
splitting the same model off the same source again finds it.
"""

from __future__ import annotations

import hashlib
import json

import duckdb

from planner.errors import PlannerError
from planner.traces import query_progress, store
from planner.traces.ingest import IngestResult, already_stored, result_from_trace
from planner.traces.queries import model_counts
from planner.traces.query_progress import ProgressFn


def split_hash(parent_sha256: str, info: store.TraceInfo, model: str) -> str:
    """The content hash a split is stored under: its source's bytes, how they were read (mapping, units, dialect:
    the same bytes ingested again another way are another source) and the model whose requests it keeps."""
    reading = store.read_as(info.mapping, info.units, info.dialect)
    return hashlib.sha256(f"{parent_sha256}\n{reading}\nmodel={model}".encode()).hexdigest()


def split_by_model(con: duckdb.DuckDBPyConnection, trace_ref: str, model: str, *, name: str | None = None,
                   owner: str | None = None, on_progress: ProgressFn | None = None) -> IngestResult:
    """Store the requests of ``trace_ref`` that its ``model`` column says ``model`` served as a trace of their own.

    Parameters
    ----------
    trace_ref : str
        The stored trace's id or name.
    model : str
        A model as the trace's ``model`` column writes it.
    name : str, optional
        The new trace's name; default ``<trace>-<model>`` (the model's last path part), made unique.
    owner : str, optional
        The signed-in user whose workspace lists the split.
    on_progress : callable, optional
        Called with ``(fraction, message)`` as the split proceeds (DuckDB's progress while it copies the rows).

    Returns
    -------
    IngestResult
        The split; where the same model was split off the same bytes before, that trace with ``duplicate_of`` set.

    Raises
    ------
    PlannerError
        For a summary (it counts requests, not who served them), a trace naming fewer than two models (nothing to
        split) or a model the trace does not name (the message lists those it names).
    """
    store.check_name(name)
    report = on_progress or (lambda f, m: None)
    # all under the write lock: the source cannot go while it is read, and a split of the same model by another
    # session is either stored or not begun
    with store.transaction(con, progress=True) as cur:
        info = store.get_trace(cur, trace_ref)
        if info.layout == "summary":
            raise PlannerError(f"summary {info.name!r} counts requests, not which model served each: there is "
                               "nothing to split; split the log before summarising it")
        counts = model_counts(cur, info.trace_id)
        listed = ", ".join(f"{m} ({n:,} rows)" for m, n in counts.items())
        if len(counts) < 2:
            held = (f"names one model ({listed}): its requests are one server's already" if counts else
                    "has a model column naming no model" if "model" in info.mapping else "has no model column")
            raise PlannerError(f"trace {info.name!r} {held}; expected a trace whose model column names several")
        if model not in counts:
            raise PlannerError(f"--model {model!r}: trace {info.name!r} names no such model; expected one of the "
                               f"models its model column names: {listed}")
        sha = split_hash(store.content_hash(cur, info.trace_id), info, model)
        if (duplicate := already_stored(cur, sha, owner)) is not None:
            report(1.0, "already stored")
            return duplicate
        trace_id = sha[:16]
        source = store.requests_view(info.trace_id)
        others = sum(counts.values()) - counts[model]
        unnamed = info.rows - sum(counts.values())
        notes = [f"split off {info.name} ({info.trace_id}): the {counts[model]:,} rows its model column says "
                 f"{model} served, numbered as there; {others:,} rows of other models"
                 + (f" and {unnamed:,} naming none" if unnamed else "") + " left out"]
        columns = [c for c in cur.sql(f"SELECT * FROM {source} LIMIT 0").columns if c not in ("row", "arrival")]
        t0 = cur.execute(f"SELECT min(arrival) FROM {source} WHERE model = $m", {"m": model}).fetchone()[0]
        copying = f"copying {counts[model]:,} rows"
        report(0.05, copying)
        with query_progress.QueryProgress(cur, on_progress, 0.05, 0.95, copying):
            # arrivals from the split's own first request, as an ingest counts them from the trace's
            cur.execute(f"CREATE TABLE {store.requests_data_table(trace_id)} AS SELECT \"row\", arrival - $t0 AS "
                        f"arrival, {', '.join(map(store.quote_ident, columns))} FROM {source} WHERE model = $m "
                        "ORDER BY \"row\"", {"m": model, "t0": t0})
        cur.execute(f"CREATE VIEW {store.requests_view(trace_id)} AS SELECT * FROM "
                    f"{store.requests_data_table(trace_id)}")
        rows, failed = cur.execute(f"SELECT count(*), count(*) FILTER (failed) FROM "
                                   f"{store.requests_data_table(trace_id)}").fetchone()
        stem = model.rstrip("/").rsplit("/", 1)[-1] or model
        cur.execute("INSERT INTO trace_files SELECT $id, idx, path, bytes, first_row, source_rows FROM trace_files "
                    "WHERE trace_id = $p", {"id": trace_id, "p": info.trace_id})
        trace_name = store.unique_name(cur, name or f"{info.name}-{stem}", notes)
        cur.execute(
            "INSERT INTO traces (trace_id, name, source_file, content_sha256, format, compression, layout, "
            "mapping, units, dialect, rows, rejected, failed, has_timestamps, time_kind, timestamp_resolution_s, "
            "start_epoch_s, notes, created, files, source_bytes) SELECT $id, $name, source_file, $sha, format, "
            "compression, layout, mapping, units, dialect, $rows, 0, $failed, has_timestamps, time_kind, "
            "timestamp_resolution_s, start_epoch_s + $t0, $notes, now()::TIMESTAMP, files, source_bytes "
            "FROM traces WHERE trace_id = $p",
            {"id": trace_id, "name": trace_name, "sha": sha, "rows": rows, "failed": failed, "t0": t0,
             "notes": json.dumps(notes), "p": info.trace_id})
        store.link_owner(cur, trace_id, owner)
    report(1.0, "stored")
    return result_from_trace(store.get_trace(con, trace_id), None)
