"""CLI commands of the cost model and the simulator: ``step``, ``simulate``, ``calibrate`` (CONTRACT.md)."""

from __future__ import annotations

from planner.cli.output import emit as _emit
from planner.cli.output import progress_printer as _progress_printer
from planner.errors import PlannerError
from planner.traces import store


def cmd_step(args) -> None:
    from planner.catalog.gpus import get_gpu
    from planner.catalog.presets import get_model
    from planner.sim.cost_model import load_params, parse_decode, parse_prefill, predict_step

    prefills = [chunk for spec in args.prefill or [] for chunk in parse_prefill(spec)]
    decodes = [parse_decode(spec) for spec in args.decode or []]
    obj = predict_step(get_model(args.model), get_gpu(args.gpu), prefills, decodes, tp=args.tp,
                       params=load_params(args.calibration), kv_cache_dtype=args.kv_cache_dtype)
    _emit(args, obj, f"{obj['step_ms']:.3f} ms ({obj['bound']}-bound): compute {obj['compute_ms']:.3f} ms, memory "
                     f"{obj['memory_ms']:.3f} ms, overheads {obj['overhead_ms']:.3f} ms")


def cmd_simulate(args) -> None:
    from planner.catalog.gpus import get_gpu
    from planner.catalog.presets import get_model
    from planner.sim.cost_model import load_params
    from planner.sim.run import engine_settings, simulate, summarize
    from planner.sim.workload import synthetic
    from planner.workload.replay import from_trace

    if bool(args.trace) == bool(args.synthetic):
        raise PlannerError("give exactly one of --trace TRACE or --synthetic SPEC")
    if args.rate_scale is not None and args.qps is not None:
        raise PlannerError("give --rate-scale or --qps, not both")
    model, gpu = get_model(args.model), get_gpu(args.gpu)
    if args.trace and args.fitted:
        from planner.sim.workload import from_fits
        from planner.workload.fits import fit_length_field

        if args.qps is None:
            raise PlannerError("--fitted draws new requests: give their rate with --qps")
        con = store.open_store(args.db)
        tid = store.get_trace(con, args.trace).trace_id
        workload = from_fits(fit_length_field(con, tid, "input_tokens"), fit_length_field(con, tid, "output_tokens"),
                             args.requests, args.qps, args.arrival_cv, args.seed)
    elif args.trace:
        workload = from_trace(store.open_store(args.db), args.trace, rate_scale=args.rate_scale, qps=args.qps,
                              seed=args.seed)
    else:
        workload = synthetic(args.synthetic + ("" if "seed=" in args.synthetic else f",seed={args.seed}"))
    settings = engine_settings(model, gpu, tp=args.tp, max_num_seqs=args.max_num_seqs,
                               max_num_batched_tokens=args.max_num_batched_tokens,
                               chunked_prefill=not args.no_chunked_prefill, preemption=args.preemption,
                               max_new_tokens=args.max_new_tokens, gpu_memory_utilization=args.gpu_mem_util,
                               max_model_len=args.max_model_len, kv_cache_dtype=args.kv_cache_dtype,
                               block_size=args.block_size, reserve_quantile=args.reserve_predicted,
                               priority=args.priority)
    result = simulate(workload, model, gpu, settings, engine=args.engine, tp=args.tp,
                      cost=load_params(args.calibration), kv_cache_dtype=args.kv_cache_dtype,
                      progress=_progress_printer(not args.json))
    obj = summarize(result)
    if args.slo_ttft_ms is not None or args.slo_tpot_ms is not None:
        from planner.sim.run import goodput

        obj["goodput_rps"] = goodput(result, args.slo_ttft_ms, args.slo_tpot_ms)
    _emit(args, obj, f"{obj['completed']:,}/{obj['requests']:,} requests in {obj['duration_s']:.1f} s simulated "
                     f"({obj['sim_wall_s']:.2f} s wall): TTFT p50/p99 {obj['ttft_ms']['p50']:.0f}/"
                     f"{obj['ttft_ms']['p99']:.0f} ms, TPOT p50/p99 {obj['tpot_ms']['p50']:.1f}/"
                     f"{obj['tpot_ms']['p99']:.1f} ms, {obj['throughput_tok_s']['output']:,.0f} output tok/s, "
                     f"{obj['preemptions']} preemptions{', SATURATED' if obj['saturated'] else ''}")


