"""Printing for the CLI: one JSON object on stdout with ``--json`` (NaN/inf as null), progress on stderr."""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def emit(args, obj: dict, human: str) -> None:
    if args.json:
        print(json.dumps(clean(obj)))
    else:
        print(human)


def progress_printer(enabled: bool):
    if not enabled:
        return None
    last = {"pct": -10}

    def show(fraction: float, message: str) -> None:
        pct = int(fraction * 100)
        if pct >= last["pct"] + 10 or fraction >= 1.0:
            last["pct"] = pct
            print(f"[{pct:3d}%] {message}", file=sys.stderr, flush=True)
    return show
