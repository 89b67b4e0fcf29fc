"""Recommendations per SLO class: the engine settings that sustain the highest request rate on the user's trace
while the class's SLO holds, found with the simulator.

For each configuration of a grid (``max_num_seqs`` × ``max_num_batched_tokens``) the trace is replayed
time-scaled and the largest rate meeting the SLO is found by bisection on the scale; one replay answers every
class at that (configuration, scale), so classes share simulations through a cache. The throughput class asks
only that the queue stay bounded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from planner.catalog.gpus import GPU
from planner.catalog.models import ModelSpec
from planner.errors import PlannerError
from planner.sim.cost_model import CostParams
from planner.sim.engines import EngineSettings, get_engine
from planner.sim.run import SimResult, saturated, simulate
from planner.sim.workload import SimWorkload

SEQS_GRID = (8, 16, 32, 64, 128, 256)
BUDGET_GRID = (512, 1024, 2048, 4096, 8192)
BISECTION_STEPS = 7
NEAR_BEST = 0.95
MAX_QUEUE_P99_S = 30.0      # sustainable means requests start within this (p99), whatever the class


@dataclass(frozen=True)
class SLOClass:
    """``metric`` (ttft, tpot or e2e) at ``percentile`` below ``limit_ms``; or, with ``bounds``, at least
    ``share`` of the requests meeting every ``(metric, limit_ms)`` bound at once (DistServe's attainment); neither:
    throughput only."""

    name: str
    metric: str | None = None
    percentile: float = 99.0
    limit_ms: float | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    share: float = 0.9

    @property
    def key(self) -> str | None:
        return None if self.metric is None else f"{self.metric}_p{self.percentile:g}_ms"

    @property
    def bounded(self) -> bool:
        return self.metric is not None or bool(self.bounds)

    @property
    def focus(self) -> tuple[str, float]:
        """The (metric, percentile) that stands for the class in sweeps and the tornado."""
        if self.bounds:
            return self.bounds[0][0], self.share * 100
        return (self.metric, self.percentile) if self.metric else ("e2e", 99.0)

    def as_dict(self) -> dict:
        if self.bounds:
            return {**{f"{m}_ms": limit for m, limit in self.bounds}, "attainment": self.share}
        return {} if self.key is None else {self.key: self.limit_ms}


DEFAULT_CLASSES = (SLOClass("ttft", "ttft", 99, 200.0), SLOClass("tpot", "tpot", 99, 50.0),
                   SLOClass("throughput"))
_BOUND = r"(ttft|tpot|e2e)\s*<\s*([0-9.]+)"


def parse_slo(text: str) -> SLOClass:
    """``NAME:METRIC<VALUE`` with METRIC ``ttft_pNN``, ``tpot_pNN`` or ``e2e_pNN`` in ms (``chat:ttft_p99<300``);
    ``NAME:ttft<200,tpot<50@90%`` for an attainment share (90% of requests meet both); ``NAME:throughput`` for a
    class with no latency bound."""
    bare = re.fullmatch(r"\s*([\w.-]+)\s*:\s*throughput\s*", text)
    if bare:
        return SLOClass(bare.group(1))
    share = re.fullmatch(rf"\s*([\w.-]+)\s*:\s*({_BOUND}(?:\s*,\s*{_BOUND})*)\s*@\s*([0-9.]+)\s*(%?)\s*", text)
    if share:
        value = float(share.group(share.lastindex - 1)) / (100 if share.group(share.lastindex) else 1)
        if not 0 < value < 1:
            raise PlannerError(f"--slo {text!r}: the attainment share must lie between 0 and 100%")
        bounds = tuple((m, float(v)) for m, v in re.findall(_BOUND, share.group(2)))
        return SLOClass(share.group(1), bounds=bounds, share=value)
    match = re.fullmatch(r"\s*([\w.-]+)\s*:\s*(ttft|tpot|e2e)_p(\d+(?:\.\d+)?)\s*<\s*([0-9.]+)\s*", text)
    if not match:
        raise PlannerError(f"--slo {text!r}: expected NAME:METRIC<VALUE such as chat:ttft_p99<300 "
                           "(METRIC ttft_pNN, tpot_pNN or e2e_pNN, in ms), NAME:ttft<200,tpot<50@90% "
                           "or NAME:throughput")
    name, metric, pct, limit = match.groups()
    return SLOClass(name, metric, float(pct), float(limit))


def _metric_ms(result: SimResult, metric: str, percentile: float) -> float:
    values = {"ttft": result.ttft_s, "tpot": result.tpot_s, "e2e": result.e2e_s}[metric]
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, percentile) * 1e3) if finite.size else math.inf


def attainment(result: SimResult, bounds: tuple[tuple[str, float], ...]) -> float:
    """Share of the requests that completed within every bound (a request with no TPOT, one output token, meets
    any TPOT bound; a rejected or unfinished one meets none)."""
    ok = np.isfinite(result.finish) & ~result.rejected
    for metric, limit_ms in bounds:
        values = {"ttft": result.ttft_s, "tpot": result.tpot_s, "e2e": result.e2e_s}[metric] * 1e3
        ok &= np.isnan(values) | (values <= limit_ms) if metric == "tpot" else values <= limit_ms
    return float(ok.mean()) if ok.size else 0.0


def slo_load(result: SimResult, slo: SLOClass) -> float:
    """How close a run is to breaking the class's bound: 1 at the limit, above 1 broken."""
    if slo.bounds:
        missed = 1.0 - attainment(result, slo.bounds)
        return missed / (1.0 - slo.share)
    return _metric_ms(result, slo.metric, slo.percentile) / slo.limit_ms


def meets(result: SimResult, slo: SLOClass) -> bool:
    """Every request completed, the queue stayed bounded (not saturated; for latency classes also p99 queueing
    ≤ ``MAX_QUEUE_P99_S``: a replay of a finite trace always drains eventually, so a surge that builds minutes of
    backlog is not "sustainable"), and the class's bound holds (:func:`slo_load` ≤ 1)."""
    # requests the engine rejects up front (prompt ≥ max_model_len) are not the configuration's failure
    if (np.isnan(result.finish) & ~result.rejected).any() or saturated(result):
        return False
    queue = result.queue_s[np.isfinite(result.queue_s)]
    if slo.bounded and queue.size and np.percentile(queue, 99) > MAX_QUEUE_P99_S:
        return False
    return not slo.bounded or slo_load(result, slo) <= 1.0


@dataclass
class Search:
    """Replays of one workload, cached per (configuration, time scale)."""

    workload: SimWorkload
    model: ModelSpec
    gpu: GPU
    base: EngineSettings
    tp: int = 1
    cost: CostParams | None = None
    engine: str = "vllm-v1"
    progress: Callable[[float, str], None] | None = None
    simulations: int = 0

    def __post_init__(self):
        self.cache: dict[tuple, SimResult] = {}
        self.capacities: dict[tuple, float] = {}
        span = float(self.workload.arrival_s[-1] - self.workload.arrival_s[0])
        self.base_rate = (self.workload.n - 1) / span if span > 0 else math.inf

    def run(self, seqs: int, budget: int, scale: float, chunked: bool = True) -> SimResult:
        key = (seqs, budget, chunked, round(scale, 6))
        if key not in self.cache:
            work = replace(self.workload, arrival_s=self.workload.arrival_s / scale)
            # a request waiting past the queueing bound already fails every class: stop that replay there
            cfg = replace(self.base, max_num_seqs=seqs, max_num_batched_tokens=budget, chunked_prefill=chunked,
                          abort_wait_s=MAX_QUEUE_P99_S * 20)
            self.cache[key] = self.replay(work, cfg)
        return self.cache[key]

    def replay(self, work: SimWorkload, cfg: EngineSettings) -> SimResult:
        """One simulation on this search's model, GPU, engine, TP and cost model, counted."""
        self.simulations += 1
        return simulate(work, self.model, self.gpu, cfg, engine=self.engine, tp=self.tp, cost=self.cost)

    def capacity_scale(self, seqs: int, budget: int, chunked: bool = True) -> float:
        """An upper bound on the sustainable scale: the completion rate with every request queued at once
        (one replay per configuration, remembered)."""
        key = (seqs, budget, chunked)
        if key not in self.capacities:
            work = replace(self.workload, arrival_s=np.zeros(self.workload.n))
            cfg = replace(self.base, max_num_seqs=seqs, max_num_batched_tokens=budget, chunked_prefill=chunked)
            result = self.replay(work, cfg)
            duration = float(np.nanmax(result.finish))
            self.capacities[key] = (self.workload.n / duration) / self.base_rate * 1.2 if duration > 0 else 1.0
        return self.capacities[key]

    def max_scale(self, seqs: int, budget: int, chunked: bool, slo: SLOClass,
                  hi: float) -> tuple[float, SimResult | None]:
        """The largest time scale (rate multiplier) in ``[hi / 64, hi]`` where ``slo`` holds, by bisection in log."""
        lo_scale = hi / 64
        if not meets(self.run(seqs, budget, lo_scale, chunked), slo):
            return 0.0, None
        if meets(self.run(seqs, budget, hi, chunked), slo):
            return hi, self.run(seqs, budget, hi, chunked)
        lo, top = math.log(lo_scale), math.log(hi)
        for _ in range(BISECTION_STEPS):
            mid = (lo + top) / 2
            if meets(self.run(seqs, budget, math.exp(mid), chunked), slo):
                lo = mid
            else:
                top = mid
        return math.exp(lo), self.run(seqs, budget, math.exp(lo), chunked)


def recommend(search: Search, classes=DEFAULT_CLASSES, peak_rate_rps: float | None = None,
              headroom: float = 1.0, seqs_grid=SEQS_GRID, budget_grid=BUDGET_GRID,
              chunked_off: bool = True, refine: bool = True) -> list[dict]:
    """For each SLO class, the configuration with the highest sustainable rate, and what it implies: the grid
    first (best-capacity configurations first, so weaker ones are cut by their capacity bound), then, with
    ``refine``, the points halfway to the winner's neighbours on each axis.

    Returns
    -------
    list of dict
        Per class: ``name, slo, feasible, config, max_qps_per_replica, replicas_for_peak, gpus, predicted,
        vllm_args`` (CONTRACT.md), plus cost figures and the evaluated grid.
    """
    # chunked prefill on over the budget grid; off with the budget vLLM then requires (max_model_len); engines
    # that only take whole prompts have no budget to search
    whole_prompts = [(s, search.base.max_model_len, False) for s in seqs_grid]
    if get_engine(search.engine).chunks_prefill:
        configs = [(s, b, True) for s in seqs_grid for b in budget_grid if b >= s]
        configs += whole_prompts if chunked_off else []
    else:
        configs = whole_prompts
    caps = {}
    for i, (s, b, c) in enumerate(configs):
        caps[(s, b, c)] = search.capacity_scale(s, b, c)      # memoized: evaluate() asks again for free
        if search.progress:
            search.progress(0.2 * (i + 1) / len(configs), f"capacity of max_num_seqs {s}, budget {b}")
    out = []
    by_capacity = sorted(configs, key=lambda c: -caps[c])
    for ci, slo in enumerate(classes):
        grid: list[dict] = []
        for i, (s, b, c) in enumerate(by_capacity):
            _evaluate(search, slo, grid, s, b, c)
            if search.progress:
                done = 0.2 + 0.8 * (ci + (i + 1) / len(configs)) / len(classes)
                search.progress(done, f"{slo.name}: max_num_seqs {s}, budget {b}")
        # coarse to fine: halfway (geometrically) to the winner's grid neighbours on each axis
        if refine and _best_scale(grid) > 0:
            top = max((g for g in grid if not g["pruned"]), key=lambda g: g["max_qps"])
            s, b, c = top["max_num_seqs"], top["max_num_batched_tokens"], top["enable_chunked_prefill"]
            finer = [(s2, b, c) for s2 in _midpoints(s, seqs_grid, 8)]
            finer += [(s, b2, c) for b2 in _midpoints(b, budget_grid, 256) if c and b2 >= s]
            for s2, b2, c2 in finer:
                _evaluate(search, slo, grid, s2, b2, c2)
        out.append(_class_report(search, slo, grid, peak_rate_rps, headroom))
    return out


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
                 "ttft_p99_ms": _metric_ms(result, "ttft", 99) if result else None,
                 "throughput_tok_s": _output_rate(result) if result else None})


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


