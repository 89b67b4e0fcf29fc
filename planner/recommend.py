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

from planner.cost_model import CostParams
from planner.errors import PlannerError
from planner.hardware import GPU
from planner.models import ModelSpec
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
    """``metric`` (ttft, tpot or e2e) at ``percentile`` below ``limit_ms``; no metric: throughput only."""

    name: str
    metric: str | None = None
    percentile: float = 99.0
    limit_ms: float | None = None

    @property
    def key(self) -> str | None:
        return None if self.metric is None else f"{self.metric}_p{self.percentile:g}_ms"

    def as_dict(self) -> dict:
        return {} if self.key is None else {self.key: self.limit_ms}


DEFAULT_CLASSES = (SLOClass("ttft", "ttft", 99, 200.0), SLOClass("tpot", "tpot", 99, 50.0),
                   SLOClass("throughput"))


def parse_slo(text: str) -> SLOClass:
    """``NAME:METRIC<VALUE`` with METRIC ``ttft_pNN``, ``tpot_pNN`` or ``e2e_pNN`` in ms (``chat:ttft_p99<300``);
    ``NAME:throughput`` is a class with no latency bound."""
    bare = re.fullmatch(r"\s*([\w.-]+)\s*:\s*throughput\s*", text)
    if bare:
        return SLOClass(bare.group(1))
    match = re.fullmatch(r"\s*([\w.-]+)\s*:\s*(ttft|tpot|e2e)_p(\d+(?:\.\d+)?)\s*<\s*([0-9.]+)\s*", text)
    if not match:
        raise PlannerError(f"--slo {text!r}: expected NAME:METRIC<VALUE such as chat:ttft_p99<300 "
                           "(METRIC ttft_pNN, tpot_pNN or e2e_pNN, in ms), or NAME:throughput")
    name, metric, pct, limit = match.groups()
    return SLOClass(name, metric, float(pct), float(limit))


def _metric_ms(result: SimResult, metric: str, percentile: float) -> float:
    values = {"ttft": result.ttft_s, "tpot": result.tpot_s, "e2e": result.e2e_s}[metric]
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, percentile) * 1e3) if finite.size else math.inf


def meets(result: SimResult, slo: SLOClass) -> bool:
    """Every request completed, the queue stayed bounded (not saturated; for latency classes also p99 queueing
    ≤ ``MAX_QUEUE_P99_S``: a replay of a finite trace always drains eventually, so a surge that builds minutes of
    backlog is not "sustainable"), and the SLO's percentile is under its limit."""
    # requests the engine rejects up front (prompt ≥ max_model_len) are not the configuration's failure
    if (np.isnan(result.finish) & ~result.rejected).any() or saturated(result):
        return False
    queue = result.queue_s[np.isfinite(result.queue_s)]
    if slo.metric is not None and queue.size and np.percentile(queue, 99) > MAX_QUEUE_P99_S:
        return False
    return slo.metric is None or _metric_ms(result, slo.metric, slo.percentile) <= slo.limit_ms


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
            self.cache[key] = simulate(work, self.model, self.gpu, cfg, engine=self.engine, tp=self.tp,
                                       cost=self.cost)
            self.simulations += 1
        return self.cache[key]

    def capacity_scale(self, seqs: int, budget: int, chunked: bool = True) -> float:
        """An upper bound on the sustainable scale: the completion rate with every request queued at once
        (one replay per configuration, remembered)."""
        key = (seqs, budget, chunked)
        if key not in self.capacities:
            work = replace(self.workload, arrival_s=np.zeros(self.workload.n))
            cfg = replace(self.base, max_num_seqs=seqs, max_num_batched_tokens=budget, chunked_prefill=chunked)
            result = simulate(work, self.model, self.gpu, cfg, engine=self.engine, tp=self.tp, cost=self.cost)
            self.simulations += 1
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
              chunked_off: bool = True) -> list[dict]:
    """For each SLO class, the grid configuration with the highest sustainable rate, and what it implies.

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
        caps[(s, b, c)] = search.capacity_scale(s, b, c)
        if search.progress:
            search.progress(0.2 * (i + 1) / len(configs), f"capacity of max_num_seqs {s}, budget {b}")
    out = []
    by_capacity = sorted(configs, key=lambda c: -caps[c])
    for ci, slo in enumerate(classes):
        grid, best = [], 0.0
        for i, (s, b, c) in enumerate(by_capacity):
            entry = {"max_num_seqs": s, "max_num_batched_tokens": b, "enable_chunked_prefill": c}
            if caps[(s, b, c)] <= best:      # its capacity bound cannot beat the best found: cut the branch
                grid.append({**entry, "max_qps": None, "result": None, "pruned": True})
                continue
            scale, result = search.max_scale(s, b, c, slo, caps[(s, b, c)])
            best = max(best, scale)
            grid.append({**entry, "max_qps": scale * search.base_rate, "scale": scale, "result": result,
                         "pruned": False, "ttft_p99_ms": _metric_ms(result, "ttft", 99) if result else None,
                         "throughput_tok_s": _output_rate(result) if result else None})
            if search.progress:
                done = 0.2 + 0.8 * (ci + (i + 1) / len(configs)) / len(classes)
                search.progress(done, f"{slo.name}: max_num_seqs {s}, budget {b}")
        out.append(_class_report(search, slo, grid, peak_rate_rps, headroom))
    return out


def _class_report(search: Search, slo: SLOClass, grid: list[dict], peak: float | None, headroom: float) -> dict:
    evaluated = [g for g in grid if not g["pruned"]]
    top = max(g["max_qps"] for g in evaluated)
    if slo.metric is None:
        best = max(evaluated, key=lambda g: (g["max_qps"], g["max_num_batched_tokens"]))
    else:
        # latency classes take the smallest settings within NEAR_BEST of the best rate: fewer sequences and a
        # smaller budget keep the tail steadier and leave KV headroom, at almost no cost in rate
        near = [g for g in evaluated if g["max_qps"] >= NEAR_BEST * top]
        best = min(near, key=lambda g: (g["max_num_seqs"], g["max_num_batched_tokens"]))
    feasible = best["max_qps"] > 0
    if not feasible:      # the closest achievable: the configuration with the lowest metric at the lightest load
        def at_light(g):
            light = search.run(g["max_num_seqs"], g["max_num_batched_tokens"], _capacity_floor(search, g),
                               g["enable_chunked_prefill"])
            return _metric_ms(light, slo.metric, slo.percentile) if slo.metric else math.inf
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
