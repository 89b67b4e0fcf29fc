"""How a source's rows become canonical rows: the SQL that casts and checks each value, resolving time and latency
units from a sample, and builds a reason only for a bad row."""

from __future__ import annotations

from dataclasses import dataclass

from planner.traces.hash_ids import hash_ids_sql
from planner.traces.layouts import (LATENCY_FIELDS, LATENCY_UNITS, MOST_PLAUSIBLE_MS, Mapping, latency_unit,
                                    normalize)
from planner.traces.sources import Source, sql_str
from planner.traces.timestamps import WALL_CLOCK_RANGE_S, TimeKind, arrival_sql, infer_time_kind, seconds_sql

_SAMPLE_ROWS = 20_000
OPTIONAL_FIELDS = {"model": "VARCHAR", "session_id": "VARCHAR", "ttft_ms": "DOUBLE", "tpot_ms": "DOUBLE",
                    "e2e_ms": "DOUBLE", "status": "VARCHAR", "service": "VARCHAR", "hash_ids": "BIGINT[]"}
_TEXT_FIELDS = tuple(f for f, sql_type in OPTIONAL_FIELDS.items() if sql_type == "VARCHAR")
_FAILURE_WORDS = "err|fail|timeout|timed.out|abort|cancel|reject|exception"
# what an ``error`` column holds for a request that did not fail: a boolean false, a zero code, an empty value
# (a zero code in any spelling, 0.00 too, is read as a number)
_NO_ERROR_WORDS = ("", "false", "f", "no", "none", "null", "nan", "n/a", "na", "ok", "success", "[]", "{}")
_MAX_WHOLE_TOKENS = 2.0 ** 53


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
    many_files: bool        # read from several files
    file_column: bool       # the data table has a ``file`` column: each row's index in the source's files
    notes: tuple[str, ...] = ()     # units read from the values alone: a guess the user can correct with --unit


def _label(fld: str, column: str) -> str:
    return sql_str(f"{fld} (column {column!r})")


