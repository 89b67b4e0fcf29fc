"""How many replicas a class needs: the fleet simulated behind its router on the trace at its own rate × headroom,
how sure that count is (block-bootstrap resamples of the trace), what growth does to it, and how the count varies
over the trace's windows (a scaling schedule).

The per-replica rate of a recommendation says what one replica sustains on average; surges, routing imbalance and
the tail of the SLO decide what N replicas hold, so the count is found by simulating them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from planner.executors import Executor, get_executor
from planner.recommend.block_length import circular_block_length
from planner.recommend.parallel import Memo, parallel_map
from planner.recommend.slo import SLOClass, abort_wait_s, holds, meets
from planner.scenario import Scenario
from planner.sim.fleet import MAX_REPLICAS, Fleet
from planner.sim.results import SimResult
from planner.sim.run import simulate_on
from planner.sim.workload import SimWorkload
from planner.workload.rates import arrival_rate_rps

BLOCK_S = 60.0              # the bootstrap reads a trace in minutes, and its blocks are whole runs of them
MIN_BLOCKS = 10             # a trace shorter than 10 minutes is read in 10 bins instead
BLOCKS_PER_REQUEST = 10     # a sparse trace's minutes, mostly empty, are merged past ten bins per request
# fewer bins say too little of their dependence to lengthen a block (Politis and White's search looks for five
# insignificant autocorrelations in a row within √n + 5 lags): those are bootstrapped a bin per block
MIN_DEPENDENCE_BINS = 30
CONFIDENCE = 0.9
RESAMPLES = 20
GROWTH = 1.5                # the what-if: traffic grown by half
SCHEDULE_WINDOW_S = 3600.0  # the scaling schedule's window: an hour (shorter traces: a sixth of the span)
SCHEDULE_MAX_WINDOWS = 48


@dataclass(frozen=True)
class FleetPoint:
    """The fleet of ``replicas`` on one workload: whether the class holds, the verdict, its p99s and queueing."""

    replicas: int
    holds: bool
    verdict: str
    metric_ms: float            # the class's focus metric (its SLO metric at its percentile)
    ttft_p99_ms: float
    tpot_p99_ms: float
    queue_p99_ms: float
    why: str | None             # why it does not hold (None when it does)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FleetSizing:
    """A class's fleet: the point estimate (smallest N that holds on the trace at rate × headroom, N − 1 shown
    failing in ``curve``), the count that holds on the trace and in at least ``confidence`` of ``resamples``
    block-bootstrap resamples (never below the point estimate: resampling blocks can break up a surge the trace
    itself has), the growth what-if and the scaling schedule."""

    router: str
    replicas: int | None
    curve: list[FleetPoint]
    confident_replicas: int | None
    confidence: float
    resamples: int
    held_share: float | None        # share of resamples the point estimate holds in
    block_s: float                  # the bootstrap's block on the trace's own clock (÷ headroom on the replay's)
    growth: float
    growth_replicas: int | None
    schedule: list[dict]
    gpu_hours_scheduled: float | None
    gpu_hours_peak: float | None

    @property
    def gpu_hours_saved(self) -> float | None:
        if self.gpu_hours_scheduled is None or self.gpu_hours_peak is None:
            return None
        # the windows' widths sum to the span up to rounding: an unchanged fleet saves 0, not -1.4e-17 (+ 0.0: not -0)
        return round(self.gpu_hours_peak - self.gpu_hours_scheduled, 9) + 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["curve"] = [p.to_dict() for p in self.curve]
        out["gpu_hours_saved"] = self.gpu_hours_saved
        return out


def block_bootstrap(work: SimWorkload, seed: int, block_s: float) -> SimWorkload:
    """One resample of ``work``: its span cut into whole blocks of ``block_s`` seconds (:func:`block_seconds`
    divides the span evenly), as many drawn with replacement and laid end to end, each block's requests keeping
    their offsets, lengths and (per copy, distinct) groups."""
    start = work.arrival_s - work.arrival_s.min()
    blocks = max(1, int(round(float(start.max()) / block_s))) if block_s > 0 else 1
    which = np.minimum((start // block_s).astype(np.int64), blocks - 1) if block_s > 0 else np.zeros(work.n, int)
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(blocks + 1))
    draws = np.random.default_rng(seed).integers(0, blocks, blocks)
    picks = [order[bounds[b]:bounds[b + 1]] for b in draws]
    idx = np.concatenate(picks) if picks else np.empty(0, np.int64)
    slot = np.repeat(np.arange(blocks), [p.size for p in picks])
    arrival = slot * block_s + (start[idx] - which[idx] * block_s)
    group = None
    if work.group is not None:
        groups = int(work.group.max()) + 1
        group = np.where(work.group[idx] >= 0, work.group[idx] + slot * groups, -1)
    sort = np.argsort(arrival, kind="stable")
    prefix = None if work.prefix is None else work.prefix.take(idx[sort], slot[sort])
    return SimWorkload(arrival[sort], work.input_tokens[idx][sort], work.output_tokens[idx][sort],
                       f"{work.source} (block bootstrap {seed})", None if group is None else group[sort], prefix)


def block_seconds(work: SimWorkload) -> float:
    """The bootstrap's block: as many whole minutes as the arrivals' own dependence asks
    (:func:`planner.recommend.block_length.circular_block_length` on the requests counted per minute), so that a
    surge stays whole in a resample; the span divided evenly into them, so no block is partial and a resample spans
    what the trace spans. A trace shorter than :data:`MIN_BLOCKS` minutes is read in that many bins, and one of
    fewer than :data:`MIN_DEPENDENCE_BINS` bins is bootstrapped a bin per block; at most
    :data:`BLOCKS_PER_REQUEST` bins per request keep a resample's cost to its requests (one stray timestamp years
    off would otherwise cut the span into 10⁸ minutes, most of them empty)."""
    span = float(np.ptp(work.arrival_s)) if work.n else 0.0
    if span <= 0:
        return 0.0
    bins = max(MIN_BLOCKS, min(round(span / BLOCK_S), BLOCKS_PER_REQUEST * work.n))
    which = np.minimum(((work.arrival_s - work.arrival_s.min()) // (span / bins)).astype(np.int64), bins - 1)
    per_block = circular_block_length(np.bincount(which, minlength=bins)) if bins >= MIN_DEPENDENCE_BINS else 1.0
    return span / max(1, round(bins / per_block))


class FleetSearch:
    """Fleet replays of one configuration for one class, cached per (workload key, replicas)."""

    def __init__(self, scenario: Scenario, slo: SLOClass, router: str, max_queue_s: float, counter=None,
                 executor: Executor | None = None):
        self.scenario, self.slo, self.router, self.max_queue_s = scenario, slo, router, max_queue_s
        self.cache = Memo()
        self.counter = counter
        self.executor = executor or get_executor()

    def point(self, key, work: SimWorkload, replicas: int) -> FleetPoint:
        def compute() -> FleetPoint:
            # a replica count far below the need is known to fail once any request waits 20× the bound (a
            # search's early stop)
            result = simulate_on(self.executor, work, self.scenario, fleet=Fleet(replicas, self.router),
                                 abort_wait_s=abort_wait_s(self.max_queue_s))
            if self.counter is not None:
                self.counter()
            return _point(result, replicas, self.slo, self.max_queue_s)
        return self.cache.get((key, replicas), compute)

    def smallest(self, key, work: SimWorkload, guess: int) -> int | None:
        """The smallest N whose fleet holds on ``work``, searched from ``guess``: galloping down while fleets
        hold, or up while they fail, then bisecting the bracket (a fleet that holds is assumed to hold with more
        replicas); None when even :data:`MAX_REPLICAS` do not."""
        guess = min(max(1, guess), MAX_REPLICAS)
        if self.point(key, work, guess).holds:
            hi, step = guess, 1
            lo = hi - step
            while lo >= 1 and self.point(key, work, lo).holds:
                hi, step = lo, step * 2
                lo = hi - step
            lo = max(lo, 0)              # 0 replicas: serves nothing, fails by definition
        else:
            lo, step = guess, 1
            hi = min(lo + step, MAX_REPLICAS)
            while not self.point(key, work, hi).holds:
                if hi == MAX_REPLICAS:
                    return None
                lo, step = hi, step * 2
                hi = min(lo + step, MAX_REPLICAS)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.point(key, work, mid).holds:
                hi = mid
            else:
                lo = mid
        return hi


def _point(result: SimResult, replicas: int, slo: SLOClass, max_queue_s: float) -> FleetPoint:
    metric, percentile = slo.focus
    why = holds(result, max_queue_s)
    ok = meets(result, slo, max_queue_s)
    if why is None and not ok:
        why = f"{slo.name} SLO missed"
    return FleetPoint(replicas, ok, result.verdict, result.metric_ms(metric, percentile),
                      result.metric_ms("ttft", 99), result.metric_ms("tpot", 99), result.queue_p99_s() * 1e3,
                      None if ok else why)


def size_fleet(workload: SimWorkload, scenario: Scenario, slo: SLOClass, qps_per_replica: float, *,
               router: str, headroom: float = 1.0, max_queue_s: float, resamples: int = RESAMPLES,
               growth: float = GROWTH, counter=None, executor: Executor | None = None) -> FleetSizing:
    """Size the fleet of ``scenario`` (one class's recommended configuration) for ``workload`` at its own rate ×
    ``headroom``: the point estimate with N − 1 failing (and N + 1 for the curve), the count that holds in
    :data:`CONFIDENCE` of ``resamples`` block-bootstrap resamples, the count at rate × ``growth`` and per window.
    Every fleet replay runs on ``executor`` (default: the local one), the resamples side by side.
    """
    search = FleetSearch(scenario, slo, router, max_queue_s, counter, executor)
    work = replace(workload, arrival_s=workload.arrival_s / headroom)
    # whole minutes of the trace's own clock, where its dependence is: read off the replay's compressed clock, a
    # headroom of 4 gave a 10-minute trace fewer bins than the dependence estimate takes, and 245-s blocks
    block = block_seconds(workload)
    rate = arrival_rate_rps(work.arrival_s) or 0.0
    guess = max(1, math.ceil(rate / qps_per_replica)) if qps_per_replica > 0 else 1
    point = search.smallest("trace", work, guess)
    if point is None:
        return FleetSizing(router, None, _curve(search, "trace"), None, CONFIDENCE, resamples, None,
                           block, growth, None, [], None, None)
    for n in (point - 2, point - 1, point + 1):       # the chart's neighbours: N − 1 fails, N + 1 holds
        if 1 <= n <= MAX_REPLICAS:
            search.point("trace", work, n)
    samples = [block_bootstrap(work, seed, block / headroom) for seed in range(resamples)]
    needs = parallel_map(lambda i, _: search.smallest(("boot", i), samples[i], point), range(resamples),
                         workers=search.executor.workers)
    held = float(np.mean([search.point(("boot", i), samples[i], point).holds for i in range(resamples)])) \
        if resamples else None
    confident = confident_count(needs, CONFIDENCE, point) if resamples else None
    grown = replace(work, arrival_s=work.arrival_s / growth)
    growth_replicas = search.smallest("growth", grown, math.ceil(point * growth))
    schedule = _schedule(search, workload, headroom, qps_per_replica)
    hours = float(np.ptp(workload.arrival_s)) / 3600
    scheduled = sum(w["replicas"] * (w["end_s"] - w["start_s"]) / 3600 for w in schedule) * scenario.tp \
        if schedule and all(w["replicas"] is not None for w in schedule) else None
    return FleetSizing(router, point, _curve(search, "trace"), confident, CONFIDENCE, resamples, held, block,
                       growth, growth_replicas, schedule, scheduled, point * hours * scenario.tp)


def confident_count(needs: list[int | None], confidence: float, point: int) -> int | None:
    """The smallest N that holds on the trace (``point`` replicas or more) and in at least ``confidence`` of the
    resamples, each of which needs ``needs[i]`` (None: no count holds it)."""
    ordered = sorted(math.inf if n is None else n for n in needs)
    value = ordered[math.ceil(confidence * len(ordered)) - 1]
    return None if math.isinf(value) else max(point, int(value))


def _curve(search: FleetSearch, key) -> list[FleetPoint]:
    return sorted((p for (k, _), p in search.cache.items() if k == key), key=lambda p: p.replicas)


def _schedule(search: FleetSearch, workload: SimWorkload, headroom: float, qps_per_replica: float) -> list[dict]:
    """Replicas each window of the trace needs: the window's own requests at their times × ``headroom`` (the
    windows and rates are on the trace's own clock, the rates already × ``headroom``)."""
    span = float(np.ptp(workload.arrival_s))
    if span <= 0:
        return []
    width = SCHEDULE_WINDOW_S if span >= 2 * SCHEDULE_WINDOW_S else span / 6
    windows = min(SCHEDULE_MAX_WINDOWS, math.ceil(span / width))
    width = span / windows
    start = workload.arrival_s.min()
    which = np.minimum(((workload.arrival_s - start) // width).astype(np.int64), windows - 1)
    rows = []
    for w in range(windows):
        mask = which == w
        rate = float(mask.sum() / width * headroom)
        row = {"window": w, "start_s": w * width, "end_s": (w + 1) * width, "requests": int(mask.sum()),
               "rate_rps": rate, "replicas": 1}      # an idle window keeps one replica up
        if mask.any():
            window = workload.subset(mask)
            part = replace(window, arrival_s=window.arrival_s / headroom, source=f"window {w}")
            guess = max(1, math.ceil(rate / qps_per_replica)) if qps_per_replica > 0 else 1
            row["replicas"] = search.smallest(("window", w), part, guess)
        rows.append(row)
    return rows
