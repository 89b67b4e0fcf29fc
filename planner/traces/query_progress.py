"""DuckDB's progress on one long statement (an ingest's load, a split's copy), reported as it runs."""

from __future__ import annotations

import threading
from collections.abc import Callable

import duckdb

ProgressFn = Callable[[float, str], None]      # (fraction done, message)


def progress_cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor whose running query reports ``query_progress()`` without drawing DuckDB's bar on stdout.

    Progress settings are per connection and cannot be set globally, hence a cursor of its own.
    """
    cur = con.cursor()
    cur.execute("SET enable_progress_bar = true")
    cur.execute("SET enable_progress_bar_print = false")
    cur.execute("SET progress_bar_time = 0")
    return cur


class QueryProgress:
    """Report DuckDB's query progress for one long statement on a :func:`progress_cursor`, from a background
    thread, as ``on_progress(fraction, message)`` with the fraction mapped onto [``start``, ``end``]."""

    def __init__(self, con, on_progress: ProgressFn | None, start: float, end: float, message: str):
        self.con, self.on_progress, self.start, self.end, self.message = con, on_progress, start, end, message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                pct = self.con.query_progress()
            except Exception:  # progress is best effort: the query may have just finished
                return
            if pct is not None and pct >= 0:
                self.on_progress(self.start + (self.end - self.start) * min(pct, 100.0) / 100.0, self.message)

    def __enter__(self):
        if self.on_progress:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