def plan_parse(cur, source: Source, mapping: Mapping) -> _Plan:
    """Build the parsing SQL for a source and mapping, resolving time and latency units from a sample.

    The hot path only casts and tests each value; reason strings are built for bad rows alone.
    """
    cols = source.columns
    text = {fld: f"CAST({cols[col]} AS VARCHAR)" for fld, col in mapping.columns.items()}
    # a column the reader already types as a number is read as one: a round trip through text costs as much
    # as the rest of the parse (the text is built only for a bad row's reason)
    value = {fld: cols[col] if col in source.numeric else text[fld] for fld, col in mapping.columns.items()}
    units = dict(mapping.units)
    time_kind = None
    input_ok = "false"
    parsed: list[str] = []
    bad: list[str] = []
    reasons: list[str] = []

    def blank(fld: str) -> str:
        if value[fld] is not text[fld]:
            return f"({value[fld]} IS NULL)"
        v = text[fld]
        return f"({v} IS NULL OR trim({v}) = '')"

    for fld in ("input_tokens", "output_tokens"):
        v, x, lab = text[fld], f"__{fld}", _label(fld, mapping.columns[fld])
        if source.is_integer(mapping.columns[fld]):
            # whole by its type: only sign and size to test, no round trip through a double
            parsed.append(f"{value[fld]} AS {x}")
            ok = f"coalesce({x} >= 0 AND {x} < {int(_MAX_WHOLE_TOKENS)}, false)"
            reasons.append(f"CASE WHEN {x} IS NULL THEN {lab} || ': missing' "
                           f"WHEN {x} < 0 THEN {lab} || ': ' || {v} || ' is negative' "
                           f"WHEN {x} >= {int(_MAX_WHOLE_TOKENS)} THEN {lab} || ': ' || {v} || "
                           "' is not a whole number of tokens' END")
        else:
            parsed.append(f"TRY_CAST({value[fld]} AS DOUBLE) AS {x}")
            # NaN compares above everything in DuckDB, so the upper bound also rejects NaN and inf
            ok = f"coalesce({x} >= 0 AND {x} = floor({x}) AND {x} < {_MAX_WHOLE_TOKENS!r}, false)"
            reasons.append(
                f"CASE WHEN {blank(fld)} THEN {lab} || ': missing' "
                f"WHEN {x} IS NULL OR NOT isfinite({x}) THEN {lab} || ': ' || {v} || ' is not a number' "
                f"WHEN {x} < 0 THEN {lab} || ': ' || {v} || ' is negative' "
                f"WHEN {x} <> floor({x}) THEN {lab} || ': ' || {v} || ' is not a whole number of tokens' "
                f"WHEN {x} >= {_MAX_WHOLE_TOKENS!r} THEN {lab} || ': ' || {v} || ' is more tokens than any request "
                "holds; expected a count below 2^53' END")
        if fld == "input_tokens":
            input_ok = ok
        bad.append(f"NOT {ok}")
    guessed: list[str] = []
    if "arrival" in mapping.columns:
        declared = units["arrival"]
        time_kind = infer_time_kind(_sample(cur, source, cols[mapping.columns["arrival"]]), declared)
        if declared == "auto" and time_kind.kind == "relative_s":       # no clock in them: the unit is a guess
            guessed.append(f"arrival (column {mapping.columns['arrival']!r}) read as seconds from the trace's "
                           "start; give --unit arrival=ms (or us, ns) if it counts another unit")
        units["arrival"] = time_kind.kind
        v, lab = text["arrival"], _label("arrival", mapping.columns["arrival"])
        parsed.append(f"{arrival_sql(value['arrival'], time_kind, value['arrival'] is text['arrival'])} AS __arrival")
        readable = "coalesce(isfinite(__arrival), false)"
        outside = "false"
        if time_kind.is_wall_clock and time_kind.range_checked:
            first, last = WALL_CLOCK_RANGE_S
            outside = f"NOT ({seconds_sql('__arrival', time_kind)} BETWEEN {first!r} AND {last!r})"
        expected = ("the column''s dates (a placeholder such as 1970-01-01?)" if time_kind.kind == "datetime" else
                    "one unit for the whole column (another row''s unit, or a placeholder such as 0?)")
        bad.append(f"NOT {readable} OR {outside}")
        reasons.append(f"CASE WHEN {blank('arrival')} THEN {lab} || ': missing' "
                       f"WHEN NOT {readable} THEN {lab} || ': cannot read ' || {v} || ' as {time_kind.form}' "
                       f"WHEN {outside} THEN {lab} || ': ' || {v} || ' read as {time_kind.kind} is not a time "
                       f"between 1973 and 2100 like the column''s others; expected {expected}' END")
    # a log writes its latencies in one unit: a bare column takes the unit its siblings' names state where its
    # values are plausible in it (ttft_ms beside a bare `latency` of median 175 read it as seconds, 3,000x the
    # TTFT), else its median's
    named = {units[f] for f in LATENCY_FIELDS if f in mapping.columns and units[f] != "auto"}
    for fld in LATENCY_FIELDS:
        if fld not in mapping.columns:
            continue
        declared, sibling = units[fld], next(iter(named)) if len(named) == 1 else None
        median = _median(_sample(cur, source, cols[mapping.columns[fld]])) if declared == "auto" else None
        unit = latency_unit(fld, declared, median, sibling)
        if declared == "auto" and median is not None and sibling is None and unit == "s" and fld == "e2e_ms":
            # a request's seconds over its output tokens past what any server takes a token: milliseconds (a bare
            # `latency` of median 200 beside 1-8 output tokens had read 40 s a token)
            tokens = _median(_sample(cur, source, cols[mapping.columns["output_tokens"]]))
            if tokens and median * 1e3 / max(tokens, 1.0) > MOST_PLAUSIBLE_MS["tpot_ms"]:
                unit = "ms"
        if declared == "auto" and median is not None:
            guessed.append(f"{fld.removesuffix('_ms')} (column {mapping.columns[fld]!r}) read in {unit} "
                           + (f"as the {sibling} its sibling columns name" if unit == sibling else
                              f"from its values (median {median:,.4g})")
                           + f"; give --unit {fld}={'ms' if unit == 's' else 's'} if not")
        units[fld] = unit
        v, x, lab = text[fld], f"__{fld}", _label(fld, mapping.columns[fld])
        parsed.append(f"TRY_CAST({value[fld]} AS DOUBLE) * {LATENCY_UNITS[unit]!r} AS {x}")
        # a missing latency is fine (NULL); an unreadable or negative one is not
        bad.append(f"(NOT coalesce({x} >= 0 AND isfinite({x}), false) AND NOT {blank(fld)})")
        reasons.append(f"CASE WHEN {blank(fld)} THEN NULL "
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
            no_error = ", ".join(f"'{w}'" for w in _NO_ERROR_WORDS)
            status_failed = (f"coalesce(NOT (lower(trim(__status)) IN ({no_error}) "
                             f"OR coalesce(TRY_CAST(trim(__status) AS DOUBLE) = 0, false)), false)")
        else:
            status_failed = (f"coalesce(regexp_matches(lower(__status), '{_FAILURE_WORDS}') "
                             f"OR TRY_CAST(__status AS DOUBLE) >= 400, false)")

    many_files = len(source.files) > 1
    # which of the reader's files a row came from (DuckDB's virtual column), for a reject to name it; Parquet
    # files say their row counts in their footers, which place every row without a column
    file_column = many_files and source.format != "parquet"
    if file_column:
        parsed.append("file_index AS __file")
    if source.row_error:        # a row that is no record at all: that is its one reason
        bad.insert(0, f"{source.row_error} IS NOT NULL")
        reasons = [f"coalesce({source.row_error}, concat_ws('; ', {', '.join(reasons)}))"]
    bad_sql = " OR ".join(bad)
    # Every stored column costs about a tenth of a bare load's time, all-NULL or not, so the data table holds only
    # what the view needs: the fields the source has (the view adds the rest as NULL), a failed flag only where a
    # status takes a test to read (zero output tokens is tested in the view), and one reject column.
    optional = [f"__{fld} AS {fld}" for fld in OPTIONAL_FIELDS if fld in mapping.columns]
    stored_failed = status_failed != "false"
    final = [
        *(["__arrival AS arrival_abs"] if time_kind else []),
        # rejected rows keep whatever casts (the view hides them); TRY_CAST keeps NaN/inf from failing the load
        "TRY_CAST(__input_tokens AS BIGINT) AS input_tokens",
        "TRY_CAST(__output_tokens AS BIGINT) AS output_tokens",
        *optional,
        *([f"(__output_tokens = 0 OR {status_failed}) AS failed"] if stored_failed else []),
        *(["CAST(__file AS UINTEGER) AS file"] if file_column else []),
        # [reason, raw text] of a bad row, NULL for a good one: a list stores nothing for NULL rows, where a STRUCT
        # or two text columns store a NULL per row (and cost as much as any other column)
        f"CASE WHEN {bad_sql} THEN [concat_ws('; ', {', '.join(reasons)}), {source.raw_row_sql()}] END AS reject",
    ]
    # two flat levels: casts, then checks (a third level for a shared "bad" flag costs a third more time)
    select_sql = f"SELECT {', '.join(final)} FROM (SELECT *, {', '.join(parsed)} FROM {source.reader_sql})"
    # a stored row is a good one: its output_tokens is the parsed count itself
    failed_sql = "failed" if stored_failed else "output_tokens = 0"
    return _Plan(select_sql, units, time_kind, frozenset(f for f in OPTIONAL_FIELDS if f in mapping.columns),
                 failed_sql, many_files, file_column, tuple(guessed))
