"""LLM serving capacity planner: the functional core (never imports streamlit)."""

import hashlib
import os
from pathlib import Path

__version__ = "0.1.0"
JIT_SOURCES = ("sim/cost_model.py", "sim/kernel.py", "sim/engines/vllm_v0.py", "sim/engines/static.py",
               "sim/routers/base.py", "sim/routers/rule.py",
               "sim/kv_pool.py", "sim/prefix.py", "sim/decode_runs.py", "sim/step_spec.py",
               "limits.py", "workload/reuse.py")


def _numba_cache_dir() -> None:
    # numba's on-disk cache is invalidated by a change to the cached function's own file only, not to the jitted
    # functions it inlines from other modules (the cost model inside the engine loops): a cache per hash of every
    # jitted source keeps an edited cost model from running stale compiled code
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(b"".join((root / s).read_bytes() for s in JIT_SOURCES)).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    os.environ["NUMBA_CACHE_DIR"] = str(base / "llm-capacity-planner" / "numba" / digest)


_numba_cache_dir()
