"""Content hashes of trace files, computed in chunks (never the whole file in memory), optionally in the background.

A large file's hash runs beside DuckDB's load of it (``hashlib`` releases the GIL), so the content-hash key costs
little wall time; a small file's hash is taken first, so a duplicate is caught before any work.
"""

from __future__ import annotations

import hashlib
import threading
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


class ContentHash:
    """The SHA-256 of a file: computed now for small files, in a background thread for large ones."""

    def __init__(self, path: Path):
        self._value: str | None = None
        self._error: BaseException | None = None
        self.background = path.stat().st_size >= BACKGROUND_FROM_BYTES
        if self.background:
            self._thread = threading.Thread(target=self._run, args=(path,), daemon=True)
            self._thread.start()
        else:
            self._value = file_sha256(path)

    def _run(self, path: Path) -> None:
        try:
            self._value = file_sha256(path)
        except BaseException as exc:  # re-raised in the caller's thread by value()
            self._error = exc

    def value(self) -> str:
        """The hex digest, waiting for the background thread if there is one."""
        if self.background:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