def cmd_calibrate(args) -> None:
    from planner.catalog.gpus import get_gpu
    from planner.catalog.presets import get_model
    from planner.sim import calibration

    if bool(args.points) == bool(args.trace):
        raise PlannerError("give exactly one of --points CSV or --trace TRACE")
    model, gpu = get_model(args.model), get_gpu(args.gpu)
    if args.points:
        report = calibration.fit_points(model, gpu, args.tp, calibration.read_points(args.points))
    else:
        from planner.sim.run import engine_settings
        from planner.workload.replay import measured_latencies

        workload, ttft, tpot = measured_latencies(store.open_store(args.db), args.trace)
        settings = engine_settings(model, gpu, tp=args.tp, max_num_seqs=args.max_num_seqs,
                                   max_num_batched_tokens=args.max_num_batched_tokens,
                                   max_model_len=args.max_model_len)
        report = calibration.fit_trace(model, gpu, args.tp, workload, ttft, tpot, settings, engine=args.engine)
    calibration.save(report, args.output, model, gpu, args.tp)
    obj = {"path": args.output, "params": report["params"], "mape": report["mape"],
           "max_abs_error": report["max_abs_error"], "source": report["source"], "residuals": report["residuals"]}
    _emit(args, obj, f"wrote {args.output}: " + ", ".join(f"{k}={v:.4g}" for k, v in report["params"].items())
          + f"; MAPE {report['mape']:.2%}")


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError as exc:
        raise PlannerError(f"{flag} {text!r}: expected integers such as 1,2,4") from exc


def recommend_inputs(args):
    """``(model, gpu, RecommendOptions, CostParams)`` from the flags :func:`add_recommend_flags` registers."""
    from planner.catalog.gpus import get_gpu
    from planner.catalog.presets import get_model
    from planner.recommend.plan import RecommendOptions
    from planner.sim.cost_model import load_params

    model, gpu = get_model(args.model), get_gpu(args.gpu)
    if args.price is not None:
        gpu = gpu.with_price(args.price)
    options = RecommendOptions(
        tp=args.tp, engine=args.engine, gpu_memory_utilization=args.gpu_mem_util, max_model_len=args.max_model_len,
        kv_cache_dtype=args.kv_cache_dtype, slos=tuple(args.slo or ()), headroom=args.headroom,
        tp_options=_int_list(args.tp_search, "--tp-search") if args.tp_search else (),
        max_new_tokens_options=tuple(args.max_new_tokens_options.split(",")) if args.max_new_tokens_options else (),
        details=getattr(args, "details", True))
    return model, gpu, options, load_params(args.calibration)


def cmd_recommend(args) -> None:
    from planner.recommend.plan import plan_recommendation
    from planner.workload.replay import from_trace

    model, gpu, options, cost = recommend_inputs(args)
    workload = from_trace(store.open_store(args.db), args.trace)
    obj = {"trace": args.trace, **plan_recommendation(workload, model, gpu, options, cost,
                                                      _progress_printer(not args.quiet))}
    lines = [f"{r['name']:12s} {'ok ' if r['feasible'] else 'NO '} qps/replica {r['max_qps_per_replica']:.2f} "
             f"replicas {r['replicas_for_peak']}  {r['launch_command']}" for r in obj["classes"]]
    _emit(args, obj, "\n".join(lines))


