"""CLI commands of the cost model, the simulator and the recommender: ``step``, ``simulate``, ``calibrate``,
``recommend`` (CONTRACT.md). Each takes the one scenario argument group."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from planner.cli.output import emit as _emit
from planner.cli.output import progress_printer as _progress_printer
from planner.cli.scenario_args import add_scenario_arguments, scenario_from_args
from planner.cli.values import FINITE, POSITIVE_MS, SCENARIO_INT, whole
from planner.errors import PlannerError
from planner.limits import MAX_REQUESTS
from planner.output_files import writable_path
from planner.sim.routers import ROUTERS
from planner.traces import store


def cmd_step(args) -> None:
    from planner.sim.cost_model import predict_step
    from planner.sim.step_spec import beyond_limits, parse_decode, parse_prefill

    prefills = [chunk for spec in args.prefill or [] for chunk in parse_prefill(spec)]
    decodes = [parse_decode(spec) for spec in args.decode or []]
    scenario = scenario_from_args(args)
    try:
        scenario.settings
    except PlannerError as exc:     # the step's kernels still have a time (the contract's answer); say it never runs
        print(f"warning: {exc}: vLLM would not start, so this step's time is its kernels' alone", file=sys.stderr)
    obj = predict_step(scenario, prefills, decodes)
    if beyond := beyond_limits(scenario, prefills, decodes):
        print(f"warning: this step holds {' and '.join(beyond)}: the server never runs it, so its time is "
              "extrapolated", file=sys.stderr)
    _emit(args, obj, f"{obj['step_ms']:.3f} ms ({obj['bound']}-bound): compute {obj['compute_ms']:.3f} ms, memory "
                     f"{obj['memory_ms']:.3f} ms, overheads {obj['overhead_ms']:.3f} ms")


def _workload(args, scenario):
    """The replay the ``simulate`` flags ask for: a stored trace (time-scaled, at a rate, or fitted) or a
    synthetic spec; a trace several models served, replayed whole on the scenario's, is warned of."""
    from planner.sim.workload import synthetic
    from planner.workload.replay import from_trace, served_models, several_servers

    if bool(args.trace) == bool(args.synthetic):
        raise PlannerError("give exactly one of --trace TRACE or --synthetic SPEC")
    if args.rate_scale is not None and args.qps is not None:
        raise PlannerError("give --rate-scale or --qps, not both")
    if args.trace_model is not None and not (args.trace and not args.fitted):
        raise PlannerError("--trace-model keeps one server's requests of a --trace replay (not --fitted or "
                           "--synthetic)")
    if args.trace and args.fitted:
        from planner.sim.workload import from_fits
        from planner.workload.fits import fit_length_field

        if args.qps is None:
            raise PlannerError("--fitted draws new requests: give their rate with --qps")
        con = store.open_store(args.db, create=False)
        tid = store.get_trace(con, args.trace).trace_id
        return from_fits(fit_length_field(con, tid, "input_tokens"), fit_length_field(con, tid, "output_tokens"),
                         args.requests, args.qps, args.arrival_cv, args.seed).with_shared_prefix(args.shared_prefix)
    if args.trace:
        con = store.open_store(args.db, create=False)
        workload = from_trace(con, args.trace, rate_scale=args.rate_scale, qps=args.qps, seed=args.seed,
                              shared_prefix=args.shared_prefix, served_by=args.trace_model)
        if args.trace_model is None and (note := several_servers(served_models(con, args.trace), scenario.model)):
            print(f"warning: {note}; or replay one server's with --trace-model NAME", file=sys.stderr)
        return workload
    if args.shared_prefix:
        raise PlannerError("--shared-prefix declares a trace's shared prefix; a synthetic spec takes "
                           "prefix=TOKENS:SHARE")
    return synthetic(args.synthetic + ("" if "seed=" in args.synthetic else f",seed={args.seed}"))


