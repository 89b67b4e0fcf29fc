"""What a delimited file's lines say before DuckDB's reader reads them: the columns its header names, and the line
where its line endings change (which the reader fails on without saying so)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.traces.sources import Dialect


def header_names(head: bytes, dialect: Dialect) -> list[str]:
    """The columns a file's first line names (``column0``… without a header)."""
    import csv

    lines = head.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines()
    if not lines:
        return []
    line = lines[0]
    cells = next(csv.reader([line], delimiter=dialect.delimiter, quotechar=dialect.quote))
    # named as DuckDB's own reader names them: an empty name by its position, a repeated one with a suffix
    names: list[str] = []
    for i, cell in enumerate(cells):
        name = cell if dialect.header and cell else f"column{i}"
        base, k = name, 0
        while name in names:
            k += 1
            name = f"{base}_{k}"
        names.append(name)
    return names


def mixed_line_ending(path: Path, chunk_bytes: int = 1 << 22) -> tuple[int, str, str] | None:
    """``(line, ending, other)``: the first line (from 1) that ends in ``other`` where the lines before it end in
    ``ending`` (CRLF or LF); None where every line ends alike, or for a compressed file (its reader names its own
    trouble). Read only on a failed read: DuckDB's reader gives a mixed file no error of its own."""
    if path.suffix in (".gz", ".zst", ".zstd"):
        return None
    first, lines, tail = None, 0, b""
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            data = tail + chunk
            cut = data.rfind(b"\n") + 1             # whole lines only; the rest waits for the next chunk
            whole, tail = data[:cut], data[cut:]
            crlf, ends = whole.count(b"\r\n"), whole.count(b"\n")
            if first is None and ends:
                first = whole.find(b"\r\n") == whole.find(b"\n") - 1
            if ends and crlf != (ends if first else 0):     # the change is in this chunk: find its line
                for i, text in enumerate(whole.split(b"\n")[:-1]):
                    if text.endswith(b"\r") != first:
                        return lines + i + 1, *(("CRLF", "LF") if first else ("LF", "CRLF"))
            lines += ends
    return None
