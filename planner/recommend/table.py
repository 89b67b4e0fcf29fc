"""The recommendation table, built once for the Recommend page and the report."""

from __future__ import annotations

from planner.recommend.plan import Recommendation
from planner.tables import Table

COLUMNS = ["class", "SLO", "at its rate", "feasible", "max_num_seqs", "max_num_batched_tokens", "preemption", "TP",
           "max_new_tokens", "TTFT p99 ms", "TPOT p99 ms", "queue p99 ms", "queue", "output tok/s",
           "req/s per replica", "router", "replicas", "replicas (90% confidence)", "GPUs", "$/hour",
           "$/M output tokens (replica at its max rate)"]
FLEET_CHARTS = ("fleet", "schedule")      # the class charts the Recommendations section shows


def slo_text(slo: dict) -> str:
    """A class's SLO in words: ``ttft_p99_ms < 200``, ``90% of requests: ttft_ms < 200, tpot_ms < 50`` (an
    attainment share), or ``throughput`` (no latency bound)."""
    share = slo.get("attainment")
    bounds = ", ".join(f"{k} < {v:g}" for k, v in slo.items() if k != "attainment")
    if share is not None:
        return f"{share:.0%} of requests: {bounds}"
    return bounds or "throughput"


def achieved_text(achieved: dict) -> str | None:
    """What the class's own bound reads at its rate: ``ttft_p90_ms 281.8``, ``93.1% of requests``; None for a
    throughput class."""
    if "attainment" in achieved:
        return f"{achieved['attainment']:.1%} of requests"
    return next((f"{k} {v:.4g}" for k, v in achieved.items()), None)


def class_table(recommendation: Recommendation) -> Table:
    """One row per SLO class: settings, predicted p99 latencies, throughput, rate per replica, fleet and cost."""
    rows = []
    for r in recommendation.classes:
        predicted = r.predicted or {}
        rows.append([r.name, slo_text(r.slo), achieved_text(r.achieved), r.feasible, r.config["max_num_seqs"],
                     r.config["max_num_batched_tokens"], r.config["preemption_mode"], r.tp, r.max_new_tokens,
                     (predicted.get("ttft_ms") or {}).get("p99"), (predicted.get("tpot_ms") or {}).get("p99"),
                     r.queue_ms["p99"] if r.feasible else None, r.verdict if r.feasible else None,
                     r.throughput_tok_s, r.max_qps_per_replica if r.feasible else None, r.router, r.replicas_for_peak,
                     r.fleet.confident_replicas if r.fleet else None, r.gpus, r.cost_per_hour,
                     r.cost_per_million_output_tokens])
    return Table("Per SLO class", COLUMNS, rows)


def fleet_table(recommendation: Recommendation) -> Table:
    """Per class, the fleet found by simulation: N that holds (and why N − 1 does not), its p99s, the count that
    holds with 90% confidence, the growth what-if and what the scaling schedule saves."""
    rows = []
    for r in recommendation.classes:
        f = r.fleet
        if f is None or f.replicas is None:
            rows.append([r.name, r.router, None, None, None, None, None, None, None, None, None])
            continue
        at = {p.replicas: p for p in f.curve}
        fewer = at.get(f.replicas - 1)
        rows.append([r.name, f.router, f.replicas, at[f.replicas].ttft_p99_ms, at[f.replicas].tpot_p99_ms,
                     at[f.replicas].queue_p99_ms,
                     f"{f.replicas - 1}: {fewer.why}" if fewer else ("0: no replica" if f.replicas == 1 else None),
                     f.confident_replicas, f.held_share,
                     f"×{f.growth:g}: {f.growth_replicas if f.growth_replicas else 'none holds'}",
                     f.gpu_hours_saved])
    return Table(f"Fleet at the trace's rate × {recommendation.headroom:g}, simulated",
                 ["class", "router", "replicas", "TTFT p99 ms", "TPOT p99 ms", "queue p99 ms", "one fewer fails",
                  "replicas (90% confidence)", "share of resamples held", "growth", "GPU-hours saved by schedule"],
                 rows)


def schedule_tables(recommendation: Recommendation) -> list[Table]:
    """Per class with a fleet: the replicas each window of the trace needs."""
    out = []
    for r in recommendation.classes:
        if r.fleet and r.fleet.schedule:
            out.append(Table(f"{r.name}: replicas per window (scaling schedule)",
                             ["from (h)", "to (h)", "requests", f"req/s × {recommendation.headroom:g} headroom",
                              "replicas"],
                             [[w["start_s"] / 3600, w["end_s"] / 3600, w["requests"], w["rate_rps"], w["replicas"]]
                              for w in r.fleet.schedule]))
    return out