def add_recommend_flags(p) -> None:
    """The scenario and search flags ``recommend`` and ``report`` share."""
    p.add_argument("trace", help="trace id or name")
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--slo", action="append", metavar="NAME:METRIC<VALUE",
                   help="e.g. chat:ttft_p99<300, chat:ttft<200,tpot<50@90%% (attainment share) or "
                        "batch:throughput (repeatable); default ttft_p99<200, tpot_p99<50, throughput")
    p.add_argument("--gpu-mem-util", type=float, default=0.9)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--headroom", type=float, default=1.0, help="multiply the peak rate by this when sizing")
    p.add_argument("--engine", default="vllm-v1",
                   help="the scheduler to recommend for: vllm-v1 (default), vllm-v0 (also compares preemption "
                        "modes), tgi, trtllm (launcher flags of that engine), orca, static")
    p.add_argument("--tp-search", help="compare these tensor-parallel degrees (e.g. 1,2,4) by requests/s per GPU")
    p.add_argument("--max-new-tokens-options", metavar="none,p99,p95",
                   help="compare max_new_tokens caps (none, integers, or percentiles of the trace's outputs)")
    p.add_argument("--price", type=float, help="USD per GPU-hour (default: the GPU preset's)")
    p.add_argument("--calibration", help="a file written by `calibrate`")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_simulation_commands(command) -> None:
    """Register ``step``, ``simulate`` and ``calibrate`` with the CLI's ``command(name, help)`` factory."""
    p = command("step", "predicted time of one engine iteration (roofline cost model)")
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--prefill", action="append", metavar="SPEC",
                   help="TOKENS, TOKENSxCOUNT or TOKENS@CONTEXT (repeatable)")
    p.add_argument("--decode", action="append", metavar="COUNTxCONTEXT", help="decoding sequences (repeatable)")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--calibration", help="a file written by `calibrate`")
    p.set_defaults(func=cmd_step)

    p = command("simulate", "replay a trace or a synthetic workload through a scheduler on a GPU")
    p.add_argument("--trace", help="trace id or name")
    p.add_argument("--synthetic", help="requests=N,input=LEN,output=LEN,qps=Q[,arrival=poisson|gamma:CV][,seed=N]")
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--engine", default="vllm-v1", help="vllm-v1 (default), vllm-v0, orca, static, tgi, trtllm")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--preemption", default="recompute", help="recompute or swap (vllm-v0 only)")
    p.add_argument("--max-new-tokens", type=int, help="truncate outputs (and size reservations) to this")
    p.add_argument("--rate-scale", type=float, help="replay the trace this many times faster")
    p.add_argument("--qps", type=float, help="replay the trace at this mean request rate")
    p.add_argument("--gpu-mem-util", type=float, default=0.9)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--calibration", help="a file written by `calibrate`")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reserve-predicted", type=float, metavar="Q",
                   help="vllm-v1 remedy: reserve the Q quantile (0.75, 0.95) of a predicted output length")
    p.add_argument("--priority", default="fcfs", help="fcfs or shortest-predicted (vllm-v1 remedy)")
    p.add_argument("--fitted", action="store_true",
                   help="with --trace: draw new requests from the trace's fitted length distributions at --qps")
    p.add_argument("--requests", type=int, default=10_000, help="requests to draw with --fitted")
    p.add_argument("--arrival-cv", type=float, default=1.0, help="inter-arrival CV with --fitted (1: Poisson)")
    p.add_argument("--slo-ttft-ms", type=float, help="report goodput: requests/s meeting this TTFT")
    p.add_argument("--slo-tpot-ms", type=float, help="report goodput: requests/s meeting this TPOT")
    p.set_defaults(func=cmd_simulate)

    p = command("calibrate", "fit the cost model to measured iterations or a trace's TTFT/TPOT")
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--points", help="CSV: prefill_tokens,prefill_count,decode_count,decode_context,step_ms")
    p.add_argument("--trace", help="a stored trace with TTFT/TPOT (replayed through vllm-v1)")
    p.add_argument("--engine", default="vllm-v1", help="the measured server's scheduler (trace mode)")
    p.add_argument("--max-num-seqs", type=int, help="the measured server's setting (trace mode)")
    p.add_argument("--max-num-batched-tokens", type=int, help="the measured server's setting (trace mode)")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("-o", "--output", required=True, help="calibration file to write")
    p.set_defaults(func=cmd_calibrate)

    p = command("recommend", "per SLO class: the vLLM settings that sustain the most requests/s on the trace")
    add_recommend_flags(p)
    p.add_argument("--details", action="store_true",
                   help="add knob sweeps, the Pareto front, a tornado of ±20%% changes and the diagnosis per class")
    p.set_defaults(func=cmd_recommend)
