"""Find out what a file is (compression, format, CSV dialect, columns) and how DuckDB's own readers read it.

Only the first bytes are read in Python, to sniff; the rows themselves are streamed by DuckDB.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from planner.errors import PlannerError, first_line
from planner.traces.csv_lines import header_names, mixed_line_ending
from planner.traces.store import quote_ident
from planner.traces.vllm_benchmark import vllm_benchmark_reader

FORMATS = ("csv", "tsv", "jsonl", "json", "parquet")
_DELIMITERS = (",", "\t", ";", "|")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_HEAD_BYTES = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PARQUET_MAGIC = b"PAR1"
JSON_SAMPLE = 20_480        # objects a JSON reader types its columns from (DuckDB's sample_size)
# the longest line a reader takes (DuckDB's default is 2 MB): a logged prompt of a few MB is one request, not a
# reason to refuse the file
MAX_LINE_BYTES = 64 << 20
# the CSV reader's options for it: DuckDB sizes its buffers from max_line_size unless told, and every open of the
# reader (sniff, probe, sample, load) then allocated ~190 MB more and took 0.1-0.3 s longer; one buffer of the
# longest line is enough (a 10 MB line reads whole in it)
LINE_OPTIONS = f"max_line_size={MAX_LINE_BYTES}, buffer_size={MAX_LINE_BYTES}"


def sql_str(value: str) -> str:
    """An SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class Dialect:
    """A CSV dialect, as sniffed or as the user set it."""

    delimiter: str = ","
    quote: str = '"'
    escape: str = '"'
    header: bool = True

    def as_dict(self) -> dict:
        return {"delimiter": self.delimiter, "quote": self.quote, "escape": self.escape, "header": self.header}


@dataclass(frozen=True)
class Source:
    """A file (or several of one layout) ready to be read: its reader call and its columns as SQL expressions."""

    path: Path                        # the first file
    format: str
    compression: str                  # none | gzip | zstd
    reader_sql: str                   # a FROM-able SQL expression
    columns: dict[str, str]           # column name (nested JSON as parent.child) -> SQL expression over reader_sql
    dialect: Dialect | None = None
    rejects_table: str | None = None  # where DuckDB's CSV reader puts structurally broken lines
    notes: tuple[str, ...] = field(default_factory=tuple)
    peek_sql: str | None = None       # the reader without side effects, for sampling values
    paths: tuple[Path, ...] = ()      # every file read, in row order (empty: just ``path``)
    numeric: dict[str, str] = field(default_factory=dict)   # columns the reader types as numbers (Parquet)
    #                                                         and their types: read as such
    row_error: str | None = None      # a column with why a source row is no record at all (a JSON line that
    #                                   is not an object), NULL for a readable one; its raw text is ``__raw``

    def is_integer(self, column: str) -> bool:
        return self.numeric.get(column) in _INTEGER_TYPES

    @property
    def files(self) -> tuple[Path, ...]:
        return self.paths or (self.path,)

    @property
    def sample_sql(self) -> str:
        return self.peek_sql or self.reader_sql

    def raw_row_sql(self) -> str:
        """SQL rebuilding the source row as text, for the rejects table."""
        if self.row_error:
            return "__raw"
        if self.format in ("csv", "tsv"):
            dialect = self.dialect or Dialect()
            delim, quote = sql_str(dialect.delimiter), sql_str(dialect.quote)
            # a cell holding the delimiter, a quote or a line break is quoted again, as the file had it: `7,"1,000",5`
            # read back as `7,1,000,5` looked like four columns
            def cell(expr: str) -> str:
                v = f"coalesce(CAST({expr} AS VARCHAR), '')"
                special = " OR ".join(f"contains({v}, {c})" for c in (delim, quote, "chr(10)", "chr(13)"))
                quoted = f"{quote} || replace({v}, {quote}, {quote} || {quote}) || {quote}"
                return f"CASE WHEN {special} THEN {quoted} ELSE {v} END"
            return f"concat_ws({delim}, {', '.join(cell(expr) for expr in self.columns.values())})"
        pairs = ", ".join(f"{sql_str(name)}: {expr}" for name, expr in self.columns.items())
        return f"CAST(to_json({{{pairs}}}) AS VARCHAR)"


