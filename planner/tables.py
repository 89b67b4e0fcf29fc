"""Tables as data: a caption, column names and rows of raw values, built once and drawn by both a page
(``st.dataframe``) and a report (HTML and Markdown), with one way of writing a value as text."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EMPTY = "—"


@dataclass(frozen=True)
class Table:
    """``columns`` names and ``rows`` of raw values (None where a value does not exist)."""

    caption: str
    columns: list[str]
    rows: list[list]

    @classmethod
    def of(cls, records: list[dict], caption: str = "") -> Table:
        """A table of records (dicts with the same keys, in order); an empty list is a table without rows."""
        columns = list(records[0]) if records else []
        return cls(caption, columns, [[r.get(c) for c in columns] for r in records])

    def transposed(self) -> Table:
        """Rows as columns, named by the first column's values: a wide table of few rows (one per SLO class) reads
        down a narrow page instead of running off its edge."""
        head = [self.columns[0], *(fmt(row[0]) for row in self.rows)]
        return Table(self.caption, head, [[name, *(row[i] for row in self.rows)]
                                          for i, name in enumerate(self.columns) if i > 0])

    def display_columns(self) -> dict[str, list]:
        """Columns ready for a data grid: a column with an empty cell is written as text (empty cells as
        :data:`EMPTY`, numbers as :func:`fmt` writes them) so no grid shows "None"; the others keep raw values."""
        out = {}
        for i, name in enumerate(self.columns):
            values = [row[i] for row in self.rows]
            empty = any(v is None or (isinstance(v, float) and not math.isfinite(v)) for v in values)
            mixed = len({type(v) for v in values if v is not None}) > 1
            out[name] = [fmt(v) for v in values] if empty or mixed else values
        return out


def fmt(value) -> str:
    """A value as the tables write it: thousands separators, four significant digits below 100 (a TPOT p99 of
    49.96 ms beside a 50 ms SLO reads 49.96, not 50), one decimal above, yes/no for booleans and :data:`EMPTY` for
    a missing or infinite value; numpy scalars as the Python values they hold."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.4g}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)
