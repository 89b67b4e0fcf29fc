"""Plain JSON from planner results: numpy values become Python ones, NaN and inf become null."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# CONTRACT.md's percentile block: these quantiles of the data, with its mean and max
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}


def clean(obj: Any) -> Any:
    """A JSON-safe copy: numpy scalars and arrays as Python values and lists, tuples and sets as lists, NaN and
    inf as None; dicts and lists recursively."""
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return clean(obj.tolist())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [clean(v) for v in obj]
    return obj
