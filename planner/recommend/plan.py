"""One recommendation run as the CLI, the Recommend page and the report make it: the SLO classes, the trace's
peak, a search per (tensor-parallel degree, ``max_new_tokens`` cap, preemption mode), the winner per class by
requests/s per GPU, and optionally each winner's sweeps and diagnosis. One code path, so all three agree."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Callable

import numpy as np

from planner.catalog.gpus import GPU
from planner.catalog.models import ModelSpec
from planner.errors import PlannerError
from planner.recommend.search import DEFAULT_CLASSES, Search, SLOClass, parse_slo, recommend
from planner.sim.cost_model import CostParams
from planner.sim.engines import get_engine
from planner.sim.run import engine_settings
from planner.sim.workload import SimWorkload
from planner.workload.fitting.arrivals import peak_summary

PEAK_MIN_SPAN_S = 60.0      # shorter traces have no per-minute peak to size for


@dataclass(frozen=True)
class RecommendOptions:
    """What a recommendation searches over.

    Attributes
    ----------
    slos : tuple of str
        ``NAME:METRIC<VALUE`` classes (``NAME:throughput``: no latency bound); empty: the default three.
    tp_options : tuple of int
        Tensor-parallel degrees to compare by requests/s per GPU; empty: ``tp`` only.
    max_new_tokens_options : tuple of str
        ``none``, integers or ``pNN`` (a percentile of the trace's outputs) to compare; empty: no cap.
    """

    tp: int = 1
    engine: str = "vllm-v1"
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    slos: tuple[str, ...] = ()
    headroom: float = 1.0
    tp_options: tuple[int, ...] = ()
    max_new_tokens_options: tuple[str, ...] = ()
    details: bool = False


def slo_classes(texts: tuple[str, ...]) -> list[SLOClass]:
    """Parsed classes, or the default three; names must differ (each names its row, command and charts)."""
    classes = [parse_slo(t) for t in texts] if texts else list(DEFAULT_CLASSES)
    names = [c.name for c in classes]
    if len(set(names)) < len(names):
        raise PlannerError(f"SLO class names repeat ({', '.join(names)}): expected a different name for each")
    return classes


def max_new_tokens_cap(text: str, outputs: np.ndarray) -> int | None:
    """``none``, an integer, or ``pNN``: that percentile of the trace's output lengths (the seed's procedure)."""
    text = text.strip().lower()
    if text == "none":
        return None
    try:
        return int(np.ceil(np.percentile(outputs, float(text[1:])))) if text.startswith("p") else int(text)
    except ValueError as exc:
        raise PlannerError(f"max_new_tokens option {text!r}: expected none, an integer or pNN") from exc


def plan_recommendation(workload: SimWorkload, model: ModelSpec, gpu: GPU, options: RecommendOptions,
                        cost: CostParams | None = None,
                        progress: Callable[[float, str], None] | None = None) -> dict:
    """Recommend settings per SLO class for ``workload`` on ``gpu``.

    Returns
    -------
    dict
        ``model, gpu, tp, engine, peak_rate_rps, trace_rate_rps, simulations, classes`` where each class row is
        :func:`planner.recommend.search.recommend`'s plus ``tp``, ``max_new_tokens``, ``truncated_share``,
        ``qps_per_gpu`` and ``compared`` (every option's requests/s per GPU); with ``details``, ``details``.
    """
    classes = slo_classes(options.slos)
    engine = get_engine(options.engine)
    span = float(workload.arrival_s[-1] - workload.arrival_s[0]) if workload.n > 1 else 0.0
    if span <= 0:
        raise PlannerError("the trace needs at least two distinct arrival times to be replayed at a rate")
    peak = peak_summary(workload.arrival_s)["peak_rate_rps"] if span > PEAK_MIN_SPAN_S else None
    caps = tuple(dict.fromkeys(max_new_tokens_cap(t, workload.output_tokens)
                               for t in options.max_new_tokens_options)) or (None,)
    combos = list(product(options.tp_options or (options.tp,), caps, engine.preemption_modes))
    searches, rows_by, skipped = {}, {}, []
    for i, (tp, cap, mode) in enumerate(combos):
        try:
            settings = engine_settings(model, gpu, tp=tp, gpu_memory_utilization=options.gpu_memory_utilization,
                                       max_model_len=options.max_model_len, kv_cache_dtype=options.kv_cache_dtype,
                                       preemption=mode, max_new_tokens=cap)
        except PlannerError as exc:      # this TP degree does not fit: compared away, not fatal
            skipped.append(f"TP {tp}: {exc}")
            continue
        step = _scaled(progress, i, len(combos), f"TP {tp}, cap {cap}, {mode}: " if len(combos) > 1 else "")
        search = Search(workload, model, gpu, settings, tp=tp, cost=cost, engine=engine.name, progress=step)
        rows_by[(tp, cap, mode)] = recommend(search, classes, peak, options.headroom)
        searches[(tp, cap, mode)] = search
    if not rows_by:
        raise PlannerError(f"{model.name} fits no option on {gpu.label}: " + "; ".join(skipped))
    def rank(combo, i):
        tp, cap, mode = combo
        # most requests/s per GPU; ties: fewer GPUs, no cap (or a looser one), recompute (no host memory)
        return (rows_by[combo][i]["max_qps_per_replica"] / tp, -tp, math.inf if cap is None else cap,
                mode == "recompute")

    out = []
    for i, slo in enumerate(classes):
        best = max(rows_by, key=lambda combo: rank(combo, i))
        tp, cap, mode = best
        chosen = rows_by[best][i]
        row = {**chosen, "tp": tp, "max_new_tokens": cap, "qps_per_gpu": chosen["max_qps_per_replica"] / tp,
               "truncated_share": float(np.mean(workload.output_tokens > cap)) if cap else 0.0,
               "compared": [{"tp": c[0], "max_new_tokens": c[1], "preemption_mode": c[2],
                             "qps_per_gpu": rows[i]["max_qps_per_replica"] / c[0]} for c, rows in rows_by.items()]}
        if options.details:
            from planner.recommend.diagnosis import class_details

            row["details"] = class_details(searches[best], row, slo, classes)
        out.append(row)
    return {"model": model.name, "gpu": gpu.name, "tp": options.tp, "engine": engine.name, "peak_rate_rps": peak,
            "trace_rate_rps": (workload.n - 1) / span, "simulations": sum(s.simulations for s in searches.values()),
            "skipped": skipped, "classes": out}


def _scaled(progress, index: int, count: int, prefix: str):
    if progress is None:
        return None
    return lambda f, msg: progress((index + f) / count, prefix + msg)
