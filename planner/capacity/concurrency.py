"""Capacity questions around the memory plan: how many of *this trace's* requests fit, the smallest GPU setup
that holds a model with room for N sequences, static-batching padding, and recompute vs swap preemption cost."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.capacity.memory import MemoryPlan, plan_memory
from planner.catalog.gpus import GPU, GiB
from planner.catalog.models import ModelSpec


def trace_concurrency(plan: MemoryPlan, final_lengths: np.ndarray) -> dict:
    """Requests of this trace that fit in the KV pool at once, by their final length (prompt + output).

    Each request holds whole blocks, so a length ``n`` costs ``ceil(n / block) · block`` tokens; the ceiling is
    also capped by ``max_num_seqs``.
    """
    lengths = np.asarray(final_lengths, dtype=float)
    held = np.ceil(lengths / plan.block_size) * plan.block_size
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


def fit_check(model: ModelSpec, gpu: GPU, sequences: int, tokens: int, *, gpu_memory_utilization: float = 0.9,
              kv_cache_dtype: str = "auto", weight_dtype: str = "bf16", max_tp: int = 64) -> FitCheck:
    """Try TP 1, 2, 4, … and report, for each, how many ``tokens``-long sequences fit and why not when short.

    The TP degree must divide the attention heads (vLLM's requirement); above 8 GPUs it spans nodes.
    """
    tried = []
    tp = 1
    while tp <= max_tp:
        if model.heads % tp:
            tp *= 2
            continue
        plan = plan_memory(model, gpu, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                           kv_cache_dtype=kv_cache_dtype, max_model_len=tokens, weight_dtype=weight_dtype)
        blocks_each = math.ceil(tokens / plan.block_size)
        fit = plan.num_blocks // blocks_each if blocks_each else 0
        if plan.kv_pool_bytes <= 0:
            reason = (f"weights {plan.weights_bytes_per_gpu / GiB:.1f} GiB per GPU plus overheads "
                      f"{(plan.activation_bytes + plan.non_torch_bytes) / GiB:.1f} GiB exceed the "
                      f"{plan.requested_bytes / GiB:.1f} GiB that gpu_memory_utilization {gpu_memory_utilization} "
                      f"allows: no room for KV")
        elif fit < sequences:
            reason = (f"KV pool {plan.kv_pool_bytes / GiB:.1f} GiB per GPU holds {plan.kv_capacity_tokens:,} tokens: "
                      f"{fit} sequences of {tokens:,}, short of {sequences}")
        else:
            reason = f"fits: {fit} sequences of {tokens:,} tokens ({plan.kv_capacity_tokens:,} KV tokens per GPU)"
        tried.append({"tp": tp, "kv_pool_gib": plan.kv_pool_bytes / GiB, "sequences_fit": int(fit),
                      "reason": reason})
        if fit >= sequences:
            return FitCheck(tp, tp, sequences, tokens, tried)
        tp *= 2
    return FitCheck(None, None, sequences, tokens, tried)


