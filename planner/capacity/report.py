"""One memory-and-capacity report for the CLI, the page and the report: the vLLM plan, the seed's arithmetic beside
it, and, given a trace, its concurrency, reservation trade-off, padding and preemption cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.capacity.concurrency import FitCheck, fit_check, trace_concurrency, with_context
from planner.capacity.memory import MemoryPlan, seed_pool_sequences
from planner.capacity.padding import expected_useful_fraction
from planner.capacity.preemption import preemption_cost
from planner.capacity.reservation import percentile_settings, tradeoff_table
from planner.tables import Table

if TYPE_CHECKING:
    from planner.scenario import Scenario
    from planner.workload.reuse import ReuseAnalysis

PADDING_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SEED_CONTEXTS = (4096, 8192)
WORKING_SET_SHARE = 0.95        # "holds the working set": the cache reaching 95% of the ideal hit rate
CONTRACT_KEYS = ("param_count", "weights_bytes", "kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "kv_pool_bytes",
                 "num_blocks", "kv_capacity_tokens", "max_concurrency")


@dataclass(frozen=True)
class CapacityReport:
    """The ``memory`` CLI object, typed: the plan and the views around it (trace sections only given a trace)."""

    scenario: Scenario
    plan: MemoryPlan
    seed: dict
    concurrency_curve: list[dict]
    fit_check: FitCheck | None = None
    trace: dict | None = None
    reservations: list[dict] | None = None
    max_new_tokens_settings: list[dict] | None = None
    padding: list[dict] | None = None
    preemption: dict | None = None
    prefix_cache: dict | None = None

    def to_dict(self) -> dict:
        """CONTRACT keys at the top, the plan term by term, then the optional sections."""
        out = {k: getattr(self.plan, k) for k in CONTRACT_KEYS}
        # the release whose profiling rules sized the pool: the same flags give other pools on other releases
        out.update({"model": self.scenario.model.name, "gpu": self.scenario.gpu.name, "tp": self.scenario.tp,
                    "vllm_version": self.scenario.overheads.vllm_version, "vllm_release": self.scenario.release.label,
                    "plan": self.plan.to_dict(), "breakdown_gib": self.plan.breakdown_gib(), "seed": self.seed,
                    "concurrency_curve": self.concurrency_curve})
        if self.fit_check is not None:
            out["fit_check"] = self.fit_check.to_dict()
        for key in ("trace", "reservations", "max_new_tokens_settings", "padding", "preemption", "prefix_cache"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def seed_view(scenario: Scenario) -> dict:
    """The seed article's simplified sequences-per-context, next to vLLM's (labelled: not an engine's figure)."""
    plan, utilization = scenario.memory, scenario.gpu_memory_utilization
    weights_gb = plan.weights_bytes / 1e9
    total_gb = scenario.gpu.nominal_memory_gb * scenario.tp
    rows = []
    for context in SEED_CONTEXTS:
        rows.append({"context": context,
                     "seed_binary": seed_pool_sequences(total_gb, utilization, weights_gb, plan.kv_bytes_per_token,
                                                        context, binary=True),
                     "seed_decimal": seed_pool_sequences(total_gb, utilization, weights_gb, plan.kv_bytes_per_token,
                                                         context, binary=False),
                     # vLLM's own line at that context (sliding windows held to their window), past the model's
                     # positions a context it refuses
                     "vllm": with_context(scenario, context).memory.max_concurrency
                     if context <= scenario.model.max_position else None})
    return {"formula": "(nominal GB × util − weights) / (KV per token × context); no activation, non-torch or "
                       "CUDA-graph memory; GB read as GiB (binary) or 10^9 B (decimal)",
            "pool_gb": total_gb * utilization - weights_gb, "rows": rows}


def prefix_cache_capacity(scenario: Scenario, reuse: ReuseAnalysis) -> dict:
    """What the scenario's KV pool holds of a trace's reusable prefixes: the LRU hit rate at the pool's size (the
    whole pool, as when few requests run: running requests' blocks shrink what is left for the cache), the ideal,
    and the KV that holds the working set (95% of the ideal hit rate) in tokens, GiB and the
    ``gpu_memory_utilization`` that would give a pool that large, or what lies beyond the GPU (CPU offload)."""
    plan = scenario.memory
    pool_tokens = plan.num_blocks * plan.block_size
    out = {"source": reuse.source, "describe": reuse.describe, "ideal_hit_rate": reuse.ideal_hit_rate,
           "pool_tokens": pool_tokens, "pool_gib": pool_tokens * plan.kv_bytes_per_token / 2**30,
           "lru_hit_rate_at_pool": reuse.hit_rate_at(pool_tokens),
           "working_set_tokens": reuse.working_set_tokens,
           "working_set_gib": reuse.working_set_tokens * plan.kv_bytes_per_token / 2**30,
           "holding_share": WORKING_SET_SHARE, "holding_tokens": None, "holding_gib": None,
           "gpu_memory_utilization_to_hold": None, "offload_gib": None,
           "curve": reuse.to_dict(plan.kv_bytes_per_token)["curve"]}
    tokens = reuse.tokens_for(WORKING_SET_SHARE)
    if tokens is not None:
        pool_bytes = tokens * plan.kv_bytes_per_token_per_gpu
        util = (plan.requested_bytes - max(plan.kv_pool_bytes, 0) + pool_bytes) / plan.total_bytes
        out.update(holding_tokens=tokens, holding_gib=tokens * plan.kv_bytes_per_token / 2**30,
                   gpu_memory_utilization_to_hold=util,
                   offload_gib=max(0.0, (util - 1.0) * plan.total_bytes * scenario.tp / 2**30))
    return out


def memory_plan_table(plan: MemoryPlan) -> Table:
    """The plan's figures for one GPU of the tensor-parallel group (the report's memory table)."""
    return Table("Memory plan (per GPU)", ["parameters (model)", "weights GiB", "KV bytes/token", "KV pool GiB",
                                           "blocks", "KV tokens", "max concurrency"],
                 [[plan.param_count, plan.weights_bytes_per_gpu / 2**30, plan.kv_bytes_per_token_per_gpu,
                   plan.kv_pool_bytes / 2**30, plan.num_blocks, plan.kv_capacity_tokens, plan.max_concurrency]])


def prefix_capacity_table(cache: dict) -> Table:
    """:func:`prefix_cache_capacity` as one row (the Memory page and the report)."""
    return Table(f"Prefix reuse against the KV pool ({cache['describe']})",
                 ["ideal hit rate", "LRU hit rate at the pool", "pool tokens", "working set tokens", "working set GiB",
                  f"KV for {cache['holding_share']:.0%} of ideal (GiB)", "gpu_memory_utilization to hold it",
                  "beyond the GPUs (GiB)"],
                 [[cache["ideal_hit_rate"], cache["lru_hit_rate_at_pool"], cache["pool_tokens"],
                   cache["working_set_tokens"], cache["working_set_gib"], cache["holding_gib"],
                   cache["gpu_memory_utilization_to_hold"], cache["offload_gib"]]])


def capacity_report(scenario: Scenario, lengths: tuple[np.ndarray, np.ndarray] | None = None,
                    fit: tuple[int, int] | None = None, reuse: ReuseAnalysis | None = None) -> CapacityReport:
    """The scenario's memory plan and the views around it.

    Parameters
    ----------
    lengths : (input_tokens, output_tokens), optional
        A trace's non-failed requests: adds trace concurrency, the reservation trade-off, padding, preemption.
    fit : (sequences, tokens), optional
        Adds the smallest TP degree that holds the model with room for that many sequences of that length.
    reuse : ReuseAnalysis, optional
        The trace's prefix reuse: adds what the pool holds of it (:func:`prefix_cache_capacity`).
    """
    plan = scenario.memory
    contexts = [c for c in (512 * 2**i for i in range(12)) if c <= scenario.model.max_position]
    curve = [{"max_model_len": c, "max_concurrency": with_context(scenario, c).memory.max_concurrency}
             for c in contexts]
    sections: dict = {"fit_check": fit_check(scenario, *fit) if fit is not None else None}
    if lengths is not None:
        prompt, output = lengths
        final = prompt + output
        block = scenario.block_size
        # whole blocks: a swap moves whole blocks, so lengths between them only add sawtooth
        grid = np.unique(np.ceil(np.geomspace(block, max(plan.max_model_len, 2 * block), 64) / block) * block)
        cost = preemption_cost(scenario, grid)
        sections.update(
            trace=trace_concurrency(plan, final),
            reservations=tradeoff_table(plan.kv_capacity_tokens, prompt, output, block),
            max_new_tokens_settings=percentile_settings(output),
            padding=[expected_useful_fraction(final, b) for b in PADDING_BATCH_SIZES],
            preemption={"crossover_tokens": cost["crossover_tokens"], "note": cost["note"],
                        "cheaper_at_shortest": "swap" if cost["swap_s"][0] < cost["recompute_s"][0] else "recompute",
                        "points": [{"length": float(s), "recompute_s": float(r), "swap_s": float(w)}
                                   for s, r, w in zip(grid, cost["recompute_s"], cost["swap_s"], strict=True)]})
    if reuse is not None and reuse.curve:
        sections["prefix_cache"] = prefix_cache_capacity(scenario, reuse)
    return CapacityReport(scenario, plan, seed_view(scenario), curve, **sections)