def cmd_simulate(args) -> None:
    from planner.sim.fleet import Fleet
    from planner.sim.pool_margin import pool_margin, queue_holds
    from planner.sim.results import goodput, summarize
    from planner.sim.run import check_router, default_router, simulate

    scenario = scenario_from_args(args)        # a value that makes no sense fails here, before any work
    fleet = Fleet(args.replicas, args.router or default_router(scenario.engine))
    if fleet.replicas > 1:
        check_router(scenario.engine, fleet.router)
    workload = _workload(args, scenario)
    result = simulate(workload, scenario, fleet=fleet, progress=_progress_printer(not args.json))
    summary = summarize(result)
    obj = summary.to_dict()
    if args.slo_ttft_ms is not None or args.slo_tpot_ms is not None:
        obj["goodput_rps"] = goodput(result, args.slo_ttft_ms, args.slo_tpot_ms)
    margin = None if args.no_kv_margin else pool_margin(workload, scenario, fleet=fleet, holds=queue_holds(result),
                                                        progress=_progress_printer(not args.json))
    obj["kv_margin"] = margin.to_dict() if margin else None
    s = summary
    fleet_text = f" on {s.replicas} replicas ({s.router})" if s.replicas > 1 else ""
    _emit(args, obj, f"{s.completed:,}/{s.requests:,} requests{fleet_text} in {s.duration_s:.1f} s simulated "
                     f"({s.sim_wall_s:.2f} s wall): TTFT p50/p99 {_ms(s.ttft_ms.p50, 0)}/{_ms(s.ttft_ms.p99, 0)} "
                     f"ms, TPOT p50/p99 {_ms(s.tpot_ms.p50, 1)}/{_ms(s.tpot_ms.p99, 1)} ms, "
                     f"{s.throughput_tok_s['output']:,.0f} output tok/s, {s.preemptions} preemptions"
                     f", queue {s.verdict} (p99 {s.queue_ms.p99 or 0:,.0f} ms)"
                     + (f"\n{s.rejection_note}" if s.rejection_note else "")
                     + (f"\n{s.window_note}" if s.window_note else "")
                     + (f"\n{margin.sentence()}" if margin else ""))


def _ms(value: float | None, digits: int) -> str:
    """A latency for the human line; none measured (every request rejected, one-token outputs) reads as a dash."""
    return "—" if value is None else f"{value:,.{digits}f}"


