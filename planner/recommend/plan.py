"""One recommendation run as the CLI, the Recommend page and the report make it: the SLO classes, the trace's
peak, a search per (tensor-parallel degree, ``max_new_tokens`` cap, preemption mode) of one scenario, the winner per
class by requests/s per GPU, and optionally each winner's sweeps and diagnosis. One code path, so all three agree."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from itertools import product
from typing import Callable

import numpy as np

from planner.errors import PlannerError
from planner.executors import Executor, get_executor
from planner.recommend.fleet import GROWTH, RESAMPLES, size_fleet
from planner.recommend.search import ClassRecommendation, Search, recommend
from planner.recommend.slo import DEFAULT_CLASSES, MAX_QUEUE_S, SLOClass, parse_slo
from planner.scenario import Scenario
from planner.sim.engines import get_engine
from planner.sim.prefix import parse_shared_prefix
from planner.sim.results import rejection_note
from planner.sim.routers import DEFAULT_ROUTER, get_router
from planner.sim.run import check_router, default_router
from planner.sim.workload import SimWorkload
from planner.workload.fitting.arrivals import peak_summary
from planner.workload.rates import arrival_rate_rps

PEAK_MIN_SPAN_S = 60.0      # shorter traces have no per-minute peak to size for


# headroom and growth factors past this size a fleet of replicas beyond any the search can place (and no
# capacity plan means)
MAX_FACTOR = 1000.0

@dataclass(frozen=True)
class RecommendOptions:
    """What a recommendation searches over, beyond the scenario.

    Attributes
    ----------
    slos : tuple of str
        ``NAME:METRIC<VALUE`` classes (``NAME:throughput``: no latency bound); empty: the default three.
    headroom : float
        The peak rate is multiplied by this when sizing replicas.
    tp_options : tuple of int
        Tensor-parallel degrees to compare by requests/s per GPU; empty: the scenario's TP only.
    max_new_tokens_options : tuple of str
        ``none``, integers or ``pNN`` (a percentile of the trace's outputs) to compare; empty: the scenario's cap.
    max_queue_s : float
        Every class's bound on p99 queueing delay (seconds), throughput included.
    router : str or None
        The router the fleet figures assume; None: least-loaded (round-robin for an engine whose loop runs one
        replica).
    resamples : int
        Block-bootstrap resamples behind the replica count's confidence (0: none).
    growth : float
        The what-if: replicas at the trace's rate × headroom × this.
    shared_prefix : str or None
        ``TOKENS[:SHARE]``: the declared shared prefix (a system prompt) the trace is replayed with, for a trace
        with no prefix identity of its own (:meth:`planner.sim.workload.SimWorkload.with_shared_prefix`).
    """

    slos: tuple[str, ...] = ()
    headroom: float = 1.0
    tp_options: tuple[int, ...] = ()
    max_new_tokens_options: tuple[str, ...] = ()
    details: bool = False
    max_queue_s: float = MAX_QUEUE_S
    router: str | None = None
    resamples: int = RESAMPLES
    growth: float = GROWTH
    shared_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.shared_prefix:
            parse_shared_prefix(self.shared_prefix)
        if not (isinstance(self.headroom, (int, float)) and 1 <= self.headroom <= MAX_FACTOR):
            raise PlannerError(f"--headroom {self.headroom!r}: expected a factor from 1 to {MAX_FACTOR:g} on the "
                               "trace's rate")
        if not (isinstance(self.max_queue_s, (int, float)) and math.isfinite(self.max_queue_s)
                and self.max_queue_s > 0):
            raise PlannerError(f"--max-queue-s {self.max_queue_s!r}: expected a positive number of seconds")
        if not (isinstance(self.growth, (int, float)) and 1 <= self.growth <= MAX_FACTOR):
            raise PlannerError(f"--growth {self.growth!r}: expected a factor from 1 to {MAX_FACTOR:g} on the "
                               "traffic")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) or not 0 <= self.resamples <= 1000:
            raise PlannerError(f"--resamples {self.resamples!r}: expected a whole number from 0 to 1,000")
        if self.router is not None:
            get_router(self.router)
        for tp in self.tp_options:
            if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
                raise PlannerError(f"--tp-search {tp!r}: expected positive integers such as 1,2,4")

    def to_dict(self) -> dict:
        return asdict(self)


def searched_calibration_warnings(scenario: Scenario, options: RecommendOptions,
                                  gpu_options: str = "") -> tuple[str, ...]:
    """What a calibration fitted on another server leaves unmeasured on each server the search prices: the
    scenario itself, at each TP of ``options.tp_options`` and on each GPU of ``gpu_options`` (``--gpu-options``),
    each warning once (:attr:`planner.scenario.Scenario.calibration_warnings`)."""
    from planner.catalog.gpus import get_gpu
    from planner.recommend.costs import parse_gpu_options

    out: list[str] = list(scenario.calibration_warnings)
    changes = [{"tp": tp} for tp in options.tp_options]
    changes += [{"gpu": get_gpu(name)} for name, _ in (parse_gpu_options(gpu_options) if gpu_options else ())]
    for change in changes:
        try:
            warnings = scenario.replace(**change).calibration_warnings
        except PlannerError:            # a degree the model cannot take: the search reports it as skipped
            continue
        out += [w for w in warnings if w not in out]
    return tuple(out)


@dataclass(frozen=True)
class Recommendation:
    """Every class's recommendation for one trace and scenario: the ``recommend --json`` object's body."""

    model: str
    gpu: str
    tp: int
    engine: str
    peak_rate_rps: float | None
    trace_rate_rps: float
    simulations: int
    skipped: list[str]
    classes: list[ClassRecommendation]
    rejected_too_long: int = 0
    requests: int = 0
    rejection_note: str | None = None
    router: str = DEFAULT_ROUTER
    headroom: float = 1.0
    max_queue_s: float = MAX_QUEUE_S
    price_per_gpu_hour: float = 0.0

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("model", "gpu", "tp", "engine", "peak_rate_rps", "trace_rate_rps",
                                             "simulations", "skipped", "rejected_too_long", "rejection_note",
                                             "router", "headroom", "max_queue_s", "price_per_gpu_hour")}
        out["classes"] = [c.to_dict() for c in self.classes]
        return out


def slo_classes(texts: tuple[str, ...]) -> list[SLOClass]:
    """Parsed classes, or the default three; names must differ (each names its row, command and charts)."""
    classes = [parse_slo(t) for t in texts] if texts else list(DEFAULT_CLASSES)
    names = [c.name for c in classes]
    if len(set(names)) < len(names):
        raise PlannerError(f"SLO class names repeat ({', '.join(names)}): expected a different name for each")
    return classes


def with_throughput_class(texts: tuple[str, ...]) -> tuple[str, ...]:
    """``texts`` and a throughput class (no latency bound) where none of them is one or is named ``throughput``:
    the Recommend page always shows what the server sustains unbounded beside the classes it is given."""
    if any(not c.bounded or c.name == "throughput" for c in map(parse_slo, texts)):
        return texts
    return (*texts, "throughput:throughput")


def max_new_tokens_cap(text: str, outputs: np.ndarray) -> int | None:
    """``none``, an integer, or ``pNN``: that percentile of the trace's output lengths (the seed's procedure)."""
    text = text.strip().lower()
    if text == "none":
        return None
    try:
        if text.startswith("p"):
            share = float(text[1:])
            if not 0 < share <= 100:
                raise ValueError(text)
            return int(np.ceil(np.percentile(outputs, share)))
        if (cap := int(text)) < 1:
            raise ValueError(text)
        return cap
    except ValueError as exc:
        raise PlannerError(f"max_new_tokens option {text!r}: expected none, a positive integer or pNN (p1 to "
                           "p100)") from exc


def plan_recommendation(workload: SimWorkload, scenario: Scenario, options: RecommendOptions,
                        progress: Callable[[float, str], None] | None = None,
                        executor: Executor | None = None) -> Recommendation:
    """Recommend settings per SLO class for ``workload`` in ``scenario`` (its TP degree, cap and preemption mode
    unless ``options`` compares others; the scheduler limits are what the search chooses). Every simulation runs
    on ``executor`` (default: the local pool, :func:`planner.executors.get_executor`); the answer is the same
    whichever runs them.

    Returns
    -------
    Recommendation
        Each class row is the best option's :class:`ClassRecommendation` with ``compared`` (every option's
        requests/s per GPU) and, with ``details``, its sweeps and diagnosis.
    """
    classes = slo_classes(options.slos)
    engine = get_engine(scenario.engine)
    router = options.router or default_router(engine.name)
    check_router(engine.name, router)
    options = replace(options, router=router)
    executor = executor or get_executor()
    rate = arrival_rate_rps(workload.arrival_s)
    if rate is None:
        raise PlannerError("the trace needs at least two distinct arrival times to be replayed at a rate")
    span = float(np.ptp(workload.arrival_s))
    peak = peak_summary(workload.arrival_s)["peak_rate_rps"] if span > PEAK_MIN_SPAN_S else None
    caps = tuple(dict.fromkeys(max_new_tokens_cap(t, workload.output_tokens)
                               for t in options.max_new_tokens_options)) or (scenario.max_new_tokens,)
    tps = tuple(dict.fromkeys(options.tp_options)) or (scenario.tp,)      # a degree named twice is searched once
    combos = list(product(tps, caps, engine.preemption_modes))
    searches, rows_by, skipped = {}, {}, []
    for i, (tp, cap, mode) in enumerate(combos):
        step = _scaled(progress, i, len(combos) + len(classes),
                       f"TP {tp}, cap {cap}, {mode}: " if len(combos) > 1 else "")
        try:
            search = Search(workload, scenario.replace(tp=tp, preemption=mode, max_new_tokens=cap), progress=step,
                            max_queue_s=options.max_queue_s, executor=executor)
        except PlannerError as exc:      # a TP degree vLLM refuses, or without room for the KV cache: compared away
            skipped.append(f"TP {tp}: {exc}")
            continue
        rows_by[(tp, cap, mode)] = recommend(search, classes)
        searches[(tp, cap, mode)] = search
    if not rows_by:
        raise PlannerError(f"{scenario.model.name} fits no option on {scenario.gpu.label}: " + "; ".join(skipped))

    def rank(combo, i):
        tp, cap, mode = combo
        # most requests/s per GPU; ties: fewer GPUs, no cap (or a looser one), recompute (no host memory)
        return (rows_by[combo][i].qps_per_gpu, -tp, math.inf if cap is None else cap, mode == "recompute")

    out = []
    for i, slo in enumerate(classes):
        best = max(rows_by, key=lambda combo: rank(combo, i))
        cap = best[1]
        row = replace(rows_by[best][i],
                      truncated_share=float(np.mean(workload.output_tokens > cap)) if cap else 0.0,
                      compared=[{"tp": c[0], "max_new_tokens": c[1], "preemption_mode": c[2],
                                 "qps_per_gpu": rows[i].qps_per_gpu} for c, rows in rows_by.items()])
        row = _with_fleet(row, searches[best], slo, options, _scaled(progress, len(combos) + i, len(combos)
                                                                      + len(classes), f"{slo.name}: "))
        if options.details:
            from planner.recommend.diagnosis import class_details

            row = replace(row, details=class_details(searches[best], row, slo, classes))
        out.append(row)
    too_long = int(np.sum(workload.input_tokens >= scenario.max_model_len))
    return Recommendation(
        model=scenario.model.name, gpu=scenario.gpu.name, tp=scenario.tp, engine=engine.name, peak_rate_rps=peak,
        trace_rate_rps=rate, simulations=sum(s.simulations for s in searches.values()), skipped=skipped,
        classes=out, rejected_too_long=too_long, requests=workload.n, router=options.router,
        headroom=options.headroom, max_queue_s=options.max_queue_s, price_per_gpu_hour=scenario.gpu.price_per_hour,
        rejection_note=rejection_note(workload.n, too_long, int(workload.input_tokens.max()),
                                      scenario.max_model_len, scenario.model.max_position, rated=True))


def _with_fleet(row: ClassRecommendation, search: Search, slo: SLOClass, options: RecommendOptions,
                progress) -> ClassRecommendation:
    """The class row with its fleet sized by simulation (:func:`planner.recommend.fleet.size_fleet`) behind the
    options' router, and what that fleet costs."""
    if not row.feasible:
        return replace(row, router=options.router)
    if progress:
        progress(0.0, f"sizing the fleet behind {options.router}")
    cfg = row.config
    scenario = search.config(cfg["max_num_seqs"], cfg["max_num_batched_tokens"], cfg["enable_chunked_prefill"])
    fleet = size_fleet(search.workload, scenario, slo, row.max_qps_per_replica, router=options.router,
                       headroom=options.headroom, max_queue_s=options.max_queue_s, resamples=options.resamples,
                       growth=options.growth, counter=search.count, executor=search.executor)
    if progress:
        progress(1.0, f"{fleet.replicas} replicas")
    replicas = fleet.replicas
    price = scenario.price_per_replica_hour
    return replace(row, router=options.router, fleet=fleet, replicas_for_peak=replicas,
                   gpus=replicas * scenario.tp if replicas else None,
                   cost_per_hour=price * replicas if replicas else None)


def _scaled(progress, index: int, count: int, prefix: str):
    if progress is None:
        return None
    return lambda f, msg: progress((index + f) / count, prefix + msg)
