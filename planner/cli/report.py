"""The ``report`` command: build a capacity report, save it under a new id, write the chosen twin to a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from planner.cli.output import progress_printer
from planner.cli.sim import add_recommend_flags, recommend_inputs
from planner.errors import PlannerError
from planner.traces import store

FORMATS = ("html", "md", "json")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder: never a half-written report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)            # mkstemp's 0600 would keep a shared report from its readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_report(args) -> None:
    from planner.report.build import build_report
    from planner.report.store import publish_report

    fmt = args.format or (Path(args.output).suffix.lstrip(".").lower() if Path(args.output).suffix else "html")
    if fmt not in FORMATS:
        raise PlannerError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    model, gpu, options, cost = recommend_inputs(args)
    con = store.open_store(args.db)
    body = build_report(con, args.trace, model, gpu, options, cost, progress_printer(not args.quiet))
    saved = publish_report(con, body)
    path = Path(args.output).resolve()
    write_atomically(path, {"html": saved.html, "md": saved.markdown, "json": json.dumps(body)}[fmt])
    print(json.dumps({"path": str(path), "report_id": saved.report_id, "format": fmt, "title": body["title"]}))


def add_report_command(command) -> None:
    p = command("report", "a self-contained capacity report (HTML, Markdown or JSON), saved under a shareable id")
    add_recommend_flags(p)
    p.add_argument("-o", "--output", required=True, help="file to write")
    p.add_argument("--format", choices=FORMATS, help="default: from the file's extension, else html")
    p.set_defaults(func=cmd_report)