def cmd_calibrate(args) -> None:
    from planner.sim import calibration, calibration_file, trace_calibration

    if bool(args.points) == bool(args.trace):
        raise PlannerError("give exactly one of --points CSV or --trace TRACE")
    target = writable_path("-o", args.output)          # before the fit, which can take minutes on a trace
    if args.points and target.exists() and Path(args.points).exists() and target.samefile(args.points):
        raise PlannerError(f"-o {args.output} is the --points file: the calibration would overwrite the measured "
                           "iterations; expected another path")
    scenario = scenario_from_args(args)
    if args.points:
        report = calibration.fit_points(scenario, calibration.read_points(args.points))
    else:
        from planner.workload.replay import measured_latencies

        if not 0 < args.holdout < 1:
            raise PlannerError(f"--holdout {args.holdout}: expected the share of the trace to hold out, in (0, 1)")
        measured = measured_latencies(store.open_store(args.db, create=False), args.trace, scenario.model,
                                      args.trace_model)
        report = trace_calibration.fit_measured(scenario, measured, args.holdout, _progress_printer(not args.json))
    fitted = calibration_file.save(report, target, scenario)
    obj = {"path": args.output, "params": report["params"], "fitted": report["fitted"], "mape": report["mape"],
           "max_abs_error": report["max_abs_error"], "source": report["source"], "residuals": report["residuals"],
           "warnings": report["warnings"]}
    lines = [f"wrote {args.output}: " + ", ".join(f"{k}={report['params'][k]:.4g}" for k in report["fitted"])
             + f" (the rest as the scenario gives them); MAPE {report['mape']:.2%}"]
    for split in ("in_sample", "held_out"):
        if split in report:
            obj[split] = report[split]
            part = report[split]
            summary = ("no metric measured" if part["median_abs_error"] is None else
                       f"median |error| {part['median_abs_error']:.1%}, bias {part['bias']:+.1%}")
            lines.append(f"{split.replace('_', '-')} ({part['requests']:,} requests): {summary}; predicted/measured "
                         + ", ".join(
                f"{r['metric']} {r['predicted_ms']:,.1f}/{r['measured_ms']:,.1f} ms ({r['error']:+.0%})"
                for r in part["metrics"] if math.isfinite(r["error"])))
    # the parameters as they apply on this server (what the file leaves to the GPU and engine, filled in)
    obj["resolved"] = {k: v for k, v in fitted.resolved(scenario).as_dict().items() if k not in ("source", "fitted_on")}
    if "cross_validated" in report:          # --points: null where too few steps to leave any out
        cv = obj["cross_validated"] = report["cross_validated"]
        if cv:
            lines.append(f"cross-validated ({cv['folds']} folds, each row predicted by a fit without it): median "
                         f"|error| {cv['median_abs_error']:.1%}, worst {cv['worst_abs_error']:.1%}, "
                         f"bias {cv['bias']:+.1%}")
    lines += [f"warning: {w}" for w in report["warnings"]]
    _emit(args, obj, "\n".join(lines))


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError as exc:
        raise PlannerError(f"{flag} {text!r}: expected integers such as 1,2,4") from exc


def recommend_inputs(args):
    """``(Scenario, RecommendOptions)`` from the flags :func:`add_recommend_flags` registers."""
    from planner.recommend.plan import RecommendOptions, searched_calibration_warnings

    options = RecommendOptions(
        slos=tuple(args.slo or ()), headroom=args.headroom,
        tp_options=_int_list(args.tp_search, "--tp-search") if args.tp_search else (),
        max_new_tokens_options=tuple(args.max_new_tokens_options.split(",")) if args.max_new_tokens_options else (),
        details=getattr(args, "details", True), router=args.router, shared_prefix=args.shared_prefix,
        **{k: getattr(args, k) for k in ("max_queue_s", "resamples", "growth") if getattr(args, k) is not None})
    scenario = scenario_from_args(args)
    # the TP degrees and GPUs searched besides the scenario's own (whose warnings are printed already)
    for warning in searched_calibration_warnings(scenario, options, getattr(args, "gpu_options", None) or ""):
        if warning not in scenario.calibration_warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return scenario, options


def executor_from_args(args):
    """The executor ``--workers`` / ``--ray`` ask for (:func:`planner.executors.get_executor`)."""
    from planner.executors import get_executor

    return get_executor(args.workers, args.ray)


def class_line(r) -> str:
    """One class of ``recommend`` as text. An infeasible class has no rate, queue or fleet to state (the report and
    the page blank them too; its figures are its closest configuration's at a light load): its command is that
    configuration's."""
    if not r.feasible:
        return f"{r.name:12s} NO  no configuration meets it; closest:  {r.launch_command}"
    fleet = (f" ({r.fleet.confident_replicas} with {r.fleet.confidence:.0%} confidence, {r.router})"
             if r.fleet and r.fleet.confident_replicas else f" ({r.router})" if r.fleet else "")
    from planner.recommend.table import achieved_text

    own = achieved_text(r.achieved)
    return (f"{r.name:12s} ok  qps/replica {r.max_qps_per_replica:.2f} ({r.verdict}, queue p99 "
            f"{r.queue_ms['p99']:,.0f} ms{', ' + own if own else ''}) replicas {r.replicas_for_peak}{fleet}  "
            f"{r.launch_command}")


