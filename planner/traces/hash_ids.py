"""Parsing Mooncake-style ``hash_ids`` (one prefix id per 512-token block) at ingest: the SQL that casts them,
tests a row and words its reason."""

from __future__ import annotations

from planner.limits import MOONCAKE_BLOCK_TOKENS
from planner.traces.layouts import Mapping
from planner.traces.sources import Source, sql_str

_INTEGER_TYPES = frozenset({"tinyint", "smallint", "integer", "bigint", "hugeint",
                            "utinyint", "usmallint", "uinteger", "ubigint", "uhugeint"})
_FLOAT_TYPES = frozenset({"float", "double", "decimal"})
_INT64_MAX = 2 ** 63 - 1
# hash_ids written as text (a CSV cell, a JSON value of mixed type): a bracketed list of integers, "[1, 2, 3]"
_ID_LIST_RE = r"\s*\[\s*([-+]?\d+(\.0+)?\s*(,\s*[-+]?\d+(\.0+)?\s*)*)?\]\s*"


def _list_kind(cur, source: Source, expr: str) -> str:
    """How a hash_ids column holds its ids: ``int`` (a list of integers, as a JSON reader types ``[1, 2]``),
    ``float`` (a list of floats or decimals) or ``text`` (anything else: CSV text, a JSON column of mixed type)."""
    dtype = cur.sql(f"SELECT {expr} FROM {source.sample_sql}").types[0]  # binds, runs nothing
    if dtype.id != "list":
        return "text"
    child = dtype.child.id
    return "int" if child in _INTEGER_TYPES else "float" if child in _FLOAT_TYPES else "text"


def hash_ids_sql(cur, source: Source, mapping: Mapping, input_ok: str, lab: str) -> tuple[str, str, str]:
    """Parse, bad-row test and reason for ``hash_ids``: ``(parsed column, bad test, reason)``.

    A list column casts directly; text must read as a bracketed list of integers (a cast alone would round
    ``2.5``). A missing value is fine (NULL); a present one needs whole ids, ``ceil(input_tokens / 512)`` of them.
    """
    expr = source.columns[mapping.columns["hash_ids"]]
    text, x = f"CAST({expr} AS VARCHAR)", "__hash_ids"
    kind = _list_kind(cur, source, expr)
    # ids are 64-bit hashes as often as counters: one past BIGINT's range (an unsigned 64-bit hash) is stored as the
    # BIGINT of the same bits, which keeps equal ids equal and different ones different
    wrapped = f"CASE WHEN e >= {2 ** 64} THEN NULL WHEN e > {_INT64_MAX} THEN e - {2 ** 64} ELSE e END"
    parsed = f"list_transform(TRY_CAST({expr} AS HUGEINT[]), lambda e: TRY_CAST({wrapped} AS BIGINT)) AS {x}"
    # every id survived the cast (an id past 64 bits, a null or a non-number becomes a NULL element)
    ids_ok = f"{x} IS NOT NULL AND list_count({x}) = len({x})"
    if kind == "text":
        blank = f"({text} IS NULL OR trim({text}) = '')"
        ids_ok = f"regexp_full_match({text}, {sql_str(_ID_LIST_RE)}) AND {ids_ok}"
    else:
        blank = f"({expr} IS NULL)"
        if kind == "float":
            ids_ok = f"len(list_filter({expr}, lambda e: NOT coalesce(e = floor(e), false))) = 0 AND {ids_ok}"
    expected = f"ceil(__input_tokens / {MOONCAKE_BLOCK_TOKENS})"
    # the count is checked against a readable input_tokens only (an unreadable one has its own reason)
    count_ok = f"(NOT {input_ok} OR len({x}) = {expected})"
    bad = f"(NOT {blank} AND NOT coalesce({ids_ok} AND {count_ok}, false))"
    tokens = "CAST(CAST(__input_tokens AS BIGINT) AS VARCHAR)"
    reason = (f"CASE WHEN {blank} THEN NULL "
              f"WHEN NOT coalesce({ids_ok}, false) THEN {lab} || ': ' || {text} || ' is not a list of integer ids' "
              f"WHEN NOT {count_ok} THEN {lab} || ': ' || len({x}) || ' ids for ' || {tokens} || ' input tokens; "
              f"expected ceil(' || {tokens} || '/{MOONCAKE_BLOCK_TOKENS}) = ' || CAST({expected} AS BIGINT) || "
              f"' (one id per {MOONCAKE_BLOCK_TOKENS}-token block)' END")
    return parsed, bad, reason
