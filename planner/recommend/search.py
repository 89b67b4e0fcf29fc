"""Recommendations per SLO class: the engine settings that sustain the highest request rate on the user's trace
while the class's SLO holds, found with the simulator.

For each configuration of a grid (``max_num_seqs`` × ``max_num_batched_tokens``) the trace is replayed
time-scaled and the largest rate meeting the SLO is found by bisection on the scale; one replay answers every
class at that (configuration, scale), so classes share simulations through a cache. The throughput class asks
only that the queue stay bounded. Every configuration is the search's scenario with those two settings: its own
memory plan (vLLM profiles activation memory for its limits) and its own cost model, so the point recommended is
the point ``simulate`` gives with the same flags.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np

from planner.executors import Executor, get_executor
from planner.recommend.fleet import FleetSizing
from planner.recommend.parallel import Memo, parallel_map
from planner.recommend.slo import (DEFAULT_CLASSES, MAX_QUEUE_S, SLOClass, abort_wait_s, attainment, meets,
                                   slo_load)
from planner.scenario import Scenario
from planner.sim.engines import get_engine
from planner.sim.results import SimResult
from planner.sim.run import simulate_on
from planner.sim.workload import SimWorkload
from planner.workload.rates import arrival_rate_rps

SEQS_GRID = (8, 16, 32, 64, 128, 256)
# a burst replays at least this many requests per max_num_seqs slot (the trace's own, repeated where it has fewer):
# the middle half of its completions then falls while the queue still fills the batch. The trace alone (600
# requests under max_num_seqs 1024) never filled it, and its completion rate said nothing of a full batch's
BURST_REQUESTS_PER_SEQ = 8
BUDGET_GRID = (512, 1024, 2048, 4096, 8192)
BISECTION_STEPS = 7
# how far below the range's foot a class that fails there is searched: 1,024 x its 64 x, to near-idle replays
DEEP_RANGE = 1024
NEAR_BEST = 0.95


@dataclass
class Search:
    """Replays of one workload in variations of one scenario, cached per (configuration, time scale)."""

    workload: SimWorkload
    scenario: Scenario
    progress: Callable[[float, str], None] | None = None
    simulations: int = 0
    max_queue_s: float = MAX_QUEUE_S
    executor: Executor | None = None     # where replays run (None: the local default, one process per core)

    def __post_init__(self):
        self.scenario.settings       # raises at once when the scenario leaves no memory for the KV cache
        if self.executor is None:
            self.executor = get_executor()
        self.cache = Memo()           # (configuration, scale) -> SimResult; threads of one search share it
        self.capacities = Memo()
        self._count = threading.Lock()
        self.base_rate = arrival_rate_rps(self.workload.arrival_s) or math.inf

    def config(self, seqs: int, budget: int, chunked: bool = True) -> Scenario:
        """The scenario with these scheduler limits (validated as ``vllm serve`` would)."""
        return self.scenario.replace(max_num_seqs=seqs, max_num_batched_tokens=budget, chunked_prefill=chunked)

    def at_scale(self, scale: float) -> SimWorkload:
        """The workload with its arrivals compressed ``scale``-fold in time (``scale`` × its rate)."""
        return replace(self.workload, arrival_s=self.workload.arrival_s / scale)

    def run(self, seqs: int, budget: int, scale: float, chunked: bool = True) -> SimResult:
        """The replay of this configuration at this time scale (computed once, from any thread)."""
        def compute() -> SimResult:
            # a request waiting 20× the queueing bound already fails every class: stop that replay there
            return self.replay(self.at_scale(scale), self.config(seqs, budget, chunked),
                               abort_wait_s=abort_wait_s(self.max_queue_s))
        # nine significant digits: the same scale reached by two paths (a sweep's factor, a bisection) shares a key
        return self.cache.get((seqs, budget, chunked, float(f"{scale:.9g}")), compute)

    def replay(self, work: SimWorkload, scenario: Scenario, abort_wait_s: float = math.inf) -> SimResult:
        """One simulation of a variation of this search's scenario on the search's executor, counted (from any
        thread)."""
        self.count()
        return simulate_on(self.executor, work, scenario, abort_wait_s=abort_wait_s)

    def count(self, simulations: int = 1) -> None:
        """Count simulations made for this search (thread-safe)."""
        with self._count:
            self.simulations += simulations

    def capacity_scale(self, seqs: int, budget: int, chunked: bool = True) -> float:
        """An upper bound on the sustainable scale, the top of the bisection's bracket: the rate a full batch
        completes requests at, every request queued at once (at least :data:`BURST_REQUESTS_PER_SEQ` per
        ``max_num_seqs`` slot), over the middle half of the completions (the batch filling and the last ones
        draining alone left out; one replay per configuration, remembered).

        No rate above it is sustained, and on a short trace it is the search's only guard: requests pile into the
        running batch there and no queue forms for the verdict to see. The top was 1.2x the trace's own burst
        rate, and 600 requests of 512 tokens passed at 46.2 req/s on an H100 where a replica completes 38 (a
        smaller batch can complete a little faster where steps turn compute-bound: 38.5 req/s at 600, 37.7 at
        1,024; the bracket gives that up)."""
        def compute() -> float:
            result = self.replay(self.burst(seqs), self.config(seqs, budget, chunked))
            done = np.sort(result.finish[np.isfinite(result.finish)])
            if done.size < 4:
                return 1.0
            q25, q75 = np.quantile(done, [0.25, 0.75])
            rate = 0.5 * done.size / (q75 - q25) if q75 > q25 else done.size / max(float(done[-1]), 1e-9)
            return rate / self.base_rate
        return self.capacities.get((seqs, budget, chunked), compute)

    def burst(self, seqs: int) -> SimWorkload:
        """The trace's requests all at once, repeated until there are :data:`BURST_REQUESTS_PER_SEQ` per
        ``max_num_seqs`` slot: without groups, each copy with prefix keys of its own (copies sharing them would
        hit one another's prompts whole; dropping them priced a prompt-sharing trace at a third of its rate,
        capping the search there and pruning the configurations that sustain it)."""
        copies = math.ceil(BURST_REQUESTS_PER_SEQ * seqs / self.workload.n)
        if copies <= 1:
            return replace(self.workload, arrival_s=np.zeros(self.workload.n))
        w = self.workload
        prefix = None if w.prefix is None else w.prefix.take(np.tile(np.arange(w.n), copies),
                                                             np.repeat(np.arange(copies), w.n))
        return SimWorkload(np.zeros(w.n * copies), np.tile(w.input_tokens, copies), np.tile(w.output_tokens, copies),
                           f"{w.source} x{copies}, all at once", prefix=prefix)

    def max_scale(self, seqs: int, budget: int, chunked: bool, slo: SLOClass,
                  hi: float) -> tuple[float, SimResult | None]:
        """The largest time scale (rate multiplier) in ``[hi / 64, hi]`` where ``slo`` holds and holds at half the
        scale, by bisection in log; where it fails at ``hi / 64`` too, in ``[hi / 64 / DEEP_RANGE, hi / 64]``: a
        class that holds only with requests barely overlapping (a tight TTFT on long prompts) had been called
        infeasible, though replicas enough hold it. 0 where it fails even there.

        A scale whose half fails is a ridge of the replay's noise, not a rate the class holds at: a bound that
        sits at the trace's unloaded latency is met and missed by turns as load rises (BurstGPT's TTFT p99 met at
        0.47 req/s with 199.9 ms against 200, missed at 0.23 with 200.2). The search goes on below the half, the
        same way, so the answer may lie under ``hi / 64 / DEEP_RANGE`` or be 0 after a scale that met the SLO.
        The half costs one replay more per configuration and class (10% on ``bench/recommend.py``)."""
        scale, result = self._bisect(seqs, budget, chunked, slo, hi)
        while scale > 0 and not meets(self.run(seqs, budget, scale / 2, chunked), slo, self.max_queue_s):
            scale, result = self._bisect(seqs, budget, chunked, slo, scale / 2)
        return scale, result

    def _bisect(self, seqs: int, budget: int, chunked: bool, slo: SLOClass,
                hi: float) -> tuple[float, SimResult | None]:
        lo_scale, steps = hi / 64, BISECTION_STEPS
        if not meets(self.run(seqs, budget, lo_scale, chunked), slo, self.max_queue_s):
            # one halving more: 1,024 x in 8 resolves 2.7%, as finely as 64 x in 7 (3.3%)
            hi, lo_scale, steps = lo_scale, lo_scale / DEEP_RANGE, BISECTION_STEPS + 1
            if not meets(self.run(seqs, budget, lo_scale, chunked), slo, self.max_queue_s):
                return 0.0, None
        elif meets(self.run(seqs, budget, hi, chunked), slo, self.max_queue_s):
            return hi, self.run(seqs, budget, hi, chunked)
        lo, top = math.log(lo_scale), math.log(hi)
        for _ in range(steps):
            mid = (lo + top) / 2
            if meets(self.run(seqs, budget, math.exp(mid), chunked), slo, self.max_queue_s):
                lo = mid
            else:
                top = mid
        return math.exp(lo), self.run(seqs, budget, math.exp(lo), chunked)


@dataclass(frozen=True)
class ClassRecommendation:
    """One SLO class's recommendation: the settings, the rate one replica sustains, what it implies.

    ``to_dict()`` is the class object of ``recommend --json`` (CONTRACT.md): ``name, slo, feasible, config,
    max_qps_per_replica, replicas_for_peak, predicted, vllm_args`` and the rest below.
    """

    name: str
    slo: dict
    feasible: bool
    config: dict
    max_qps_per_replica: float
    replicas_for_peak: int | None
    gpus: int | None
    predicted: dict | None
    throughput_tok_s: float
    cost_per_hour: float | None
    cost_per_million_output_tokens: float | None
    vllm_args: str
    launch_command: str
    scale: float
    grid: list[dict]
    tp: int
    max_new_tokens: int | None = None
    qps_per_gpu: float = 0.0
    truncated_share: float = 0.0
    compared: list[dict] = field(default_factory=list)
    details: dict | None = None
    verdict: str = "stable"
    queue_ms: dict = field(default_factory=lambda: {"p99": 0.0})
    router: str | None = None
    fleet: FleetSizing | None = None
    # the class's own bound at its rate, by the slo object's key (ttft_p90_ms, attainment): ``predicted`` gives p50
    # and p99 only, and a p90 or attainment class read beside a p99 it does not bound
    achieved: dict = field(default_factory=dict)

    @property
    def slo_focus_label(self) -> str:
        """The metric that stands for the class (:attr:`SLOClass.focus`), e.g. ``TTFT p99``."""
        if not self.slo:
            return "E2E p99"
        if "attainment" in self.slo:
            metric = next(k for k in self.slo if k != "attainment").removesuffix("_ms")
            return f"{metric.upper()} p{self.slo['attainment'] * 100:g}"
        metric, _, percentile = next(iter(self.slo)).removesuffix("_ms").partition("_")
        return f"{metric.upper()} {percentile}"

    @property
    def slo_focus_key(self) -> str:
        """The sweeps' column of the focus metric (:attr:`SLOClass.focus`), e.g. ``ttft_p99_ms``."""
        metric, _, percentile = self.slo_focus_label.lower().partition(" ")
        return f"{metric}_{percentile}_ms"

    @property
    def slo_limit_ms(self) -> float | None:
        """The focus metric's limit (None for a throughput class)."""
        return next((v for k, v in self.slo.items() if k != "attainment"), None)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["fleet"] = self.fleet.to_dict() if self.fleet else None
        if self.details is None:
            del out["details"]
        return out


