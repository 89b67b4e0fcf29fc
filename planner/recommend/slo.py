"""SLO classes: a latency percentile under a limit, an attainment share (DistServe's goodput definition), or
throughput only; parsed from ``NAME:METRIC<VALUE`` text, and judged on a replay (:func:`meets`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.sim.results import SimResult

# sustainable means requests start within this (p99), whatever the class: Vidur's capacity search bounds the p99
# scheduling delay at 5 s (--scheduling-delay-slo-value 5.0; reference/prefix-cache-and-routing.md §4.2)
MAX_QUEUE_S = 5.0
# a replay may stop once any request has waited this many times the bound: it already fails every class (a
# search's pruning; the verdict of the stopped replay is overloaded)
ABORT_QUEUE_FACTOR = 20


def abort_wait_s(max_queue_s: float) -> float:
    """The wait at which a search's replay stops (:data:`ABORT_QUEUE_FACTOR` × the queueing bound)."""
    return max_queue_s * ABORT_QUEUE_FACTOR


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
        value = float(share.group(share.lastindex - 1))
        value /= 100 if share.group(share.lastindex) or value > 1 else 1      # @90 is 90%, as @90% and @0.9 are
        if not 0 < value < 1:
            raise PlannerError(f"--slo {text!r}: the attainment share must lie between 0 and 100% (such as @90% "
                               "or @0.9)")
        bounds = tuple((m, _limit_ms(text, v)) for m, v in re.findall(_BOUND, share.group(2)))
        if len({m for m, _ in bounds}) < len(bounds):
            raise PlannerError(f"--slo {text!r}: a metric is bounded twice; expected each of ttft, tpot and e2e at "
                               "most once (the tighter bound is the one that holds)")
        return SLOClass(share.group(1), bounds=bounds, share=value)
    match = re.fullmatch(r"\s*([\w.-]+)\s*:\s*(ttft|tpot|e2e)_p(\d+(?:\.\d+)?)\s*<\s*([0-9.]+)\s*", text)
    if not match:
        several = "; one class each: repeat --slo for several" if ";" in text else ""
        raise PlannerError(f"--slo {text!r}: expected NAME:METRIC<VALUE such as chat:ttft_p99<300 "
                           "(METRIC ttft_pNN, tpot_pNN or e2e_pNN, in ms), NAME:ttft<200,tpot<50@90% "
                           f"or NAME:throughput{several}")
    name, metric, pct, limit = match.groups()
    if not 0 < float(pct) <= 100:
        raise PlannerError(f"--slo {text!r}: percentile p{pct} is not one; expected above p0 and at most p100, "
                           "such as p50, p99 or p99.9")
    return SLOClass(name, metric, float(pct), _limit_ms(text, limit))


def _limit_ms(text: str, value: str) -> float:
    """A bound's limit: a positive number of milliseconds (the pattern lets ``1.2.3`` and ``0`` through)."""
    try:
        limit = float(value)
    except ValueError:
        limit = float("nan")
    if not (limit > 0 and limit < float("inf")):
        raise PlannerError(f"--slo {text!r}: limit {value!r} is not a positive number of milliseconds")
    return limit


def attainment(result: SimResult, bounds: tuple[tuple[str, float], ...]) -> float:
    """Share of the requests that completed within every bound (a request with no TPOT, one output token, meets
    any TPOT bound; one rejected for the KV pool, or unfinished, meets none). Prompts past ``max_model_len`` are
    left out, as :func:`holds` leaves them: the API server refuses them whatever the settings, and counted as
    misses they made a 95% class infeasible on every configuration where 5% of the prompts were too long."""
    ok = np.isfinite(result.finish) & ~result.rejected
    for metric, limit_ms in bounds:
        values = {"ttft": result.ttft_s, "tpot": result.tpot_s, "e2e": result.e2e_s}[metric] * 1e3
        ok &= np.isnan(values) | (values <= limit_ms) if metric == "tpot" else values <= limit_ms
    fits = ~result.too_long
    return float(ok[fits].mean()) if fits.any() else 0.0


def slo_load(result: SimResult, slo: SLOClass) -> float:
    """How close a run is to breaking the class's bound: 1 at the limit, above 1 broken."""
    if slo.bounds:
        missed = 1.0 - attainment(result, slo.bounds)
        return missed / (1.0 - slo.share)
    return result.metric_ms(slo.metric, slo.percentile) / slo.limit_ms


def holds(result: SimResult, max_queue_s: float = MAX_QUEUE_S) -> str | None:
    """Why a replay is not a sustainable operating point whatever the class, or None when it is: every request
    completed, the verdict is ``stable`` and p99 queueing stays within ``max_queue_s`` (a replay of a finite trace
    always drains eventually, so a surge that builds a backlog is not "sustainable")."""
    # prompts past max_model_len are refused by the API server whatever the settings: not this configuration's
    # failure; a request larger than the KV pool is
    if result.pool_refused.any():
        return f"{int(result.pool_refused.sum()):,} requests need more KV blocks than the pool holds"
    if (np.isnan(result.finish) & ~result.rejected).any():
        return "requests left unfinished"
    if result.verdict != "stable":
        return f"queue {result.verdict}"
    queue_p99_s = result.queue_p99_s()
    if queue_p99_s > max_queue_s:
        return f"queue p99 {queue_p99_s:.1f} s > {max_queue_s:g} s"
    return None


def meets(result: SimResult, slo: SLOClass, max_queue_s: float = MAX_QUEUE_S) -> bool:
    """The replay :func:`holds` (stable queue, p99 queueing within ``max_queue_s``) and the class's bound holds
    (:func:`slo_load` ≤ 1)."""
    if holds(result, max_queue_s) is not None:
        return False
    return not slo.bounded or slo_load(result, slo) <= 1.0
