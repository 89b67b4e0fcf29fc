"""Command-line interface: ``python -m planner COMMAND … --json`` (see ../shared/CONTRACT.md).

With ``--json`` a command prints exactly one JSON object on stdout; progress goes to stderr. Failures print one
``error: …`` line on stderr and exit non-zero, never a traceback (set PLANNER_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from planner.capacity.memory import KV_DTYPE_BYTES
from planner.cli.output import emit as _emit
from planner.cli.output import progress_printer as _progress_printer
from planner.cli.report import add_report_command
from planner.cli.scenario_args import add_scenario_arguments, scenario_from_args
from planner.cli.serve import add_serve_command
from planner.cli.sim import add_shared_prefix_flag, add_simulation_commands
from planner.errors import PlannerError
from planner.jsonable import clean
from planner.output_files import writable_path, write_atomically
from planner.traces import store
from planner.traces.sources import FORMATS, Dialect
from planner.traces.store_path import store_path


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PlannerError(f"{flag} {item!r}: expected FIELD=VALUE")
        out[key.strip()] = value.strip()
    return out


def cmd_ingest(args) -> None:
    from planner.traces.ingest import ingest_file

    if (args.path is None) == (args.summary is None):
        raise PlannerError("ingest: expected a trace PATH or --summary FOLDER (one of the two)")
    if args.summary is not None:
        from planner.traces.summary import ingest_summary

        result = ingest_summary(store.open_store(args.db), args.summary, name=args.name)
        human = (f"{'already stored as' if result.duplicate_of else 'stored'} summary {result.name} "
                 f"({result.trace_id}): {result.rows:,} requests from {result.files} files")
        _emit(args, result.as_dict(), human)
        return
    dialect = None
    if args.delimiter is not None or args.quote is not None or args.no_header:
        try:
            delim = args.delimiter.encode().decode("unicode_escape") if args.delimiter is not None else ","
        except UnicodeDecodeError:
            delim = ""
        if not 1 <= len(delim.encode()) <= 4 or delim in "\r\n":
            raise PlannerError(f"--delimiter {args.delimiter!r}: expected one character (or up to 4 bytes) other "
                               "than a line break, such as , ; | or \\t")
        quote = args.quote if args.quote is not None else '"'
        if len(quote) > 1 or (quote and quote in delim):
            raise PlannerError(f"--quote {args.quote!r}: expected one character other than the delimiter, or '' "
                               "for none")
        dialect = Dialect(delimiter=delim, quote=quote, escape=quote, header=not args.no_header)
    con = store.open_store(args.db)
    result = ingest_file(con, args.path, name=args.name, fmt=args.format, overrides=_pairs(args.map, "--map"),
                         unit_overrides=_pairs(args.unit, "--unit"), dialect=dialect,
                         on_progress=_progress_printer(not args.quiet))
    obj = result.as_dict()
    human = (f"{'already stored as' if result.duplicate_of else 'stored'} {result.name} ({result.trace_id}): "
             f"{result.rows} rows, {result.failed} failed, {result.rejected} rejected; format {result.format}, "
             f"layout {result.layout}; mapping {result.mapping}; units {result.units}"
             + "".join(f"\n{note}" for note in result.notes if note.startswith("the glob ")))
    _emit(args, obj, human)


def cmd_split(args) -> None:
    from planner.traces.split import split_by_model

    result = split_by_model(store.open_store(args.db, create=False), args.trace, args.model, name=args.name,
                            on_progress=_progress_printer(not args.quiet))
    _emit(args, result.as_dict(), f"{'already stored as' if result.duplicate_of else 'stored'} {result.name} "
                                  f"({result.trace_id}): {result.rows:,} rows, {result.failed:,} failed; "
                                  + result.notes[0])


def cmd_traces(args) -> None:
    # listing creates no store: where none is, there are no traces
    traces = store.list_traces(store.open_store(args.db)) if store_path(args.db).exists() else []
    obj = {"traces": [{"trace_id": t.trace_id, "name": t.name, "rows": t.rows, "created": t.created,
                       "failed": t.failed, "rejected": t.rejected, "format": t.format, "layout": t.layout,
                       "source_file": t.source_file} for t in traces]}
    human = "\n".join(f"{t.trace_id}  {t.name:30s} {t.rows:>10d} rows  {t.created}" for t in traces) or "no traces"
    _emit(args, obj, human)


def cmd_stats(args) -> None:
    from planner.workload.stats import trace_stats

    con = store.open_store(args.db, create=False)
    obj = trace_stats(con, args.trace)
    _emit(args, obj, json.dumps(clean(obj), indent=2))


def cmd_fit(args) -> None:
    from planner.workload.fits import fit_report

    con = store.open_store(args.db, create=False)
    obj = fit_report(con, args.trace, args.field, cap=args.cap, detect=not args.no_detect)
    censored = (f"censored at {obj['censored_at']} ({obj['censored_fraction']:.2%})" if obj["censored_at"] is not None
                else "not censored")
    lines = [f"{args.field}: n={obj['n']}, {censored}; best {obj['best']}"]
    lines += [f"  {c['family']:18s} AIC {c['aic'] if c['aic'] is not None else '—':>14} KS "
              f"{c['ks'] if c['ks'] is not None else '—'} {c.get('error') or c['params']}" for c in obj["candidates"]]
    _emit(args, obj, "\n".join(lines))


def cmd_workload(args) -> None:
    from planner.workload.tables import DEFAULT_BUCKET_EDGES, parse_bucket_edges, workload_report

    edges = parse_bucket_edges(args.buckets) if args.buckets is not None else DEFAULT_BUCKET_EDGES
    con = store.open_store(args.db, create=False)
    kv_bytes = None
    if args.model:
        from planner.capacity.memory import kv_bytes_per_token
        from planner.catalog.presets import get_model

        kv_bytes = kv_bytes_per_token(get_model(args.model), args.kv_cache_dtype)
    obj = workload_report(con, args.trace, window_s=args.window, edges=edges, shared_prefix=args.shared_prefix,
                          block_size=args.block_size, kv_bytes_per_token=kv_bytes)
    _emit(args, obj, json.dumps(clean(obj), indent=2))


def cmd_memory(args) -> None:
    from planner.capacity.report import capacity_report

    scenario = scenario_from_args(args)
    lengths, reuse = None, None
    if args.trace:
        from planner.traces.queries import request_lengths
        from planner.workload.tables import trace_reuse

        con = store.open_store(args.db, create=False)
        lengths = request_lengths(con, store.get_trace(con, args.trace).trace_id)
        reuse = trace_reuse(con, args.trace, shared_prefix=args.shared_prefix, block_size=scenario.block_size)
    elif args.shared_prefix:
        raise PlannerError("--shared-prefix declares a trace's shared prefix: give --trace too")
    fit = None
    if args.fit:
        count, _, tokens = args.fit.partition("x")
        try:
            fit = (int(count), int(tokens))
        except ValueError as exc:
            raise PlannerError(f"--fit {args.fit!r}: expected SEQUENCESxTOKENS such as 32x4096") from exc
    report = capacity_report(scenario, lengths=lengths, fit=fit, reuse=reuse)
    for problem in scenario.memory_problems:        # the plan is still shown: how far it is from fitting
        print(f"warning: {problem}", file=sys.stderr)
    plan, gib = report.plan, 1024**3
    human = (f"{scenario.model.name} on {scenario.tp}x {scenario.gpu.label}: {plan.param_count / 1e9:.2f}B params, "
             f"weights {plan.weights_bytes / gib:.1f} GiB; KV {plan.kv_bytes_per_token:,} B/token "
             f"({plan.kv_bytes_per_token_per_gpu:,} per GPU); pool {plan.kv_pool_bytes / gib:.2f} GiB = "
             f"{plan.num_blocks:,} blocks of {plan.block_size} = {plan.kv_capacity_tokens:,} tokens per GPU; "
             f"maximum concurrency {plan.max_concurrency:.2f}x for {plan.max_model_len:,} tokens per request; memory "
             f"profiled as vLLM {scenario.release.label} does (--vllm-version {scenario.overheads.vllm_version})")
    if report.trace is not None:
        t = report.trace
        human += (f"\n{args.trace}: requests of {t['mean_final_tokens']:,.0f} tokens (mean, prompt and output) fit "
                  f"{t['concurrency_at_mean']:,.1f} at once, of {t['p95_final_tokens']:,.0f} (p95) "
                  f"{t['concurrency_at_p95']:,.1f}; max_num_seqs {t['max_num_seqs']:,}: the {t['binding']} binds")
    if report.fit_check is not None:
        f = report.fit_check
        human += "".join(f"\n--fit {f.sequences}x{f.tokens}: TP {row['tp']}: {row['reason']}" for row in f.tried)
        human += (f"\n--fit {f.sequences}x{f.tokens}: TP {f.tp} holds them ({f.gpus} GPUs)" if f.tp is not None else
                  f"\n--fit {f.sequences}x{f.tokens}: no TP degree tried holds them")
    _emit(args, report.to_dict(), human)


def cmd_rejects(args) -> None:
    target = writable_path("-o", args.output) if args.output else None
    if target and target.suffix.lower() != ".csv":
        raise PlannerError(f"-o {args.output}: rejects are written as CSV; expected a file name ending .csv")
    con = store.open_store(args.db, create=False)
    info = store.get_trace(con, args.trace)
    rows = store.rejects_of(con, info.trace_id)
    if target:
        write_atomically(target, store.rejects_csv(con, info.trace_id))
    obj = {"trace_id": info.trace_id, "rejected": len(rows), "path": args.output,
           "rejects": [] if args.output else [{"row": r, "raw": raw, "reason": why} for r, raw, why in rows]}
    human = "\n".join(f"{r}\t{why}\t{raw}" for r, raw, why in rows) or "no rejected rows"
    _emit(args, obj, f"wrote {len(rows)} rejects to {args.output}" if args.output else human)


class _Parser(argparse.ArgumentParser):
    """argparse, with a malformed command line reported as one ``error: …`` line (the contract's form), not a
    usage block."""

    def _get_values(self, action, arg_strings):
        # argparse drops a value of "--" (its end-of-options marker) and hands the flag an empty list, untyped
        if action.option_strings and arg_strings == ["--"]:
            raise argparse.ArgumentError(action, "'--': expected a value")
        return super()._get_values(action, arg_strings)

    def error(self, message: str):
        self.exit(2, f"error: {self.prog.removeprefix('python -m planner ')}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m planner", description="LLM serving capacity planner")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        p.add_argument("--db", default=None, help="DuckDB store (default: $PLANNER_DB, else the user data dir)")
        return p

    p = command("ingest", "ingest a request log (CSV/TSV/JSONL/JSON/Parquet, optionally .gz/.zst)")
    p.add_argument("path", nargs="?", help="a file, a directory (every file under it; names starting with '.' or "
                   "'_' skipped) or a quoted glob ('logs/*/part-*.parquet'): several files of one layout are one trace")
    p.add_argument("--summary", metavar="FOLDER", help="instead of a log, the tables planner/traces/summary.sql "
                   "produced from one (in DuckDB, Spark SQL or Trino; docs/SUMMARY.md)")
    p.add_argument("--name", help="trace name (default: the file's or the directory's name)")
    p.add_argument("--format", default="auto", choices=("auto",) + FORMATS)
    p.add_argument("--map", action="append", metavar="FIELD=COLUMN",
                   help="use COLUMN for a canonical field (repeatable; FIELD= with no column unmaps it)")
    p.add_argument("--unit", action="append", metavar="FIELD=UNIT",
                   help="unit of arrival (s, ms, us, ns, datetime) or of ttft_ms/tpot_ms/e2e_ms (s, ms, us)")
    p.add_argument("--delimiter", help="CSV delimiter instead of the sniffed one (\\t for tab)")
    p.add_argument("--quote", help="CSV quote character instead of the sniffed one")
    p.add_argument("--no-header", action="store_true", help="the CSV has no header row (columns column0, …)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_ingest)

    p = command("split", "store one server's requests of a trace whose model column names several as a trace of "
                         "their own")
    p.add_argument("trace", help="trace id or name")
    p.add_argument("--model", required=True, help="the model whose requests to keep, as the trace's model column "
                                                  "writes it")
    p.add_argument("--name", help="the new trace's name (default: TRACE-MODEL)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_split)

    p = command("traces", "list stored traces")
    p.set_defaults(func=cmd_traces)

    p = command("stats", "exact percentiles and arrival statistics of a trace")
    p.add_argument("trace", help="trace id or name")
    p.set_defaults(func=cmd_stats)

    p = command("fit", "fit length or inter-arrival distributions (censored MLE, ranked by AIC)")
    p.add_argument("trace", help="trace id or name")
    p.add_argument("--field", required=True, choices=("input_tokens", "output_tokens", "total_tokens",
                                                      "interarrival"))
    p.add_argument("--cap", type=float, help="a known cap (max_tokens, context length): values at or above it "
                   "are censored there")
    p.add_argument("--no-detect", action="store_true", help="do not look for a cap in the data")
    p.set_defaults(func=cmd_fit)

    p = command("workload", "grouped percentiles, joint view, latency by length bucket and arrival statistics")
    p.add_argument("trace", help="trace id or name")
    p.add_argument("--window", type=float, help="time-window width in seconds (default: 6-24 windows)")
    p.add_argument("--buckets", help="length bucket edges, comma-separated (default 512,2048)")
    add_shared_prefix_flag(p)
    p.add_argument("--block-size", type=int, default=16, help="KV block size of the prefix-reuse analysis")
    p.add_argument("--model", help="give the prefix-reuse curve in GiB of this model's KV cache (a preset or a "
                                   "config.json)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=tuple(KV_DTYPE_BYTES),
                   help="with --model: the KV cache dtype")
    p.set_defaults(func=cmd_workload)

    p = command("memory", "KV bytes per token, vLLM's memory budget, KV capacity and maximum concurrency")
    add_scenario_arguments(p)
    p.add_argument("--trace", help="add this trace's concurrency, reservation trade-off, padding, preemption")
    p.add_argument("--fit", help="SEQUENCESxTOKENS: smallest TP that holds the model with room for them")
    add_shared_prefix_flag(p)
    p.set_defaults(func=cmd_memory)

    add_simulation_commands(command)
    add_report_command(command)
    add_serve_command(command)

    p = command("rejects", "show or export (-o FILE.csv) a trace's rejected rows")
    p.add_argument("trace", help="trace id or name")
    p.add_argument("-o", "--output", help="write the rejects as CSV to this file")
    p.set_defaults(func=cmd_rejects)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.db is None and os.environ.get("PLANNER_DB"):
        args.db = os.environ["PLANNER_DB"]
    try:
        args.func(args)
    except PlannerError as exc:
        # one line, whatever a library put in the message it quotes
        print("error: " + " / ".join(line.strip() for line in str(exc).splitlines() if line.strip()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader stopped reading (`rejects T | head`): what it read is what it wanted, nothing failed here;
        # stdout goes to /dev/null so the exit's own flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 - the contract forbids tracebacks on the console
        if os.environ.get("PLANNER_DEBUG"):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"error: {type(exc).__name__}: {first} (set PLANNER_DEBUG=1 for details)", file=sys.stderr)
        return 1
    return 0
