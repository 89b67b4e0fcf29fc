"""Content hashes of trace files, computed in chunks (never the whole file in memory), optionally in the background.

A large file's hash runs beside DuckDB's load of it (``hashlib`` releases the GIL), so the content-hash key costs
little wall time; a small file's hash is taken first, so a duplicate is caught before any work.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

_CHUNK = 1 << 22
# Below this size the hash is taken up front (well under 0.1 s); above it, it overlaps the load.
BACKGROUND_FROM_BYTES = 64 << 20


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def files_sha256(paths: Sequence[Path]) -> str:
    """The content key of files read as one trace: a single file's own SHA-256 (so a trace's key does not depend
    on how it was named), else the SHA-256 of the files' digests in order (the same bytes split the same way)."""
    if len(paths) == 1:
        return file_sha256(paths[0])
    digest = hashlib.sha256(b"files\0")
    for path in paths:
        digest.update(file_sha256(path).encode() + b"\0")
    return digest.hexdigest()


class ContentHash:
    """The SHA-256 of a trace's files (:func:`files_sha256`): computed now when they are small, in a background
    thread when they are large."""

    def __init__(self, paths: Path | Sequence[Path]):
        paths = (paths,) if isinstance(paths, Path) else tuple(paths)
        self._value: str | None = None
        self._error: BaseException | None = None
        self.background = sum(p.stat().st_size for p in paths) >= BACKGROUND_FROM_BYTES
        if self.background:
            self._thread = threading.Thread(target=self._run, args=(paths,), daemon=True)
            self._thread.start()
        else:
            self._value = files_sha256(paths)

    def _run(self, paths: Sequence[Path]) -> None:
        try:
            self._value = files_sha256(paths)
        except BaseException as exc:  # re-raised in the caller's thread by value()
            self._error = exc

    def value(self) -> str:
        """The hex digest, waiting for the background thread if there is one."""
        if self.background:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
