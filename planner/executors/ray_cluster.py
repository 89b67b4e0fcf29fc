"""Simulations on a Ray cluster: an existing one by address, or a local runtime Ray starts (``--ray local``).

The planner package travels to a cluster's workers with each job (Ray's ``py_modules``), so a cluster needs only
Python and the planner's requirements; a local runtime's workers import this checkout itself. Results come back
through Ray's object store.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import threading
from concurrent.futures import Future
from pathlib import Path

from planner.errors import PlannerError, first_line

_LOCK = threading.Lock()
_CONNECTED: dict[str, RayExecutor] = {}
LOCAL_OBJECT_STORE_BYTES = 512 * 1024 * 1024     # a local runtime's shared memory: results are a few MB each


def _call(fn, args, kwargs) -> bytes:
    # pickled by hand: Ray would hand back numpy arrays as zero-copy views of its object store, pinning every
    # result a search keeps (hundreds) in shared memory until the store fills and spills to disk
    return pickle.dumps(fn(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse at once an address nothing answers on: Ray's own connect retries for minutes. ``auto`` (the
    cluster this machine belongs to) is left to Ray."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PlannerError(f"--ray {address!r}: expected 'local', 'auto' or HOST:PORT of a running cluster "
                           "(ray://HOST:10001 for Ray Client)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise PlannerError(f"--ray {address}: nothing answers there ({exc.strerror or exc}); expected 'local' or "
                           "the address of a running cluster (ray start --head)") from None


class RayExecutor:
    """Calls run as Ray tasks, one CPU each."""

    name = "ray"

    def __init__(self, address: str, workers: int):
        import ray

        self.address, self.workers = address, workers
        self._remote = ray.remote(num_cpus=1)(_call)

    @classmethod
    def connect(cls, address: str, workers: int | None = None) -> RayExecutor:
        """Join (or, for ``local``, start) the Ray runtime once per process; later calls reuse it."""
        with _LOCK:
            if address in _CONNECTED:
                return _CONNECTED[address]
            try:
                import ray
            except ImportError:
                raise PlannerError("--ray needs the ray package: pip install ray") from None
            import planner

            package = Path(planner.__file__).resolve().parent
            if address != "local":      # checked even with a runtime already up: an address is a promise
                _check_reachable(address)
            try:
                if not ray.is_initialized():
                    if address == "local":
                        # local workers import this very checkout (the same files: numba's cache, keyed by
                        # source path, then serves them the compiled loops instead of compiling anew)
                        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                            [str(package.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}}
                        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                                 object_store_memory=LOCAL_OBJECT_STORE_BYTES, runtime_env=env,
                                 logging_level=logging.WARNING, configure_logging=False)
                    else:
                        ray.init(address=address, runtime_env={"py_modules": [str(package)]}, log_to_driver=False,
                                 logging_level=logging.WARNING, configure_logging=False)
            except Exception as exc:     # Ray raises ConnectionError, RuntimeError, ValueError… by cause
                raise PlannerError(f"--ray {address}: cannot reach a Ray cluster ({first_line(exc)}); expected "
                                   "'local' or the address of a running cluster (ray start --head)") from None
            cpus = int(ray.cluster_resources().get("CPU", 1))
            executor = _CONNECTED[address] = cls(address, max(1, cpus))
            return executor

    def submit(self, fn, /, *args, **kwargs) -> Future:
        out: Future = Future()

        def unpack(done: Future) -> None:
            try:
                out.set_result(pickle.loads(done.result()))
            except BaseException as exc:        # the task's own exception, re-raised by the caller's result():
                # Ray wraps it (RayTaskError, whose text is the worker's traceback); its cause is the error raised
                out.set_exception(getattr(exc, "cause", None) or exc)
        self._remote.remote(fn, args, kwargs).future().add_done_callback(unpack)
        return out