def cmd_recommend(args) -> None:
    from planner.recommend.plan import plan_recommendation
    from planner.workload.replay import from_trace, served_models, several_servers

    scenario, options = recommend_inputs(args)
    executor = executor_from_args(args)
    if args.gpu_options is not None:
        from planner.recommend.costs import parse_gpu_options

        parse_gpu_options(args.gpu_options)      # an unknown GPU or a bad price fails before any work
    con = store.open_store(args.db, create=False)
    workload = from_trace(con, args.trace, shared_prefix=options.shared_prefix)
    note = several_servers(served_models(con, args.trace), scenario.model)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    progress = _progress_printer(not args.quiet)
    if args.gpu_options:
        from planner.recommend.costs import compare_gpus

        comparison = compare_gpus(workload, scenario, options, args.gpu_options, progress, executor)
        rec = comparison.recommendation
    else:
        comparison = None
        rec = plan_recommendation(workload, scenario, options, progress, executor)
    lines = [class_line(r) for r in rec.classes]
    if comparison:
        lines += comparison.lines()
    if rec.rejection_note:      # a warning, as the several-servers one: the rates above rest on it
        print(f"warning: {rec.rejection_note}", file=sys.stderr)
    obj = {"trace": args.trace, **rec.to_dict()}
    if comparison:
        obj["gpu_options"] = comparison.to_dict()
    _emit(args, obj, "\n".join(lines))


def add_shared_prefix_flag(p) -> None:
    """``--shared-prefix``: a prefix identity declared for a trace that carries none."""
    p.add_argument("--shared-prefix", metavar="TOKENS[:SHARE]",
                   help="declare that SHARE (default 1) of the requests begin with the same TOKENS tokens (a system "
                        "prompt), for a trace without hash_ids or sessions")


