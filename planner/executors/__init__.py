"""Where a search's independent simulations run: in the calling process, on a local process pool, or on a Ray
cluster. One registry, one file each (:mod:`.inline`, :mod:`.processes`, :mod:`.ray_cluster`); every executor
runs the same pure functions, so the answers do not depend on which one ran them."""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Any, Callable, Protocol

from planner.errors import PlannerError


class Executor(Protocol):
    """Runs picklable calls somewhere and hands back futures."""

    name: str
    workers: int        # calls it runs at once: how many a search keeps in flight

    def submit(self, fn: Callable[..., Any], /, *args, **kwargs) -> Future:
        """Start ``fn(*args, **kwargs)``; its future holds the result or the exception."""
        ...


# a rail against a slip, not a tuning: more worker processes than any node has cores only crowd it (a pool of
# 2**31 - 1 overflowed the process pool's queue: OverflowError)
MAX_WORKERS = 1024


def local_workers() -> int:
    """The local default: one worker per core this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def get_executor(workers: int | None = None, ray: str | None = None) -> Executor:
    """The executor the flags ask for.

    Parameters
    ----------
    workers : int, optional
        Local worker processes (default: one per core); 1 runs every call in the calling process.
    ray : str, optional
        A Ray cluster's address (``ray://host:10001``, ``host:6379``, ``auto``) or ``local`` to start a local
        Ray runtime; overrides ``workers`` except as the local runtime's CPU count.

    Raises
    ------
    PlannerError
        For a worker count outside 1 … :data:`MAX_WORKERS`, or when Ray is asked for and cannot be reached.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= MAX_WORKERS):
        raise PlannerError(f"--workers {workers!r}: expected a whole number of worker processes, from 1 to "
                           f"{MAX_WORKERS:,}")
    if ray:
        from planner.executors.ray_cluster import RayExecutor

        return RayExecutor.connect(ray, workers)
    count = workers or local_workers()
    if count == 1:
        from planner.executors.inline import InlineExecutor

        return InlineExecutor()
    from planner.executors.processes import ProcessExecutor

    return ProcessExecutor.shared(count)
