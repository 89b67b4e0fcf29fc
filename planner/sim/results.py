"""What a simulation gives: per-request outcomes (:class:`SimResult`) and the typed summary every view reads
(:class:`SimulationSummary`, whose ``to_dict()`` is the ``simulate --json`` object of ../shared/CONTRACT.md)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from planner.jsonable import PERCENTILES
from planner.sim.fleet import ONE, Fleet
from planner.sim.stability import saturated, verdict, window_note
from planner.sim.workload import SimWorkload
from planner.tables import Table

if TYPE_CHECKING:
    from planner.scenario import Scenario

BUCKET_EDGES = (512, 2048)
TIMELINE_POINTS = 2000


def _percentile_ms(values_s: np.ndarray, percentile: float) -> float:
    """The one way a latency percentile is computed (ms, linear interpolation, finite values; inf without any)."""
    v = values_s[np.isfinite(values_s)] * 1e3
    return float(np.percentile(v, percentile)) if v.size else math.inf


@dataclass(frozen=True)
class SimResult:
    """Per-request outcomes (seconds; NaN where undefined) of one replay of ``workload`` in ``scenario``."""

    scenario: Scenario
    workload: SimWorkload
    first_token: np.ndarray
    finish: np.ndarray
    first_scheduled: np.ndarray
    preemptions: np.ndarray
    rejected: np.ndarray
    too_long: np.ndarray        # rejected up front: the prompt does not fit max_model_len
    steps: int
    timeline: np.ndarray
    sim_wall_s: float
    generated: np.ndarray
    free_blocks_at_end: int
    replica: np.ndarray | None = None     # the replica each request went to (-1: rejected up front, or never routed)
    fleet: Fleet = ONE
    hit_tokens: np.ndarray | None = None  # prompt tokens each found in the prefix cache (None: no cache modelled)
    rehit_tokens: np.ndarray | None = None  # tokens found again on re-admission after a preemption

    @cached_property
    def verdict(self) -> str:
        """``stable``, ``backlogged`` or ``overloaded`` (:mod:`planner.sim.stability`), computed once."""
        return verdict(self.workload.arrival_s, self.first_scheduled, self.rejected)

    @property
    def aborted(self) -> bool:
        """Whether the replay stopped early (a search's ``abort_wait_s``): requests left never scheduled, so its
        throughput covers a window of the replay, not the whole, and its percentiles only the requests served."""
        return bool(np.any(~self.rejected & np.isnan(self.first_scheduled)))

    def queue_p99_s(self) -> float:
        """p99 queueing delay (arrival to first scheduled) in seconds; a request never scheduled (a search's
        abort) counts as waiting forever."""
        queue = self.queue_s[~self.rejected]
        if not queue.size:
            return 0.0
        ordered = np.sort(np.where(np.isnan(queue), np.inf, queue))
        # numpy's linear interpolation, written out: next to an infinite neighbour it would compute inf · 0
        position = 0.99 * (ordered.size - 1)
        low = int(position)
        weight = position - low
        if weight == 0 or low + 1 >= ordered.size or math.isinf(ordered[low]):
            return float(ordered[low])
        return float(ordered[low] + (ordered[low + 1] - ordered[low]) * weight)

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token - self.workload.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        out = self.workload.output_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(out > 1, (self.finish - self.first_token) / (out - 1), np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish - self.workload.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        return self.first_scheduled - self.workload.arrival_s

    @property
    def completed(self) -> np.ndarray:
        return np.isfinite(self.finish)

    @property
    def pool_refused(self) -> np.ndarray:
        """Requests refused for needing more KV blocks than the pool holds (the prompts past ``max_model_len``,
        which the API server refuses whatever the settings, are not among them)."""
        return self.rejected & ~self.too_long

    @property
    def duration_s(self) -> float:
        """Simulated seconds from the first arrival to the last completion."""
        if not self.completed.any():
            return 0.0
        return float(np.nanmax(self.finish) - self.workload.arrival_s.min())

    def metric_ms(self, metric: str, percentile: float) -> float:
        """A percentile of ``ttft``, ``tpot`` or ``e2e`` over the requests that have it (inf when none does),
        computed as the summary's :class:`Percentiles` are, to the last bit."""
        values = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2e": self.e2e_s}[metric]
        return _percentile_ms(values, percentile)

    def output_rate_tok_s(self) -> float:
        """Output tokens of completed requests per simulated second."""
        span = self.duration_s
        return float(self.workload.output_tokens[self.completed].sum() / span) if span > 0 else 0.0


@dataclass(frozen=True)
class Percentiles:
    """One latency's percentile block in ms (CONTRACT.md's keys; None where no request has it)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    p999: float | None
    max: float | None

    @classmethod
    def of(cls, values_s: np.ndarray) -> Percentiles:
        if not np.isfinite(values_s).any():
            return cls(None, None, None, None, None, None, None)
        finite_ms = values_s[np.isfinite(values_s)] * 1e3
        return cls(**{k: _percentile_ms(values_s, q * 100) for k, q in PERCENTILES.items()},
                   mean=float(finite_ms.mean()), max=float(finite_ms.max()))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BucketLatency:
    """Latencies of the completed requests whose prompt falls in one input-length bucket."""

    bucket: str
    n: int
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles

    def to_dict(self) -> dict:
        return {"bucket": self.bucket, "n": self.n, "ttft_ms": self.ttft_ms.to_dict(),
                "tpot_ms": self.tpot_ms.to_dict(), "e2e_ms": self.e2e_ms.to_dict()}


@dataclass(frozen=True)
class Timeline:
    """The engine's state, sampled to at most :data:`TIMELINE_POINTS` steps."""

    time_s: list[float]
    running: list[float]
    waiting: list[float]
    blocks_used: list[float]
    step_ms: list[float]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ReplicaSummary:
    """One replica of a fleet: the requests routed to it and their latencies. A prompt past ``max_model_len`` is
    refused before routing (``rejected_too_long`` of the fleet's summary) and counts on no replica."""

    replica: int
    requests: int
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    queue_ms: Percentiles
    prefix_cache: dict

    def to_dict(self) -> dict:
        return {"replica": self.replica, "requests": self.requests, "ttft_ms": self.ttft_ms.to_dict(),
                "tpot_ms": self.tpot_ms.to_dict(), "queue_ms": self.queue_ms.to_dict(),
                "prefix_cache": self.prefix_cache}


@dataclass(frozen=True)
class SimulationSummary:
    """One replay, summarized: the ``simulate`` CLI object's fields (CONTRACT.md) and what the pages draw.

    ``rejected`` counts every request the engine refused; ``rejected_too_long`` those whose prompt does not fit
    ``max_model_len`` (vLLM refuses them with a 400), which :attr:`rejection_note` explains.
    """

    engine: str
    workload: str
    requests: int
    completed: int
    rejected: int
    rejected_too_long: int
    longest_prompt: int
    max_model_len: int
    model_max_len: int
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles
    queue_ms: Percentiles
    throughput_tok_s: dict
    completion_rate_rps: float     # completed requests per simulated second: a throughput, not the offered rate
    preemptions: int
    duration_s: float
    sim_wall_s: float
    steps: int
    settings: dict
    per_input_bucket: list[BucketLatency]
    timeline: Timeline
    replicas: int = 1
    router: str = ONE.router
    verdict: str = "stable"
    saturated: bool = False     # the load exceeded capacity (:func:`planner.sim.stability.saturated`)
    prefix_cache: dict = field(default_factory=dict)
    per_replica: list[ReplicaSummary] = field(default_factory=list)
    window_note: str | None = None      # the verdict may not hold for the rate (stability.window_note)

    @property
    def rejection_note(self) -> str | None:
        """Why requests were refused and what to change (None when every request fitted): prompts past
        ``max_model_len``, and requests larger than the whole KV pool (a pool vLLM would not start with)."""
        note = rejection_note(self.requests, self.rejected_too_long, self.longest_prompt, self.max_model_len,
                              self.model_max_len)
        outgrew = self.rejected - self.rejected_too_long
        if not outgrew:
            return note
        pool = (f"{outgrew:,} of {self.requests:,} requests were rejected: each needs more KV blocks than the "
                f"{self.settings['num_blocks']:,}-block pool holds (vLLM refuses to start on a pool smaller than one "
                "max_model_len request); expected a larger pool, or a shorter max_model_len")
        return f"{note} {pool}" if note else pool

    @property
    def notes(self) -> list[str]:
        """What every view of the replay warns of: refused requests, then a window too short for the verdict."""
        return [note for note in (self.rejection_note, self.window_note) if note]

    def latency_table(self) -> Table:
        """TTFT, TPOT, E2E and queueing percentiles (ms), one row each."""
        rows = [[name, *(getattr(getattr(self, key), p) for p in ("p50", "p90", "p99", "mean"))]
                for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2E", "e2e_ms"),
                                  ("queueing", "queue_ms"))]
        return Table("Latency (ms)", ["metric", "p50", "p90", "p99", "mean"], rows)

    def bucket_table(self) -> Table:
        """TTFT and TPOT p50/p99 per input-length bucket."""
        rows = [[b.bucket, b.n, b.ttft_ms.p50, b.ttft_ms.p99, b.tpot_ms.p50, b.tpot_ms.p99]
                for b in self.per_input_bucket]
        return Table("By input length", ["input tokens", "requests", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms",
                                          "TPOT p99 ms"], rows)

    def throughput_table(self) -> Table:
        """Tokens and requests per second, preemptions and the queue's verdict."""
        t = self.throughput_tok_s
        return Table("Throughput", ["input tok/s", "output tok/s", "completed req/s", "preemptions", "queue"],
                     [[t["input"], t["output"], self.completion_rate_rps, self.preemptions, self.verdict]])

    def replica_table(self) -> Table:
        """Each replica's share of the requests, its TTFT/TPOT/queueing p50 and p99 and its prefix-cache hits."""
        rows = [[r.replica + 1, r.requests, r.ttft_ms.p50, r.ttft_ms.p99, r.tpot_ms.p50, r.tpot_ms.p99,
                 r.queue_ms.p99, r.prefix_cache["hit_rate"]] for r in self.per_replica]
        return Table(f"Per replica ({self.router})", ["replica", "requests", "TTFT p50 ms", "TTFT p99 ms",
                                                     "TPOT p50 ms", "TPOT p99 ms", "queue p99 ms",
                                                     "prefix hit rate"], rows)

    def prefix_cache_table(self) -> Table:
        """The replay's prefix cache: whether the engine caches, where the identity came from, the hits."""
        c = self.prefix_cache
        return Table("Prefix cache", ["cache", "identity", "hit rate", "hit tokens", "prompt tokens",
                                      "found again after preemption"],
                     [["on" if c["enabled"] else "off", c["identity"] or "none", c["hit_rate"], c["hit_tokens"],
                       c["prompt_tokens"], c["rehit_tokens"]]])

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("engine", "workload", "requests", "completed", "rejected",
                                             "rejected_too_long")}
        out.update({k: getattr(self, k).to_dict() for k in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")})
        out.update({k: getattr(self, k) for k in ("throughput_tok_s", "completion_rate_rps", "preemptions",
                                                  "duration_s", "sim_wall_s", "steps", "saturated", "settings")})
        out["rejection_note"] = self.rejection_note
        out["window_note"] = self.window_note
        out.update(replicas=self.replicas, router=self.router, verdict=self.verdict, prefix_cache=self.prefix_cache,
                   per_replica=[r.to_dict() for r in self.per_replica])
        out["per_input_bucket"] = [b.to_dict() for b in self.per_input_bucket]
        out["timeline"] = self.timeline.to_dict()
        return out


def rejection_note(requests: int, too_long: int, longest_prompt: int, max_model_len: int,
                   model_max_len: int, rated: bool = False) -> str | None:
    """The sentence every simulating view shows when prompts exceed ``max_model_len``; ``rated``: the view gives
    request rates (a recommendation's per replica), which count the refused requests as arrivals."""
    if not too_long:
        return None
    fix = (f"raise --max-model-len (this model allows up to {model_max_len:,})" if max_model_len < model_max_len
           else "serve a model with a longer context")
    rates = ", and the request rates count them as arrivals though they cost the server nothing" if rated else ""
    return (f"{too_long:,} of {requests:,} requests ({too_long / requests:.1%}) were rejected: their prompts "
            f"(up to {longest_prompt:,} tokens) do not fit max_model_len {max_model_len:,}, and vLLM refuses such "
            f"requests. The latencies cover the rest{rates}; to serve them, {fix}.")


def prefix_cache_stats(result: SimResult, mask: np.ndarray) -> dict:
    """The ``prefix_cache`` object (CONTRACT.md Additions) of the completed requests ``mask`` selects: prompt tokens
    served from the cache at their first admission over all their prompt tokens (0 with the cache off or no prefix
    identity). ``rehit_tokens`` adds what requests found again when re-admitted after a preemption: vLLM counts
    those lookups too (as ``preempted`` queries); a lookup that failed to get blocks counts nowhere here.
    ``enabled``: the engine cached prefixes in this replay; ``identity``: where the prefix identity came from
    (None: the workload carries none, so no prompt hit could be found; a preempted request still finds its own
    blocks again)."""
    done = mask & result.completed
    prompt_tokens = int(result.workload.input_tokens[done].sum())
    hits = int(result.hit_tokens[done].sum()) if result.hit_tokens is not None else 0
    rehits = int(result.rehit_tokens[done].sum()) if result.rehit_tokens is not None else 0
    return {"hit_rate": hits / prompt_tokens if prompt_tokens else 0.0, "hit_tokens": hits,
            "prompt_tokens": prompt_tokens, "rehit_tokens": rehits, "enabled": result.hit_tokens is not None,
            "identity": result.workload.prefix.source if result.workload.prefix is not None else None}


def per_replica(result: SimResult) -> list[ReplicaSummary]:
    """Each replica's requests and latencies (a single replica's one row repeats the fleet's figures: CONTRACT.md's
    ``per_replica`` holds one row per replica)."""
    out = []
    for k in range(result.fleet.replicas):
        mine = result.replica == k
        out.append(ReplicaSummary(k, int(mine.sum()), Percentiles.of(result.ttft_s[mine]),
                                  Percentiles.of(result.tpot_s[mine]), Percentiles.of(result.queue_s[mine]),
                                  prefix_cache_stats(result, mine)))
    return out


def summarize(result: SimResult, buckets: tuple[float, ...] = BUCKET_EDGES) -> SimulationSummary:
    """The typed summary of a replay: percentiles, throughput, per-bucket latencies and a timeline sample."""
    w, done = result.workload, result.completed
    duration = result.duration_s
    tokens_in = float(w.input_tokens[done].sum())
    tokens_out = float(w.output_tokens[done].sum())
    per_bucket = []
    bounds = [0.0, *sorted(buckets), math.inf]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        mask = (w.input_tokens >= lo) & (w.input_tokens < hi) & done
        per_bucket.append(BucketLatency(f"{lo:g}+" if math.isinf(hi) else f"{lo:g}–{hi:g}", int(mask.sum()),
                                        Percentiles.of(result.ttft_s[mask]), Percentiles.of(result.tpot_s[mask]),
                                        Percentiles.of(result.e2e_s[mask])))
    timeline = result.timeline
    if timeline.shape[0] > TIMELINE_POINTS:
        timeline = timeline[:: math.ceil(timeline.shape[0] / TIMELINE_POINTS)]
    scenario = result.scenario
    return SimulationSummary(
        engine=scenario.engine, workload=w.source, requests=w.n, completed=int(done.sum()),
        rejected=int(result.rejected.sum()), rejected_too_long=int(result.too_long.sum()),
        longest_prompt=int(w.input_tokens.max()) if w.n else 0, max_model_len=scenario.max_model_len,
        model_max_len=scenario.model.max_position,
        ttft_ms=Percentiles.of(result.ttft_s), tpot_ms=Percentiles.of(result.tpot_s),
        e2e_ms=Percentiles.of(result.e2e_s), queue_ms=Percentiles.of(result.queue_s),
        throughput_tok_s={"input": tokens_in / duration if duration else 0.0,
                          "output": tokens_out / duration if duration else 0.0,
                          "total": (tokens_in + tokens_out) / duration if duration else 0.0},
        completion_rate_rps=float(done.sum() / duration) if duration else 0.0,
        preemptions=int(result.preemptions.sum()), duration_s=duration, sim_wall_s=result.sim_wall_s,
        steps=result.steps, settings=asdict(scenario.settings),
        per_input_bucket=per_bucket, replicas=result.fleet.replicas, router=result.fleet.router,
        verdict=result.verdict, saturated=saturated(w.arrival_s, result.first_scheduled, result.rejected),
        prefix_cache=prefix_cache_stats(result, done), per_replica=per_replica(result),
        window_note=window_note(w.arrival_s, result.rejected, result.e2e_s, result.verdict),
        timeline=Timeline(timeline[:, 0].tolist(), timeline[:, 1].tolist(), timeline[:, 2].tolist(),
                          timeline[:, 3].tolist(), (timeline[:, 4] * 1e3).tolist()))


def goodput(result: SimResult, ttft_ms: float | None = None, tpot_ms: float | None = None) -> float:
    """Requests per second that completed within the SLO (a missing bound is not checked)."""
    ok = result.completed.copy()
    if ttft_ms is not None:
        ok &= result.ttft_s * 1e3 <= ttft_ms
    if tpot_ms is not None:
        ok &= ~(result.tpot_s * 1e3 > tpot_ms)
    span = result.duration_s
    return float(ok.sum() / span) if span else 0.0