def add_recommend_flags(p) -> None:
    """The trace, scenario and search flags ``recommend`` and ``report`` share."""
    p.add_argument("trace", help="trace id or name")
    add_scenario_arguments(p)
    p.add_argument("--slo", action="append", metavar="NAME:METRIC<VALUE",
                   help="e.g. chat:ttft_p99<300, chat:ttft<200,tpot<50@90%% (attainment share) or "
                        "batch:throughput (repeatable); default ttft_p99<200, tpot_p99<50, throughput")
    p.add_argument("--headroom", type=FINITE, default=1.0,
                   help="size the fleet for the trace at its own rate times this (default 1: its own rate)")
    p.add_argument("--max-queue-s", type=FINITE,
                   help="every class's bound on p99 queueing delay, throughput included (default 5 s, as "
                        "Vidur's capacity search)")
    p.add_argument("--router", help="the router the fleet sizing assumes: " + ", ".join(ROUTERS)
                   + " (default least-loaded; round-robin for vllm-v0 and static)")
    p.add_argument("--resamples", type=SCENARIO_INT,
                   help="block-bootstrap resamples (whole minutes) behind the replica count's 90%% confidence "
                        "(default 20; 0: none)")
    p.add_argument("--growth", type=FINITE, help="what-if: replicas for the traffic grown by this (default 1.5)")
    p.add_argument("--tp-search", help="compare these tensor-parallel degrees (e.g. 1,2,4) by requests/s per GPU")
    add_shared_prefix_flag(p)
    p.add_argument("--max-new-tokens-options", metavar="none,p99,p95",
                   help="compare max_new_tokens caps (none, integers, or percentiles of the trace's outputs)")
    p.add_argument("--workers", type=SCENARIO_INT, help="local worker processes the search's simulations run on "
                   "(default: one per core; 1: in this process)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the simulations on a Ray cluster at ADDRESS instead "
                   "('local' starts a local Ray runtime); the answer is the same")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_simulation_commands(command) -> None:
    """Register ``step``, ``simulate``, ``calibrate`` and ``recommend`` with the CLI's ``command(name, help)``
    factory."""
    p = command("step", "predicted time of one engine iteration (roofline cost model)")
    add_scenario_arguments(p)
    p.add_argument("--prefill", action="append", metavar="SPEC",
                   help="TOKENS, TOKENSxCOUNT or TOKENS@CONTEXT (repeatable)")
    p.add_argument("--decode", action="append", metavar="COUNTxCONTEXT", help="decoding sequences (repeatable)")
    p.set_defaults(func=cmd_step)

    p = command("simulate", "replay a trace or a synthetic workload through a scheduler on a GPU")
    add_scenario_arguments(p)
    p.add_argument("--trace", help="trace id or name")
    p.add_argument("--synthetic", help="requests=N,input=LEN,output=LEN,qps=Q[,arrival=poisson|gamma:CV][,seed=N]")
    p.add_argument("--rate-scale", type=FINITE, help="replay the trace this many times faster")
    p.add_argument("--qps", type=FINITE, help="replay the trace at this mean request rate")
    p.add_argument("--seed", type=whole("a non-negative whole number", low=0, high=2**63 - 1), default=0)
    p.add_argument("--fitted", action="store_true",
                   help="with --trace: draw new requests from the trace's fitted length distributions at --qps")
    p.add_argument("--trace-model", metavar="NAME",
                   help="with --trace: replay only the requests whose model column is NAME (one server's traffic, "
                        "where the trace names several)")
    p.add_argument("--requests", default=10_000, help="requests to draw with --fitted",
                   type=whole(f"a whole number of requests from 1 to {MAX_REQUESTS:,}", low=1, high=MAX_REQUESTS))
    p.add_argument("--arrival-cv", type=FINITE, default=1.0, help="inter-arrival CV with --fitted (1: Poisson)")
    p.add_argument("--slo-ttft-ms", type=POSITIVE_MS, help="report goodput: requests/s meeting this TTFT")
    p.add_argument("--slo-tpot-ms", type=POSITIVE_MS, help="report goodput: requests/s meeting this TPOT")
    p.add_argument("--replicas", type=SCENARIO_INT, default=1,
                   help="replicas of the scenario behind one router (default 1)")
    p.add_argument("--router", help="how a fleet's requests are spread: " + ", ".join(ROUTERS)
                   + " (default least-loaded; round-robin for vllm-v0 and static)")
    p.add_argument("--no-kv-margin", action="store_true",
                   help="skip the KV-pool margin (replays at other pools to find where the queue's verdict flips; "
                        "about eight more replays where it does)")
    add_shared_prefix_flag(p)
    p.set_defaults(func=cmd_simulate)

    p = command("calibrate", "fit the cost model to measured iterations or a trace's TTFT/TPOT")
    add_scenario_arguments(p)
    p.add_argument("--points", help="CSV: prefill_tokens,prefill_count,decode_count,decode_context,step_ms")
    p.add_argument("--trace", help="a stored trace with TTFT/TPOT, replayed in the scenario (its engine, limits)")
    p.add_argument("--holdout", type=FINITE, default=0.3,
                   help="--trace: the share of the latest arrivals predicted, not fitted (default 0.3)")
    p.add_argument("--trace-model", metavar="NAME",
                   help="--trace: calibrate on the requests whose model column is NAME (default: those naming "
                        "--model, where the trace names several)")
    p.add_argument("-o", "--output", required=True, help="calibration file to write")
    p.set_defaults(func=cmd_calibrate)

    p = command("recommend", "per SLO class: the vLLM settings that sustain the most requests/s on the trace")
    add_recommend_flags(p)
    p.add_argument("--gpu-options", metavar="GPU[=PRICE],GPU",
                   help="compare these GPUs per class by the fleet's $/hour and $/M output tokens (PRICE: USD per "
                        "GPU-hour, default the preset's)")
    p.add_argument("--details", action="store_true",
                   help="add knob sweeps, the Pareto front, a tornado of ±20%% changes and the diagnosis per class")
    p.set_defaults(func=cmd_recommend)
