"""Row numbers of a trace: a stored row's place in its source, counted past the lines DuckDB's CSV reader
dropped and, for a trace read from several files, through the files in path order."""

from __future__ import annotations

from dataclasses import dataclass

from planner.traces.sources import Source, files_sql, sql_str


def structural_rejects(cur, source: Source) -> list[tuple[int, int, str, str]]:
    """Lines DuckDB's CSV reader could not split into the header's columns: ``(file, row in file, raw, reason)``."""
    if not source.rejects_table:
        return []
    header = 1 if source.dialect and source.dialect.header else 0
    # DuckDB records one error per missing column: a line is one reject, with the error of its first column
    rows = cur.execute(f"SELECT file_id, line, first(csv_line), arg_min(lower(error_type) || ': ' || "
                       f"error_message, column_idx) FROM {source.rejects_table} GROUP BY file_id, line "
                       "ORDER BY file_id, line").fetchall()
    if source.format == "jsonl":    # split on a byte valid JSON never holds raw: the line is not JSON
        rows = [(f, line, raw, "not valid JSON (a raw control character 0x1F)") for f, line, raw, _ in rows]
    return [(int(f), int(line) - header, raw, reason) for f, line, raw, reason in rows]


@dataclass(frozen=True)
class FileRows:
    """Where each file's rows sit in the trace's row numbering (several files only)."""

    names: list[str]
    first_row: list[int]        # trace row number of each file's first row
    source_rows: list[int]      # each file's rows, stored and rejected
    file_column: bool           # the data table names each row's file (else the rows place it: Parquet)

    @classmethod
    def count(cls, cur, data: str, source: Source, structural: list[tuple[int, int, str, str]],
              file_column: bool):
        """Each file's rows: from the data table's ``file`` column, or, for Parquet, the files' own footers."""
        files = source.files
        if file_column:
            stored = dict(cur.execute(f"SELECT file, count(*) FROM {data} GROUP BY file").fetchall())
        else:
            by_name = dict(cur.execute(f"SELECT file_name, num_rows FROM parquet_file_metadata({files_sql(files)})")
                           .fetchall())
            stored = {i: int(by_name[str(p)]) for i, p in enumerate(files)}
        dropped = [0] * len(files)
        for f, *_ in structural:
            dropped[f] += 1
        rows = [stored.get(i, 0) + dropped[i] for i in range(len(files))]
        first = [1 + sum(rows[:i]) for i in range(len(files))]
        return cls([p.name for p in files], first, rows, file_column)

    def prefix_sql(self, number_sql: str) -> str:
        """SQL naming a stored row's file and its row within it (``number_sql``: its trace row number), for a
        reject reason."""
        names = "[" + ", ".join(sql_str(n) for n in self.names) + "]"
        # the file: its stored index, or the last file whose first row is at or before the row
        index = ("file + 1" if self.file_column else
                 f"len(list_filter({self.first_row!r}, lambda f: f <= {number_sql}))")
        return (f"{names}[{index}] || ' row ' || CAST({number_sql} - {self.first_row!r}[{index}] + 1 AS "
                "VARCHAR) || ': '")


def number_dropped(structural: list[tuple[int, int, str, str]],
                   spans: FileRows | None) -> list[tuple[int, str, str]]:
    """The dropped lines as ``(trace row, raw, reason)``: a file's first row plus its place in the file, the reason
    naming the file where there are several."""
    if spans is None:
        return [(row, raw, reason) for _, row, raw, reason in structural]
    return [(spans.first_row[f] - 1 + row, raw, f"{spans.names[f]} row {row}: {reason}")
            for f, row, raw, reason in structural]


def row_sql(structural: list[tuple[int, str, str]], first_rowid: int = 0) -> str:
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
