"""Saved reports: stored whole (JSON, HTML and Markdown twins) under an unguessable id, opened read-only by
anyone who has the link (``?report=<id>``), whatever workspace saved them."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from planner.errors import PlannerError
from planner.traces import store

if TYPE_CHECKING:
    from planner.report.build import Report

ID_BYTES = 16                                   # 128 bits of randomness
_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{22}")  # token_urlsafe(16)


@dataclass(frozen=True)
class SavedReport:
    report_id: str
    created: str
    trace_id: str
    title: str
    body: dict
    html: str
    markdown: str

    def body_json(self) -> str:
        return json.dumps(self.body)


def save_report(con: duckdb.DuckDBPyConnection, body: dict, html: str, markdown: str,
                owner: str | None = None) -> str:
    """Store a report's JSON twin (``body``) and its HTML and Markdown; returns its new id
    (``secrets.token_urlsafe``, 128 random bits)."""
    report_id = secrets.token_urlsafe(ID_BYTES)
    with store.WRITE_LOCK:
        con.cursor().execute(
            "INSERT INTO reports VALUES ($id, now()::TIMESTAMP, $trace, $owner, $title, $json, $html, $md)",
            {"id": report_id, "trace": body["trace"]["trace_id"], "owner": owner, "title": body["title"],
             "json": json.dumps(body), "html": html, "md": markdown})
    return report_id


def publish_report(con: duckdb.DuckDBPyConnection, report: Report, owner: str | None = None,
                   texts: dict[str, str] | None = None) -> SavedReport:
    """Save a built report with its twins (``texts`` from :func:`planner.report.render.twins`, rendered here
    when not given) under a new id."""
    from planner.report.render import twins

    texts = texts or twins(report)
    return load_report(con, save_report(con, json.loads(texts["json"]), texts["html"], texts["md"], owner))


def load_report(con: duckdb.DuckDBPyConnection, report_id: str) -> SavedReport:
    """A saved report by id.

    Raises
    ------
    PlannerError
        For a malformed or unknown id (the message never says which ids exist).
    """
    if not _ID_PATTERN.fullmatch(report_id or ""):
        raise PlannerError("that report link is malformed: expected the 22-character id a saved report was given")
    row = con.cursor().execute(
        "SELECT report_id, created, trace_id, title, body_json, body_html, body_md FROM reports "
        "WHERE report_id = $id", {"id": report_id}).fetchone()
    if row is None:
        raise PlannerError("no saved report has that id: the link may be incomplete, or the report was deleted")
    rid, created, trace_id, title, body, html, md = row
    return SavedReport(rid, created.isoformat(timespec="seconds"), trace_id, title, json.loads(body), html, md)


def list_reports(con: duckdb.DuckDBPyConnection, owner: str | None = None, limit: int = 50) -> list[dict]:
    """Recently saved reports, newest first: all of them (single workspace) or those ``owner`` saved."""
    sql = "SELECT report_id, created, title FROM reports"
    params: dict = {"n": int(limit)}
    if owner is not None:
        sql += " WHERE owner = $o"
        params["o"] = owner
    rows = con.cursor().execute(sql + " ORDER BY created DESC LIMIT $n", params).fetchall()
    return [{"report_id": r, "created": c.isoformat(timespec="seconds"), "title": t} for r, c, t in rows]