def read_head(path: Path) -> tuple[str, bytes]:
    """Return the compression and the first (decompressed) bytes of a file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_HEAD_BYTES)
    except FileNotFoundError:
        raise PlannerError(f"no such file: {path}; expected a path to a trace file") from None
    except IsADirectoryError:
        raise PlannerError(f"{path} is a directory; expected a trace file") from None
    except OSError as exc:
        raise PlannerError(f"cannot read {path}: {exc.strerror}") from None
    if raw.startswith(_GZIP_MAGIC):
        try:
            return "gzip", zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, _HEAD_BYTES)
        except zlib.error as exc:
            raise PlannerError(f"{path.name}: corrupt gzip data ({exc}); expected a complete .gz file") from None
    if raw.startswith(_ZSTD_MAGIC):
        import zstandard

        try:
            reader = zstandard.ZstdDecompressor().stream_reader(raw)
            return "zstd", reader.read(_HEAD_BYTES)
        except zstandard.ZstdError as exc:
            raise PlannerError(f"{path.name}: corrupt zstd data ({exc}); expected a complete .zst file") from None
    return "none", raw


def _looks_binary(head: bytes) -> bool:
    # NUL never occurs in text; a byte that is not UTF-8 does (one Latin-1 "café" in a log): DuckDB's readers read
    # or reject such a row, the rest of the file is still a trace
    return b"\x00" in head


def detect_format(path: Path, compression: str, head: bytes) -> str:
    """Tell the format from the content (not the name, which may lie), falling back to the extension."""
    if head.startswith(_PARQUET_MAGIC):
        if compression != "none":
            raise PlannerError(f"{path.name}: a compressed Parquet file; Parquet compresses internally, "
                               "expected the .parquet file itself")
        return "parquet"
    if not head.strip():
        raise PlannerError(f"{path.name} is empty; expected a trace with a header row and at least one request")
    if _looks_binary(head):
        raise PlannerError(f"{path.name} looks binary, not text; expected CSV, TSV, JSON Lines, JSON or Parquet "
                           "(optionally gzip- or zstd-compressed)")
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith("["):
        return "json"
    if text.startswith("{"):
        first = text.split("\n", 1)[0]
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return "json"  # one pretty-printed object, such as a vLLM benchmark result
        return "json" if isinstance(obj, dict) and "input_lens" in obj else "jsonl"
    suffixes = [s.lower() for s in path.suffixes]
    return "tsv" if ".tsv" in suffixes else "csv"


def read_error(path: Path, fmt: str, exc: Exception) -> PlannerError:
    """A user-facing error for a DuckDB reader failure, naming truncated compressed data as such."""
    detail = first_line(exc)
    lowered = detail.lower()
    if "schema mismatch" in lowered:
        return PlannerError(f"the files differ in their columns ({detail.split(': ', 1)[-1]}); expected every file "
                            "of one trace to have the same columns (ingest the others as traces of their own)")
    if "gzip" in lowered or "zstd" in lowered or "compress" in lowered:
        return PlannerError(f"{path.name}: the compressed data is truncated or corrupt ({detail}); expected a "
                            "complete .gz or .zst file")
    if "state machine reached an invalid state" in lowered and (mixed := mixed_line_ending(path)) is not None:
        line, ending, other = mixed
        return PlannerError(f"{path.name}: line {line:,} ends in {other} where the lines before it end in {ending}; "
                            "expected one line ending throughout (convert the file, e.g. with dos2unix)")
    return PlannerError(f"{path.name}: cannot read it as {fmt} ({detail}); expected a well-formed {fmt} file "
                        "(use --format to pick another reader)")


_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT")
_NUMERIC_TYPES = _INTEGER_TYPES + ("FLOAT", "DOUBLE", "DECIMAL")


def walk_column(columns: dict[str, str], numeric: dict[str, str], name: str, expr: str, dtype) -> None:
    """Add a reader column to ``columns`` (STRUCT fields flattened to ``parent.child``), and to ``numeric`` with
    its type where the reader types it as a number."""
    if str(dtype).startswith("STRUCT"):
        for child_name, child_type in dtype.children:
            walk_column(columns, numeric, f"{name}.{child_name}", f"{expr}.{quote_ident(child_name)}", child_type)
    else:
        columns[name] = expr
        if str(dtype).split("(")[0] in _NUMERIC_TYPES:
            numeric[name] = str(dtype).split("(")[0]


def _flatten(con: duckdb.DuckDBPyConnection, reader_sql: str, path: Path,
             fmt: str) -> tuple[dict[str, str], dict[str, str]]:
    """Columns of a reader, STRUCT fields flattened to ``parent.child``, and the numeric ones' types."""
    try:
        rel = con.sql(f"SELECT * FROM {reader_sql} LIMIT 0")
    except duckdb.Error as exc:
        raise read_error(path, fmt, exc) from None
    columns: dict[str, str] = {}
    numeric: dict[str, str] = {}
    for name, dtype in zip(rel.columns, rel.types, strict=True):
        walk_column(columns, numeric, name, quote_ident(name), dtype)
    return columns, numeric


