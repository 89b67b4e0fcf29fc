"""What an ingest path names: one file, every file under a directory, or the files a glob matches.

An existing file is that file even when its name holds glob characters (``t*.csv`` is a legal file name); a
pattern is a glob only where no such file exists. Under a directory, hidden files and the bookkeeping files that
Spark, Hive and Hadoop write beside their parts (names starting with ``.`` or ``_``: ``_SUCCESS``, ``.crc``) are
skipped, at any depth, so a partitioned output directory (``date=2026-11-01/part-0.parquet``) reads as its parts.
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from planner.errors import PlannerError

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class FileSet:
    """The files one ingest reads, in the order their rows are numbered (sorted by path).

    Attributes
    ----------
    spec : str
        The path as given (a file, a directory or a glob).
    kind : str
        ``file``, ``directory`` or ``glob``.
    paths : tuple of Path
        The regular files named, at least one.
    """

    spec: str
    kind: str
    paths: tuple[Path, ...]

    @property
    def total_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.paths)

    def label(self) -> str:
        """How notes and errors name the set: the file's name, or the spec with its file count."""
        if self.kind == "file":
            return self.paths[0].name
        return f"{self.spec} ({len(self.paths):,} files)"


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _skipped(relative: Path) -> bool:
    return any(part.startswith((".", "_")) for part in relative.parts)


def resolve_files(spec: str | os.PathLike) -> FileSet:
    """The files ``spec`` names.

    Raises
    ------
    PlannerError
        When nothing regular is named: no such path, a glob that matches no file, an empty directory, or a
        special file (a FIFO, a device: reading one could block forever).
    """
    text = os.fspath(spec)
    path = Path(text).expanduser()
    if path.exists() or path.is_symlink():
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if not _skipped(p.relative_to(path)) and _is_regular(p))
            if not found:
                raise PlannerError(f"{text} is a directory with no trace files in it; expected Parquet, CSV or "
                                   "JSON Lines files (names starting with '.' or '_' are skipped)")
            return FileSet(text, "directory", tuple(found))
        if not _is_regular(path):
            raise PlannerError(f"{text} is not a regular file (a FIFO, socket or device, or a broken link); "
                               "expected a trace file, a directory of them or a glob")
        return FileSet(text, "file", (path,))
    if _GLOB_CHARS & set(text):
        matched = sorted(Path(p) for p in glob.glob(os.path.expanduser(text), recursive=True))
        found = [p for p in matched if _is_regular(p)]
        if not found:
            extra = f" ({len(matched)} matches are not regular files)" if matched else ""
            raise PlannerError(f"no files match {text!r}{extra}; expected a glob such as 'logs/*.parquet' that "
                               "matches at least one trace file")
        return FileSet(text, "glob", tuple(found))
    raise PlannerError(f"no such file: {text}; expected a path to a trace file, a directory of them or a glob")


SERVER_PATHS_ENV = "PLANNER_SERVER_PATHS"


def server_roots() -> tuple[Path, ...]:
    """The folders under which the app may read trace files named by path (``PLANNER_SERVER_PATHS``, a
    ``os.pathsep``-separated list); empty, the default, turns reading server paths off."""
    text = os.environ.get(SERVER_PATHS_ENV, "")
    return tuple(Path(p).expanduser().resolve() for p in text.split(os.pathsep) if p.strip())


def resolve_server_files(spec: str, roots: tuple[Path, ...]) -> FileSet:
    """:func:`resolve_files` for a path typed into the app: only files under one of ``roots`` (symbolic links
    followed), so a user reads what the operator put there and nothing else of the server's.

    Raises
    ------
    PlannerError
        When reading server paths is off, the path is relative, or a file it names lies outside every root.
    """
    if not roots:
        raise PlannerError(f"reading files on the server is off in this deployment; an operator turns it on by "
                           f"setting {SERVER_PATHS_ENV} to the folders traces may be read from")
    if not os.path.isabs(os.path.expanduser(spec)):
        raise PlannerError(f"{spec!r} is a relative path; expected an absolute path or glob under "
                           + ", ".join(str(r) for r in roots))
    fileset = resolve_files(spec)
    for path in fileset.paths:
        real = path.resolve()
        if not any(real == root or root in real.parents for root in roots):
            raise PlannerError(f"{path} is outside the folders this deployment reads traces from ("
                               + ", ".join(str(r) for r in roots) + "); nothing was read")
    return fileset
