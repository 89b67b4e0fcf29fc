"""The recommendation table, built once for the Recommend page and the report."""

from __future__ import annotations

from planner.recommend.plan import Recommendation
from planner.tables import Table

COLUMNS = ["class", "SLO", "feasible", "max_num_seqs", "max_num_batched_tokens", "preemption", "TP",
           "max_new_tokens", "TTFT p99 ms", "TPOT p99 ms", "output tok/s", "req/s per replica", "replicas", "GPUs",
           "$/hour", "$/M output tokens"]


def slo_text(slo: dict) -> str:
    """A class's SLO in words: ``ttft_p99_ms < 200``, ``90% of requests: ttft_ms < 200, tpot_ms < 50`` (an
    attainment share), or ``throughput`` (no latency bound)."""
    share = slo.get("attainment")
    bounds = ", ".join(f"{k} < {v:g}" for k, v in slo.items() if k != "attainment")
    if share is not None:
        return f"{share:.0%} of requests: {bounds}"
    return bounds or "throughput"


def class_table(recommendation: Recommendation) -> Table:
    """One row per SLO class: settings, predicted p99 latencies, throughput, rate per replica, fleet and cost."""
    rows = []
    for r in recommendation.classes:
        predicted = r.predicted or {}
        rows.append([r.name, slo_text(r.slo), r.feasible, r.config["max_num_seqs"], r.config["max_num_batched_tokens"],
                     r.config["preemption_mode"], r.tp, r.max_new_tokens,
                     (predicted.get("ttft_ms") or {}).get("p99"), (predicted.get("tpot_ms") or {}).get("p99"),
                     r.throughput_tok_s, r.max_qps_per_replica, r.replicas_for_peak, r.gpus, r.cost_per_hour,
                     r.cost_per_million_output_tokens])
    return Table("Per SLO class", COLUMNS, rows)
