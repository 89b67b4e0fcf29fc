"""The one-worker executor: each call runs in the calling thread, when it is submitted."""

from __future__ import annotations

from concurrent.futures import Future


class InlineExecutor:
    """Runs each call at once in the caller's thread (the baseline a pool is measured against)."""

    name = "inline"
    workers = 1

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:        # the caller's result() raises it, as a pool's future would
            future.set_exception(exc)
        return future
