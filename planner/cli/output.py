"""Printing for the CLI: one JSON object on stdout with ``--json`` (NaN/inf as null), progress on stderr."""

from __future__ import annotations

import json
import sys

from planner.jsonable import clean


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
