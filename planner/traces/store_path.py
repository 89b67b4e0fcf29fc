"""Where the trace store is (``--db``, ``$PLANNER_DB``, the user data folder) and which files may be one: a
DuckDB database, or a path where no file is yet."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from planner.errors import PlannerError


def default_db_path() -> Path:
    """Return the store path: ``$PLANNER_DB`` if set, else ``traces.duckdb`` in the user's data directory."""
    env = os.environ.get("PLANNER_DB")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("llm-capacity-planner")) / "traces.duckdb"


def store_path(path: str | os.PathLike | None = None) -> Path:
    """The store file ``path`` names (``--db``), else :func:`default_db_path`."""
    return Path(path).expanduser() if path is not None else default_db_path()


# a DuckDB database file holds this at byte 8 (after its header checksum): storage/storage_info.hpp, MAGIC_BYTES
_DUCKDB_MAGIC_OFFSET, _DUCKDB_MAGIC = 8, b"DUCK"


def check_store_path(db_path: Path) -> None:
    """Refuse a store path that names anything but a DuckDB database or a new file: DuckDB would otherwise open
    a CSV or Parquet file read-only as an attached view and every write would go nowhere."""
    if not db_path.exists():
        if db_path.is_symlink():
            raise PlannerError(f"--db {db_path}: a broken symbolic link; expected a DuckDB store or a new path")
        return
    if db_path.is_dir():
        raise PlannerError(f"--db {db_path}: is a directory; expected a DuckDB store file or a new path")
    if not db_path.is_file():
        raise PlannerError(f"--db {db_path}: is not a regular file (a FIFO, socket or device); expected a DuckDB "
                           "store file or a new path")
    try:
        with open(db_path, "rb") as fh:
            head = fh.read(_DUCKDB_MAGIC_OFFSET + len(_DUCKDB_MAGIC))
    except OSError as exc:
        raise PlannerError(f"--db {db_path}: cannot read it ({exc.strerror}); expected a DuckDB store this user "
                           "can read and write") from None
    if not head:
        # DuckDB refuses an empty file as a database, except one named like data (.csv, .json, .parquet): that it
        # opens as a read-only view, and every write would go nowhere
        raise PlannerError(f"--db {db_path}: an empty file; expected a DuckDB store file or a path where none is "
                           "yet (remove the empty file to create the store there)")
    if not is_duckdb_file(head):
        raise PlannerError(f"--db {db_path}: not a DuckDB database (a CSV, Parquet or other file); expected a "
                           "DuckDB store file or a new path, and nothing in it was changed")


def is_duckdb_file(head: bytes) -> bool:
    """Whether a file starting with ``head`` (its first 12 bytes or more) is a DuckDB database."""
    return head[_DUCKDB_MAGIC_OFFSET:_DUCKDB_MAGIC_OFFSET + len(_DUCKDB_MAGIC)] == _DUCKDB_MAGIC
