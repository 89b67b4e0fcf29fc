"""A search's independent lines of work side by side: threads that each drive their own replays on the search's
executor (:mod:`planner.executors`), as many threads as it has workers, a compute-once cache so a replay two
threads ask for runs once, and progress relayed from the calling thread (Streamlit draws only from its script
thread)."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = 2             # the project machine's cores
POLL_S = 0.2


class Memo:
    """A thread-safe cache that computes each key once: a second caller waits for the first one's result."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[Hashable, Future] = {}

    def get(self, key: Hashable, compute: Callable[[], R]) -> R:
        with self._lock:
            future = self._futures.get(key)
            owner = future is None
            if owner:
                future = self._futures[key] = Future()
        if owner:
            try:
                future.set_result(compute())
            except BaseException as exc:
                with self._lock:
                    del self._futures[key]      # a failed replay may be asked again (and fail again)
                future.set_exception(exc)
                raise
        return future.result()

    def items(self) -> list[tuple[Hashable, R]]:
        """The finished entries."""
        with self._lock:
            done = [(k, f) for k, f in self._futures.items() if f.done() and f.exception() is None]
        return [(k, f.result()) for k, f in done]

    def clear(self) -> None:
        with self._lock:
            self._futures.clear()

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._futures


def parallel_map(fn: Callable[[T, Callable[[float, str], None]], R], items: Iterable[T],
                 progress: Callable[[float, str], None] | None = None, workers: int | None = None) -> list[R]:
    """``[fn(item, report) for item in items]`` on ``workers`` threads (default :data:`WORKERS`), in order. Each
    call reports its own progress (0–1, message) through ``report``; the caller's ``progress`` sees the mean over
    the items, called from the calling thread only."""
    items = list(items)
    state = [(0.0, "")] * len(items)

    def reporter(i: int) -> Callable[[float, str], None]:
        def report(fraction: float, message: str) -> None:
            state[i] = (fraction, message)
        return report

    def call(i: int, item: T) -> R:
        out = fn(item, reporter(i))
        state[i] = (1.0, state[i][1])
        return out

    pool = ThreadPoolExecutor(max(1, min(workers or WORKERS, len(items))))
    try:
        futures = [pool.submit(call, i, item) for i, item in enumerate(items)]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            if progress:
                latest = max(range(len(items)), key=lambda i: (0 < state[i][0] < 1, state[i][0]))
                progress(sum(f for f, _ in state) / max(len(items), 1), state[latest][1])
        return [f.result() for f in futures]
    finally:
        # a failure (or the caller's progress raising, as a Streamlit rerun does) drops the work not yet started
        pool.shutdown(wait=True, cancel_futures=True)