def sniff_dialect(con: duckdb.DuckDBPyConnection, path: Path, compression: str, fmt: str,
                  head_text: str) -> Dialect:
    """Sniff a CSV/TSV dialect with DuckDB's sniffer (a TSV extension pins the tab)."""
    opts = [f"compression={sql_str(compression)}", LINE_OPTIONS]
    if fmt == "tsv":
        opts.append("delim='\\t'")
    header_line = head_text.split("\n", 1)[0]
    counts = {d: header_line.count(d) for d in _DELIMITERS}
    best = max(counts, key=counts.get)
    try:
        row = con.sql(f"SELECT Delimiter, Quote, Escape, HasHeader FROM sniff_csv({path_sql(path)}, "
                      + ", ".join(opts) + ")").fetchall()[0]
    except duckdb.Error as exc:
        # the sniffer reads the whole sample strictly: one broken line (an unterminated quote, a byte that is not
        # UTF-8) fails it, where the header still names the delimiter and the reader rejects that one line
        if counts[best]:
            delim = "\t" if fmt == "tsv" else best
            return Dialect(delimiter=delim, header=_first_line_is_header(head_text, delim))
        if compression != "none":
            raise read_error(path, fmt, exc) from None
        raise PlannerError(f"{path.name}: cannot sniff the CSV dialect ({first_line(exc)}); expected a delimited "
                           "text file with a header row (set --delimiter/--quote to read it as such)") from None
    delim, quote, escape, header = row
    # "(empty)" means the sample held no quotes; reading with none would split later quoted fields
    clean = lambda v: '"' if v in (None, "", "(empty)") else v  # noqa: E731
    # DuckDB's sniffer wants consistent rows; a small file with a broken line can fool it into one column.
    if counts[best] and counts.get(delim, 0) == 0:
        delim, header = best, True
    return Dialect(delimiter=delim, quote=clean(quote), escape=clean(escape), header=bool(header))


def _first_line_is_header(head_text: str, delim: str) -> bool:
    """Whether the first line names columns: some cell of it is text where the line below holds a number (the
    sniffer's rule, in short; a file of one line is taken to be its header)."""
    lines = head_text.lstrip("\ufeff").splitlines()
    if len(lines) < 2:
        return True
    is_number = lambda cell: bool(_NUMBER.fullmatch(cell.strip().strip('"')))  # noqa: E731
    return any(not is_number(a) and is_number(b)
               for a, b in zip(lines[0].split(delim), lines[1].split(delim), strict=False))


def _header_columns(head: bytes, dialect: Dialect) -> str:
    """A ``columns`` struct of VARCHAR columns named by the header line (``column0``… without a header), for a
    reader that cannot sniff the file."""
    return "{" + ", ".join(f"{sql_str(n)}: 'VARCHAR'" for n in header_names(head, dialect)) + "}"


def _same_columns(paths: Sequence[Path], head: bytes, dialect: Dialect) -> None:
    """Refuse files of one trace whose headers name other columns: DuckDB's reader takes the first file's and
    drops another's extra column without a word (their order may differ: columns are read by name)."""
    want = set(header_names(head, dialect))
    for other in paths[1:]:
        got = set(header_names(read_head(other)[1], dialect))
        if got != want:
            extra, missing = sorted(got - want), sorted(want - got)
            differs = "; ".join(part for part in (f"adds {', '.join(extra)}" if extra else "",
                                                  f"lacks {', '.join(missing)}" if missing else "") if part)
            raise PlannerError(f"{other.name} {differs} against {paths[0].name}'s columns; expected every file of "
                               "one trace to have the same columns (ingest the others as traces of their own)")


def path_sql(path: Path) -> str:
    """A file path as a literal for DuckDB's readers, which glob every path they are given: the glob characters
    of an existing file's own name are bracketed, so ``t*.csv`` reads that file and not ``t1.csv`` beside it."""
    return sql_str(re.sub(r"[*?\[]", lambda m: f"[{m.group(0)}]", str(path)))


def files_sql(paths: Sequence[Path]) -> str:
    """A reader's file argument: one path literal, or a list of them (DuckDB reads a list as one relation)."""
    if len(paths) == 1:
        return path_sql(paths[0])
    return "[" + ", ".join(path_sql(p) for p in paths) + "]"