def _class_report(search: Search, slo: SLOClass, grid: list[dict], peak: float | None, headroom: float) -> dict:
    evaluated = [g for g in grid if not g["pruned"]]
    top = max(g["max_qps"] for g in evaluated)
    # rates within NEAR_BEST of the best are ties (the bisection resolves ~3%); the class's intent breaks them
    near = [g for g in evaluated if g["max_qps"] >= NEAR_BEST * top]
    if not slo.bounded:
        # throughput takes the largest budget, as vLLM's tuning guide advises (max_num_batched_tokens
        # > 8192 for throughput): real GEMMs gain efficiency well past the few hundred tokens the roofline's knee
        # models, which favours small chunks by a few percent, inside this search's resolution
        # (and at that budget, the best rate's batch: under KV pressure more sequences only add preemptions)
        budget = max(g["max_num_batched_tokens"] for g in near)
        best = max((g for g in near if g["max_num_batched_tokens"] == budget),
                   key=lambda g: (g["max_qps"], g["enable_chunked_prefill"]))
    else:
        # latency classes take the smallest: fewer sequences and a smaller budget keep the tail steadier and
        # leave KV headroom
        best = min(near, key=lambda g: (g["max_num_seqs"], g["max_num_batched_tokens"]))
    feasible = best["max_qps"] > 0
    if not feasible:      # the closest achievable: the configuration with the lowest metric at the lightest load
        def at_light(g):
            light = search.run(g["max_num_seqs"], g["max_num_batched_tokens"], _capacity_floor(search, g),
                               g["enable_chunked_prefill"])
            return slo_load(light, slo) if slo.bounded else math.inf
        best = min(evaluated, key=at_light)
        best["result"] = search.run(best["max_num_seqs"], best["max_num_batched_tokens"],
                                    _capacity_floor(search, best), best["enable_chunked_prefill"])
    result = best["result"]
    cfg = {**{k: best[k] for k in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")},
           "preemption_mode": search.base.preemption}
    qps = best["max_qps"]
    replicas = math.ceil(peak * headroom / qps) if feasible and peak else None
    out_tok_s = _output_rate(result) if result else 0.0
    price = search.gpu.price_per_hour * search.tp
    return {
        "name": slo.name, "slo": slo.as_dict(), "feasible": feasible, "config": cfg,
        "max_qps_per_replica": qps, "replicas_for_peak": replicas,
        "gpus": replicas * search.tp if replicas else None,
        "predicted": {f"{m}_ms": {"p50": _metric_ms(result, m, 50), "p99": _metric_ms(result, m, 99)}
                      for m in ("ttft", "tpot", "e2e")} if result else None,
        "throughput_tok_s": out_tok_s,
        "cost_per_hour": price * replicas if replicas else None,
        "cost_per_million_output_tokens": price / (out_tok_s * 3600 / 1e6) if out_tok_s else None,
        **launch(cfg, search), "scale": best.get("scale", 0.0),
        "grid": [{k: v for k, v in g.items() if k != "result"} for g in grid],
    }


def _output_rate(result: SimResult) -> float:
    done = np.isfinite(result.finish)
    span = float(np.nanmax(result.finish) - result.workload.arrival_s.min()) if done.any() else 0.0
    return float(result.workload.output_tokens[done].sum() / span) if span > 0 else 0.0


def _capacity_floor(search: Search, g: dict) -> float:
    return search.capacity_scale(g["max_num_seqs"], g["max_num_batched_tokens"], g["enable_chunked_prefill"]) / 64


def launch(cfg: dict, search: Search) -> dict:
    """``vllm_args``: the ``vllm serve`` flags (the engine's own for vLLM engines, else the vLLM V1 equivalent);
    ``launch_command``: the chosen engine's full command line."""
    engine = get_engine(search.engine)
    vllm = engine if engine.name.startswith("vllm") else get_engine("vllm-v1")
    model_id = search.model.hf_id or search.model.name
    return {"vllm_args": vllm.launch_args(cfg, search.tp, search.base.max_model_len),
            "launch_command": engine.command(cfg, model_id, search.tp, search.base.max_model_len)}