def recommend(search: Search, classes=DEFAULT_CLASSES, seqs_grid=SEQS_GRID, budget_grid=BUDGET_GRID,
              chunked_off: bool = True, refine: bool = True) -> list[ClassRecommendation]:
    """For each SLO class, the configuration with the highest sustainable rate, and what it implies: the grid
    first (best-capacity configurations first, so weaker ones are cut by their capacity bound), then, with
    ``refine``, the points halfway to the winner's neighbours on each axis.

    Returns
    -------
    list of ClassRecommendation
        One per class, in order; ``qps_per_gpu`` is per GPU of this scenario's TP degree.
    """
    # the scenario's own limits (vLLM's defaults where left out: 1,024 sequences on an H100) are tried too: a grid
    # that stopped at 256 recommended 7% below what the server does unconfigured
    seqs_grid = tuple(sorted({*seqs_grid, search.scenario.max_num_seqs}))
    if search.scenario.chunked_prefill:
        budget_grid = tuple(sorted({*budget_grid, search.scenario.max_num_batched_tokens}))
    # chunked prefill on over the budget grid; off with the budget vLLM then requires (max_model_len); engines
    # that only take whole prompts have no budget to search
    whole_prompts = [(s, search.scenario.max_model_len, False) for s in seqs_grid]
    engine = get_engine(search.scenario.engine)
    # where max_num_seqs does not cap a chunked batch (TGI), it is no knob there: one value, the grid's largest
    chunked_seqs = seqs_grid if engine.chunked_seq_cap else seqs_grid[-1:]
    if engine.chunks_prefill:
        configs = [(s, b, True) for s in chunked_seqs for b in budget_grid if b >= s]
        # a release that chunks every prompt whatever the flag says (vLLM V1 through 0.11.0) has no whole-prompt mode
        refused = search.scenario.release.refusal(search.scenario.engine, False, None)
        configs += whole_prompts if chunked_off and refused is None else []
    else:
        configs = whole_prompts
    progress = search.progress
    workers = search.executor.workers
    caps = dict(zip(configs, parallel_map(lambda c, report: search.capacity_scale(*c), configs,
                                          _span(progress, 0.0, 0.2, "capacity bounds"), workers), strict=True))
    by_capacity = sorted(configs, key=lambda c: -caps[c])

    def one_class(slo: SLOClass, report) -> ClassRecommendation:
        grid: list[dict] = []
        for i, (s, b, c) in enumerate(by_capacity):
            _evaluate(search, slo, grid, s, b, c)
            report((i + 1) / len(configs), f"{slo.name}: max_num_seqs {s}, budget {b}")
        # coarse to fine: halfway (geometrically) to the winner's grid neighbours on each axis
        if refine and _best_scale(grid) > 0:
            top = max((g for g in grid if not g["pruned"]), key=lambda g: g["max_qps"])
            s, b, c = top["max_num_seqs"], top["max_num_batched_tokens"], top["enable_chunked_prefill"]
            finer = [(s2, b, c) for s2 in _midpoints(s, seqs_grid, 8)
                     if (engine.chunked_seq_cap or not c) and (not c or b >= s2)]     # vLLM: budget ≥ max_num_seqs
            finer += [(s, b2, c) for b2 in _midpoints(b, budget_grid, 256) if c and b2 >= s]
            for s2, b2, c2 in finer:
                _evaluate(search, slo, grid, s2, b2, c2)
        return _class_report(search, slo, grid)

    # the classes search side by side, each replay on the executor; they share replays through the cache
    return parallel_map(one_class, classes, _span(progress, 0.2, 1.0, ""), workers)


