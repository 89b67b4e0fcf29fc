"""Look at a file before ingesting it: format, dialect, columns, detected mapping and the first rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from planner.errors import PlannerError
from planner.traces.layouts import Mapping, detect_mapping
from planner.traces.sources import Dialect, Source, open_source, read_error

PREVIEW_ROWS = 20


@dataclass(frozen=True)
class Inspection:
    """What the ingest would see, for the user to check and adjust."""

    source: Source
    mapping: Mapping | None
    mapping_error: str | None
    preview: pl.DataFrame

    @property
    def columns(self) -> list[str]:
        return list(self.source.columns)


def inspect_file(con: duckdb.DuckDBPyConnection, path: str | Path, fmt: str = "auto",
                 dialect: Dialect | None = None, overrides: dict[str, str] | None = None) -> Inspection:
    """Sniff a file and detect its mapping without storing anything.

    A file whose columns cannot be mapped still inspects (``mapping`` is None and ``mapping_error`` says why), so
    the user can pick the columns by hand.

    Raises
    ------
    PlannerError
        When the file cannot be read at all (empty, binary, malformed).
    """
    cur = con.cursor()
    source = open_source(cur, path, fmt, dialect, rejects_name="preview")
    try:
        columns = {name: expr for name, expr in source.columns.items()}
        select = ", ".join(f"CAST({expr} AS VARCHAR) AS \"{name.replace(chr(34), '')}\""
                           for name, expr in columns.items())
        preview = cur.sql(f"SELECT {select} FROM {source.sample_sql} LIMIT {PREVIEW_ROWS}").pl()
    except duckdb.Error as exc:
        raise read_error(Path(path), source.format, exc) from None
    try:
        mapping, error = detect_mapping(list(source.columns), overrides), None
    except PlannerError as exc:
        mapping, error = None, str(exc)
    return Inspection(source, mapping, error, preview)

