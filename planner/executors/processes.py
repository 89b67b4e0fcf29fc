"""The local default: a pool of worker processes, one per core, kept for the life of the process.

Workers are spawned, not forked: the parent runs threads (DuckDB's, Streamlit's, a search's own) that a fork
would copy mid-flight; and they are not handed the parent's main script (see :class:`_WorkerProcess`). A spawned
worker imports the planner and loads the compiled loops from numba's cache once, then serves every search; calls
and results travel pickled.
"""

from __future__ import annotations

import atexit
import multiprocessing
import sys
import threading
import types
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from planner.errors import PlannerError

_POOLS: dict[int, ProcessExecutor] = {}
_DIED = "a local worker process died (out of memory?); run again, or with --workers 1 to simulate in this process"
_LOCK = threading.Lock()


_SPAWN = multiprocessing.get_context("spawn")
# what a worker is told the parent's main module was: nothing to re-run
_PLAIN_MAIN = types.ModuleType("__main__")


class _WorkerProcess(_SPAWN.Process):
    """A spawned worker that does not re-run the parent's main script. multiprocessing re-imports the parent's
    ``__main__`` in each child; under Streamlit that is the page script being run (Streamlit installs it as
    ``__main__``), which would open the store a second time from the child."""

    def start(self):
        main = sys.modules["__main__"]
        sys.modules["__main__"] = _PLAIN_MAIN
        try:
            super().start()
        finally:
            sys.modules["__main__"] = main


class _Context(type(_SPAWN)):
    Process = _WorkerProcess


class ProcessExecutor:
    """``workers`` local worker processes."""

    name = "processes"

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = ProcessPoolExecutor(workers, mp_context=_Context())

    @classmethod
    def shared(cls, workers: int) -> ProcessExecutor:
        """The process's pool of ``workers`` (started on first use, replaced if a worker died)."""
        with _LOCK:
            pool = _POOLS.get(workers)
            if pool is None or pool.broken:
                pool = _POOLS[workers] = cls(workers)
            return pool

    @property
    def broken(self) -> bool:
        return getattr(self._pool, "_broken", False) is not False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """``fn(*args, **kwargs)`` in a worker; a worker that dies, at submission or while the call runs, is one
        :class:`PlannerError` saying so (a death mid-call surfaced as a bare BrokenProcessPool)."""
        try:
            inner = self._pool.submit(fn, *args, **kwargs)
        except BrokenProcessPool:
            raise PlannerError(_DIED) from None
        out: Future = Future()

        def relay(done: Future) -> None:
            if done.cancelled():        # the pool shut down before it ran
                out.cancel()
                return
            exc = done.exception()
            if exc is None:
                out.set_result(done.result())
            else:
                out.set_exception(PlannerError(_DIED) if isinstance(exc, BrokenProcessPool) else exc)
        inner.add_done_callback(relay)
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS.values()):
        pool.close()