def _same_kind(paths: Sequence[Path], compression: str, fmt: str, detected: bool) -> None:
    """Refuse a set of files whose formats or compressions differ: they cannot be one reader's input."""
    for other in paths[1:]:
        comp, head = read_head(other)
        kind = detect_format(other, comp, head) if detected else fmt
        if kind == "jsonl" and fmt == "json" or kind == "json" and fmt == "jsonl":
            kind = fmt          # a one-line JSON file and JSON Lines read alike
        if (comp, kind) != (compression, fmt):
            raise PlannerError(f"{other.name} is {kind} ({comp}) but {paths[0].name} is {fmt} ({compression}); "
                               "expected every file of one trace in the same format and compression")


def open_source(con: duckdb.DuckDBPyConnection, path: str | Path | Sequence[Path], fmt: str = "auto",
                dialect: Dialect | None = None, rejects_name: str = "ingest") -> Source:
    """Work out how to read ``path`` and return its reader and columns.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        Connection (or cursor) used for sniffing; the reader SQL is valid on it.
    path : str, Path or sequence of Path
        The file, or several files of one layout read as one relation in the order given (the first one is
        sniffed; DuckDB refuses files whose columns differ).
    fmt : str
        ``auto`` or one of :data:`FORMATS`.
    dialect : Dialect, optional
        CSV dialect that replaces the sniffed one.
    rejects_name : str
        Prefix of the temporary tables DuckDB's CSV reader writes structurally broken lines to.
    """
    paths = [Path(p) for p in path] if isinstance(path, Sequence) and not isinstance(path, str) else [Path(path)]
    path = paths[0]
    compression, head = read_head(path)
    detected = fmt == "auto"
    if fmt == "auto":
        fmt = detect_format(path, compression, head)
    elif fmt not in FORMATS:
        raise PlannerError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    elif fmt != "parquet" and not head.strip():
        raise PlannerError(f"{path.name} is empty; expected a trace with a header row and at least one request")
    _same_kind(paths, compression, fmt, detected)
    p = files_sql(paths)
    many = tuple(paths) if len(paths) > 1 else ()
    comp = sql_str(compression)
    notes: list[str] = []
    if fmt in ("csv", "tsv"):
        if dialect is None:
            dialect = sniff_dialect(con, path, compression, fmt, head.decode("utf-8", errors="replace"))
            notes.append(f"CSV dialect sniffed: delimiter {dialect.delimiter!r}, quote {dialect.quote!r}, "
                         f"header {'yes' if dialect.header else 'no'}")
        if dialect.delimiter == "\t":
            fmt = "tsv"
        if many and dialect.header:
            _same_columns(paths, head, dialect)
        rejects = f"{rejects_name}_rejects"
        peek = (f"read_csv({p}, all_varchar=true, header={str(dialect.header).lower()}, "
                f"delim={sql_str(dialect.delimiter)}, quote={sql_str(dialect.quote)}, "
                f"escape={sql_str(dialect.escape)}, compression={comp}, sample_size=20480, {LINE_OPTIONS}")
        try:
            columns, _ = _flatten(con, peek + ", ignore_errors=true)", path, fmt)
        except PlannerError:
            # the reader's own sniff of the column count failed on a broken line (an unterminated quote): the
            # header gives the columns, and the broken line becomes a reject
            peek += f", auto_detect=false, columns={_header_columns(head, dialect)}"
            columns, _ = _flatten(con, peek + ", ignore_errors=true)", path, fmt)
        reader = (f"{peek}, store_rejects=true, rejects_table={sql_str(rejects)}, "
                  f"rejects_scan={sql_str(rejects_name + '_scans')})")
        return Source(path, fmt, compression, reader, columns, dialect, rejects, tuple(notes),
                      peek + ", ignore_errors=true)", many)
    if fmt == "parquet":
        reader = f"read_parquet({p})"
        columns, numeric = _flatten(con, reader, path, fmt)
        return Source(path, fmt, compression, reader, columns, notes=tuple(notes), paths=many, numeric=numeric)
    if fmt == "json":       # a vLLM benchmark result is one object of parallel lists: DuckDB's reader unnests it
        native = f"read_json({p}, format='auto', compression={comp}, sample_size={JSON_SAMPLE})"
        try:
            columns, _ = _flatten(con, native, path, fmt)
        except PlannerError:
            columns = {}            # not records DuckDB can type as a whole (a stray element): read per element
        if {"input_lens", "output_lens"} <= set(columns):
            if many:
                raise PlannerError(f"{path.name} is a vLLM benchmark result: one run per file; expected it "
                                   "ingested on its own, not as part of a directory or glob")
            reader, columns, note = vllm_benchmark_reader(con, native, columns)
            return Source(path, fmt, compression, reader, columns, notes=(*notes, note), paths=many)
    # a reader of its own, built on this module's (imported here: it imports this module)
    from planner.traces.json_records import json_records

    return json_records(con, paths, fmt, compression, tuple(notes), rejects_name)
