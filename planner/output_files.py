"""Files the planner writes for the user (reports, calibrations, rejects): checked before the work that fills
them starts, and written whole or not at all."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from planner.errors import PlannerError
from planner.traces.store_path import is_duckdb_file


def writable_path(flag: str, name: str | os.PathLike) -> Path:
    """The absolute path ``name`` names, once it is known that a file can be written there.

    Parameters
    ----------
    flag : str
        How the command line names the value (``-o``), for the error.
    name : str or path-like
        The file to write.

    Raises
    ------
    PlannerError
        When the path is a directory or another non-regular file, its folder does not exist or is not a
        folder, or a file cannot be created in that folder (tried, not guessed from permission bits: root ignores
        them, a read-only or virtual filesystem does not).
    """
    text = os.fspath(name)
    if not text.strip():
        raise PlannerError(f"{flag} {text!r}: expected a file name")
    path = Path(text).expanduser().absolute()
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise PlannerError(f"{flag} {text}: is a directory; expected a file to write")
        if not stat.S_ISREG(mode):
            raise PlannerError(f"{flag} {text}: is not a regular file (a FIFO, socket or device); expected a file "
                               "to write")
        if _is_database(path):
            raise PlannerError(f"{flag} {text}: is a DuckDB database (a trace store?), which writing would destroy; "
                               "expected another file name")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise PlannerError(f"{flag} {text}: the folder {folder} {what}; expected a file in an existing folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".probe")
    except OSError as exc:
        raise PlannerError(f"{flag} {text}: cannot write in {folder} ({exc.strerror}); expected a folder this user "
                           "can write to") from None
    os.close(fd)
    os.unlink(probe)
    if path.exists() and not os.access(path, os.W_OK):
        raise PlannerError(f"{flag} {text}: the file exists and cannot be overwritten; expected a writable file")
    return path


def _is_database(path: Path) -> bool:
    """Whether ``path`` holds a DuckDB database: a report, calibration or rejects file written over a trace store
    would lose every trace in it."""
    try:
        with open(path, "rb") as fh:
            return is_duckdb_file(fh.read(16))
    except OSError:
        return False            # unreadable: the writability check after says so


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, renamed over it once complete: a
    reader never sees a half-written file, and a failed write leaves any earlier file as it was."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)            # mkstemp's 0600 would keep a shared report from its readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