def _span(progress, lo: float, hi: float, prefix: str):
    """``progress`` mapped onto ``[lo, hi]``."""
    if progress is None:
        return None
    return lambda f, msg: progress(lo + (hi - lo) * f, f"{prefix}{': ' if prefix and msg else ''}{msg}")


def _best_scale(grid: list[dict]) -> float:
    return max((g["scale"] for g in grid if not g["pruned"]), default=0.0)


def _evaluate(search: Search, slo: SLOClass, grid: list[dict], s: int, b: int, c: bool) -> None:
    """Add one configuration's highest sustainable rate to ``grid``, or mark it pruned when its capacity bound
    cannot beat the best rate found so far."""
    entry = {"max_num_seqs": s, "max_num_batched_tokens": b, "enable_chunked_prefill": c}
    cap = search.capacity_scale(s, b, c)
    if cap <= _best_scale(grid):
        grid.append({**entry, "max_qps": None, "result": None, "pruned": True})
        return
    scale, result = search.max_scale(s, b, c, slo, cap)
    grid.append({**entry, "max_qps": scale * search.base_rate, "scale": scale, "result": result, "pruned": False,
                 "ttft_p99_ms": result.metric_ms("ttft", 99) if result else None,
                 "throughput_tok_s": result.output_rate_tok_s() if result else None})


