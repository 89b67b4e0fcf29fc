"""The ``report`` command: build a capacity report once, write the chosen twins to files, save it under a new id."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from planner.cli.output import progress_printer
from planner.cli.sim import add_recommend_flags, executor_from_args, recommend_inputs
from planner.errors import PlannerError
from planner.output_files import writable_path, write_atomically
from planner.traces import store

FORMATS = ("html", "md", "json")


def _targets(args) -> list[tuple[Path, str]]:
    """Each ``-o`` file with its format (``--format``, else its extension, else html), checked before any work."""
    if args.format and len(args.output) > 1:
        raise PlannerError("--format names one format: with several -o files, each takes its extension's")
    out = []
    for name in args.output:
        path = writable_path("-o", name)
        suffix = path.suffix.lstrip(".").lower()
        if args.format and suffix in FORMATS and suffix != args.format:
            raise PlannerError(f"--format {args.format} with -o {name}, a .{suffix} name: expected a file name "
                               f"ending .{args.format}, or no --format")
        fmt = args.format or suffix or "html"
        if fmt not in FORMATS:
            raise PlannerError(f"-o {name}: .{suffix} is no report format; expected one of {', '.join(FORMATS)} "
                               "(the extension, or --format)")
        if any(path.resolve() == seen.resolve() for seen, _ in out):
            raise PlannerError(f"-o {name} is given twice; expected each report file once")
        out.append((path, fmt))
    return out


def cmd_report(args) -> None:
    from planner.report.build import build_report
    from planner.report.render import twins
    from planner.report.store import publish_report

    targets = _targets(args)
    scenario, options = recommend_inputs(args)
    con = store.open_store(args.db, create=False)
    report = build_report(con, args.trace, scenario, options, progress_printer(not args.quiet),
                          executor=executor_from_args(args))
    for warning in report.assumptions["trace_warnings"]:        # the calibration's were printed with the scenario
        print(f"warning: {warning}", file=sys.stderr)
    texts = twins(report)
    for path, fmt in targets:      # every file is written before the report is saved: never one without the other
        write_atomically(path, texts[fmt])
    saved = publish_report(con, report, texts=texts)
    print(json.dumps({"path": str(targets[0][0]), "paths": [str(p) for p, _ in targets], "report_id": saved.report_id,
                      "format": targets[0][1], "title": saved.title}))


def add_report_command(command) -> None:
    p = command("report", "a self-contained capacity report (HTML, Markdown or JSON), saved under a shareable id")
    add_recommend_flags(p)
    p.add_argument("-o", "--output", required=True, action="append",
                   help="file to write (repeatable: one build, several twins, e.g. -o r.html -o r.md -o r.json)")
    p.add_argument("--format", choices=FORMATS, help="default: from the file's extension, else html")
    p.set_defaults(func=cmd_report)
