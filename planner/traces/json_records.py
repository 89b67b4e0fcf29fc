"""JSON Lines, and the elements of a JSON array, read one record at a time: a line that is not valid JSON, or an
element that is not an object, is one reject, and every other record is read as usual."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from planner.errors import PlannerError
from planner.traces.sources import (JSON_SAMPLE, LINE_OPTIONS, MAX_LINE_BYTES, Source, files_sql, read_error,
                                    sql_str, walk_column)
from planner.traces.store import quote_ident

# a JSON Lines file is read as one text column per line, split on a byte valid JSON never holds raw (control
# characters are escaped inside strings): every line, parseable or not, becomes one row and one verdict
_UNIT_SEPARATOR = "\x1f"
_NOT_OBJECT = ("json_type(__raw) <> 'OBJECT' THEN 'a JSON ' || CASE json_type(__raw) WHEN 'VARCHAR' THEN 'string' "
               "WHEN 'ARRAY' THEN 'array' WHEN 'NULL' THEN 'null' WHEN 'BOOLEAN' THEN 'boolean' ELSE 'number' END || "
               "', not a request object'")


def json_records(con: duckdb.DuckDBPyConnection, paths: list[Path], fmt: str, compression: str,
                 notes: tuple[str, ...], rejects_name: str) -> Source:
    """JSON Lines, or the elements of a JSON array, as one row each: a line that is not valid JSON or an
    element that is not an object is one reject (its own text and why), and the other rows are read as usual.

    The columns come from the merged structure of the first objects (as DuckDB's reader samples them), scalar
    fields read as text so the parser words each bad value (``"abc" is not a number``) as it does for CSV.
    """
    path, p, comp = paths[0], files_sql(paths), sql_str(compression)
    many = tuple(paths) if len(paths) > 1 else ()
    file_index = ", file_index" if many else ""
    rejects = None
    if fmt == "jsonl":
        rejects = f"{rejects_name}_rejects"
        base = (f"(SELECT column0 AS __raw{file_index} FROM read_csv({p}, columns={{'column0': 'VARCHAR'}}, "
                f"header=false, auto_detect=false, delim={sql_str(_UNIT_SEPARATOR)}, quote='', escape='', "
                f"compression={comp}, {LINE_OPTIONS}, store_rejects=true, "
                f"rejects_table={sql_str(rejects)}, rejects_scan={sql_str(rejects_name + '_scans')}) "
                "WHERE column0 IS NOT NULL AND trim(column0) <> '')")
        error = f"CASE WHEN NOT json_valid(__raw) THEN 'not valid JSON' WHEN {_NOT_OBJECT} END"
    else:
        base = (f"(SELECT CAST(json AS VARCHAR) AS __raw{file_index} FROM read_json_objects({p}, format='auto', "
                f"compression={comp}, maximum_object_size={MAX_LINE_BYTES}))")
        error = f"CASE WHEN {_NOT_OBJECT} END"
    checked = f"(SELECT *, {error} AS __json_error FROM {base})"
    try:
        found = con.execute(f"SELECT json_group_structure(CAST(__raw AS JSON)) FROM (SELECT __raw FROM {checked} "
                            f"WHERE __json_error IS NULL LIMIT {JSON_SAMPLE})").fetchall()[0][0]
    except duckdb.Error as exc:
        raise read_error(path, fmt, exc) from None
    structure = _text_leaves(json.loads(found)) if found else None
    if not isinstance(structure, dict) or not structure:
        raise PlannerError(f"{path.name}: no JSON object among the first {JSON_SAMPLE:,} "
                           f"{'lines' if fmt == 'jsonl' else 'elements'}; expected one object per request")
    late = _late_fields(con, checked, structure)
    if late:
        notes = (*notes, f"fields first seen past the first {JSON_SAMPLE:,} records are read too: {', '.join(late)}")
    reader = (f"(SELECT *, json_transform(CASE WHEN __json_error IS NULL THEN __raw END, "
              f"{sql_str(json.dumps(structure))}) AS __obj FROM {checked})")
    try:
        dtype = con.sql(f"SELECT __obj FROM {reader} LIMIT 0").types[0]
    except duckdb.Error as exc:
        raise read_error(path, fmt, exc) from None
    columns: dict[str, str] = {}
    for name, child in dtype.children:
        walk_column(columns, {}, name, f"__obj.{quote_ident(name)}", child)
    return Source(path, fmt, compression, reader, columns, rejects_table=rejects, notes=notes, paths=many,
                  row_error="__json_error")


def _late_fields(con: duckdb.DuckDBPyConnection, checked: str, structure: dict) -> list[str]:
    """Top-level fields no sampled record has, added to ``structure`` (as the records holding them give theirs):
    an ``error`` field only failed requests carry, first seen past the sample, was left unread and every failure
    counted a success. One pass over the keys (a fifth of a structure's cost per record)."""
    try:
        keys = [k for (k,) in con.execute(f"SELECT DISTINCT unnest(json_keys(__raw)) FROM {checked} "
                                          "WHERE __json_error IS NULL").fetchall()]
        late = sorted(k for k in keys if k not in structure)
        if not late:
            return []
        (found,) = con.execute(f"SELECT json_group_structure(CAST(__raw AS JSON)) FROM (SELECT __raw FROM {checked} "
                               f"WHERE __json_error IS NULL AND list_has_any(json_keys(__raw), $late) "
                               f"LIMIT {JSON_SAMPLE})", {"late": late}).fetchone()
    except duckdb.Error:
        return []           # the sample's structure stands; the read itself reports a file it cannot read
    more = _text_leaves(json.loads(found))
    structure.update({k: more[k] for k in late})
    return late


def _text_leaves(structure):
    """A ``json_group_structure`` with every scalar read as text (a number, a string and a mix alike), lists of
    numbers kept as such (hash ids), and null-only fields as text."""
    if isinstance(structure, dict):
        return {k: _text_leaves(v) for k, v in structure.items()}
    if isinstance(structure, list):
        child = structure[0] if structure else "VARCHAR"
        return [child if child in _NUMERIC_JSON else _text_leaves(child)]
    return "VARCHAR"


_NUMERIC_JSON = ("UBIGINT", "BIGINT", "DOUBLE", "HUGEINT", "UHUGEINT")