def _midpoints(value: int, grid: tuple[int, ...], step: int) -> list[int]:
    """Geometric midpoints between ``value`` and its neighbours on ``grid``, rounded to ``step``."""
    if value not in grid:
        return []
    i, out = grid.index(value), []
    for j in (i - 1, i + 1):
        if 0 <= j < len(grid):
            mid = max(step, int(round(math.sqrt(value * grid[j]) / step)) * step)
            if mid not in grid and mid not in out:
                out.append(mid)
    return out


def _class_report(search: Search, slo: SLOClass, grid: list[dict]) -> ClassRecommendation:
    evaluated = [g for g in grid if not g["pruned"]]
    top = max(g["max_qps"] for g in evaluated)
    # rates within NEAR_BEST of the best are ties (the bisection resolves ~3%); the class's intent breaks them
    near = [g for g in evaluated if g["max_qps"] >= NEAR_BEST * top]
    if not slo.bounded:
        # throughput takes the largest budget, as vLLM's tuning guide advises (max_num_batched_tokens
        # > 8192 for throughput): real GEMMs gain efficiency well past the few hundred tokens the roofline's knee
        # models, which favours small chunks by a few percent, inside this search's resolution
        # (and at that budget, the best rate's batch: under KV pressure more sequences only add preemptions)
        # Chunked prefill, vLLM V1's default, stays on unless whole prompts do clearly better: their budget
        # (max_model_len) read as the largest and took ties (7.82 req/s whole against 7.87 chunked)
        near = [g for g in near if g["enable_chunked_prefill"]] or near
        budget = max(g["max_num_batched_tokens"] for g in near)
        best = max((g for g in near if g["max_num_batched_tokens"] == budget), key=lambda g: g["max_qps"])
    else:
        # latency classes take the smallest: fewer sequences and a smaller budget keep the tail steadier and
        # leave KV headroom
        best = min(near, key=lambda g: (g["max_num_seqs"], g["max_num_batched_tokens"]))
    feasible = bool(best["max_qps"] > 0)
    if not feasible:      # the closest achievable: the configuration with the lowest metric at the lightest load
        def at_light(g):
            light = search.run(g["max_num_seqs"], g["max_num_batched_tokens"], _capacity_floor(search, g),
                               g["enable_chunked_prefill"])
            return slo_load(light, slo) if slo.bounded else math.inf
        best = min(evaluated, key=at_light)
        best["result"] = search.run(best["max_num_seqs"], best["max_num_batched_tokens"],
                                    _capacity_floor(search, best), best["enable_chunked_prefill"])
    result = best["result"]
    scenario = search.scenario
    cfg = {**{k: best[k] for k in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")},
           "preemption_mode": scenario.preemption}
    qps = best["max_qps"]
    out_tok_s = result.output_rate_tok_s() if result else 0.0
    price = scenario.price_per_replica_hour
    # the replica count comes from simulating the fleet (planner.recommend.fleet), which the plan adds
    return ClassRecommendation(
        name=slo.name, slo=slo.as_dict(), feasible=feasible, config=cfg, max_qps_per_replica=qps,
        replicas_for_peak=None, gpus=None,
        predicted={f"{m}_ms": {"p50": result.metric_ms(m, 50), "p99": result.metric_ms(m, 99)}
                   for m in ("ttft", "tpot", "e2e")} if result else None,
        throughput_tok_s=out_tok_s, cost_per_hour=None,
        # an infeasible class's closest configuration runs at a load it cannot serve: it costs nothing defined
        cost_per_million_output_tokens=price / (out_tok_s * 3600 / 1e6) if out_tok_s and feasible else None,
        # an infeasible class's figures are of its closest configuration at the search's lightest load
        **launch(cfg, scenario), scale=best.get("scale", 0.0) if feasible else _capacity_floor(search, best),
        grid=[{k: v for k, v in g.items() if k != "result"} for g in grid], tp=scenario.tp,
        max_new_tokens=scenario.max_new_tokens, qps_per_gpu=qps / scenario.tp,
        verdict=result.verdict if result else "overloaded",
        queue_ms={"p99": result.queue_p99_s() * 1e3 if result else math.inf}, achieved=achieved(result, slo))


def achieved(result: SimResult | None, slo: SLOClass) -> dict:
    """What ``result`` gives of the class's own bound, keyed as :meth:`SLOClass.as_dict` keys it: the metric at
    its percentile, or the share of requests within every bound; empty for a throughput class."""
    if result is None or not slo.bounded:
        return {}
    if slo.bounds:
        return {"attainment": attainment(result, slo.bounds)}
    return {slo.key: result.metric_ms(slo.metric, slo.percentile)}


def _capacity_floor(search: Search, g: dict) -> float:
    return search.capacity_scale(g["max_num_seqs"], g["max_num_batched_tokens"], g["enable_chunked_prefill"]) / 64


def launch(cfg: dict, scenario: Scenario) -> dict:
    """``vllm_args``: the ``vllm serve`` flags (the engine's own for vLLM engines, else the vLLM V1 equivalent);
    ``launch_command``: the chosen engine's full command line."""
    engine = get_engine(scenario.engine)
    vllm = engine if engine.name.startswith("vllm") else get_engine("vllm-v1")
    return {"vllm_args": vllm.launch_args(cfg, scenario), "launch_command": engine.command(cfg, scenario)}
