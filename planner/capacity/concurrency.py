"""Capacity questions around the memory plan: how many of *this trace's* requests fit at once, and the smallest
tensor-parallel setup that holds a model with room for N sequences."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from planner.capacity.memory import MemoryPlan
from planner.catalog.gpus import GiB
from planner.errors import PlannerError
from planner.scenario import tp_refusal

if TYPE_CHECKING:
    from planner.scenario import Scenario


def trace_concurrency(plan: MemoryPlan, final_lengths: np.ndarray) -> dict:
    """Requests of this trace that fit in the KV pool at once, by their final length (prompt + output).

    Each request holds whole blocks of its KV, every token but the last sampled (which is never fed back), so a
    length ``n`` costs ``ceil((n - 1) / block) · block`` tokens; the ceiling is also capped by ``max_num_seqs``.
    """
    lengths = np.asarray(final_lengths, dtype=float)
    held = np.ceil(np.maximum(lengths - 1, 1) / plan.block_size) * plan.block_size
    mean, p95 = float(held.mean()), float(np.percentile(held, 95))
    by_mean, by_p95 = plan.kv_capacity_tokens / mean, plan.kv_capacity_tokens / p95
    return {"mean_final_tokens": float(lengths.mean()), "p95_final_tokens": float(np.percentile(lengths, 95)),
            "concurrency_at_mean": by_mean, "concurrency_at_p95": by_p95,
            "concurrency_at_max_model_len": plan.max_concurrency, "max_num_seqs": plan.max_num_seqs,
            "binding": "max_num_seqs" if plan.max_num_seqs < by_mean else "KV cache"}


@dataclass(frozen=True)
class FitCheck:
    """The smallest tensor-parallel degree that holds the model with room for the asked sequences."""

    tp: int | None
    gpus: int | None
    sequences: int
    tokens: int
    tried: list[dict]          # tp, kv_pool_gib, sequences that fit, reason

    def to_dict(self) -> dict:
        return {"tp": self.tp, "gpus": self.gpus, "sequences": self.sequences, "tokens": self.tokens,
                "tried": self.tried}


def with_context(scenario: Scenario, max_model_len: int, **changes) -> Scenario:
    """The scenario at another ``max_model_len`` (and ``changes``). Without chunked prefill its token budget grows
    to hold a whole prompt, as vLLM requires: a budget given for a shorter context refused the longer ones."""
    if not scenario.chunked_prefill:
        changes["max_num_batched_tokens"] = max(scenario.max_num_batched_tokens, max_model_len)
    return scenario.replace(max_model_len=max_model_len, **changes)


def fit_check(scenario: Scenario, sequences: int, tokens: int, max_tp: int = 64) -> FitCheck:
    """Try the scenario at TP 1, 2, 4, … and report, for each, how many ``tokens``-long sequences fit and why not
    when short. Everything else is the scenario's: dtypes, block size, limits and overheads (weights fitted from a
    startup log scale with the TP degree; the other overheads are kept as fitted). Degrees vLLM refuses for the
    model (its heads, widths, vocabulary or FP8 blocks, :func:`planner.scenario.tp_refusal`) are skipped; above 8
    GPUs a replica spans nodes."""
    if sequences < 1 or tokens < 1:
        raise PlannerError(f"--fit {sequences}x{tokens}: expected a positive number of sequences and tokens")
    if tokens > scenario.model.max_position:
        raise PlannerError(f"--fit {sequences}x{tokens}: {scenario.model.name} takes at most "
                           f"{scenario.model.max_position:,} tokens a sequence; expected at most that many")
    tried = []
    for tp in (2**k for k in range(int(math.log2(max_tp)) + 1)):
        if tp_refusal(scenario.model, tp, scenario.weight_dtype):
            continue
        weights = scenario.overheads.weights_bytes
        overheads = (replace(scenario.overheads, weights_bytes=math.ceil(weights * scenario.tp / tp))
                     if weights is not None else scenario.overheads)
        plan = with_context(scenario, tokens, tp=tp, overheads=overheads).memory
        # what vLLM's concurrency line counts, a sliding-window layer holding only its window
        fit = int(plan.num_blocks // plan.blocks_per_max_len_request)
        if plan.kv_pool_bytes <= 0:
            # the overheads as the plan takes them: activations, non-torch memory and, where counted, CUDA graphs
            overheads_bytes = plan.requested_bytes - plan.weights_bytes_per_gpu - plan.kv_pool_bytes
            reason = (f"weights {plan.weights_bytes_per_gpu / GiB:.1f} GiB per GPU plus overheads "
                      f"{overheads_bytes / GiB:.1f} GiB exceed the "
                      f"{plan.requested_bytes / GiB:.1f} GiB that gpu_memory_utilization "
                      f"{scenario.gpu_memory_utilization} allows: no room for KV")
        elif fit < sequences:
            reason = (f"KV pool {plan.kv_pool_bytes / GiB:.1f} GiB per GPU holds {plan.kv_capacity_tokens:,} tokens: "
                      f"{fit} sequences of {tokens:,}, short of {sequences}")
        else:
            reason = f"fits: {fit} sequences of {tokens:,} tokens ({plan.kv_capacity_tokens:,} KV tokens per GPU)"
        tried.append({"tp": tp, "kv_pool_gib": plan.kv_pool_bytes / GiB, "sequences_fit": int(fit),
                      "reason": reason})
        if fit >= sequences:
            return FitCheck(tp, tp, sequences, tokens, tried)
    return FitCheck(None, None, sequences, tokens, tried)
