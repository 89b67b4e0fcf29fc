"""Capacity questions around the memory plan: how many of *this trace's* requests fit, the smallest GPU setup
that holds a model with room for N sequences, static-batching padding, and recompute vs swap preemption cost."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.hardware import GPU, GiB
from planner.memory import MemoryPlan, kv_bytes_per_token_per_layer, kv_dtype_bytes, plan_memory
from planner.models import ModelSpec, active_param_count


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


def useful_fraction(lengths: np.ndarray) -> float:
    """Static batching: real tokens over the slots of a batch padded to its longest member."""
    lengths = np.asarray(lengths, dtype=float)
    return float(lengths.sum() / (lengths.size * lengths.max()))


def expected_useful_fraction(lengths: np.ndarray, batch_size: int, draws: int = 2000, seed: int = 0) -> dict:
    """Mean and spread of the useful fraction for batches of ``batch_size`` drawn from the trace (seeded)."""
    lengths = np.asarray(lengths, dtype=float)
    rng = np.random.default_rng(seed)
    batches = lengths[rng.integers(0, lengths.size, size=(draws, batch_size))]
    fractions = batches.sum(axis=1) / (batch_size * batches.max(axis=1))
    return {"batch_size": batch_size, "mean": float(fractions.mean()), "p10": float(np.percentile(fractions, 10)),
            "p90": float(np.percentile(fractions, 90))}


@dataclass(frozen=True)
class PreemptionCosts:
    """Per-GPU assumptions of the preemption estimate (roofline placeholders until the calibrated cost model)."""

    mfu: float = 0.5                    # prefill FLOP efficiency
    memcpy_latency_s: float = 10e-6     # per host<->device copy: V0 swaps block by block, layer by layer
    pcie_efficiency: float = 1.0


def preemption_cost(model: ModelSpec, gpu: GPU, lengths: np.ndarray, *, tp: int = 1, kv_cache_dtype: str = "auto",
                    block_size: int = 16, costs: PreemptionCosts = PreemptionCosts()) -> dict:
    """Seconds to resume a preempted sequence of each length: recompute (re-prefill) vs swap (out and back).

    Recompute: ``(2 · active params · s + 2 · layers · heads · head_dim · s²) / (MFU · peak FLOPs · TP)`` (causal
    attention). Swap: every block of every layer (K and V apart) copied to the host and back, each copy paying a
    launch latency plus its bytes over PCIe. The crossover is where they meet, computed from these figures.
    """
    s = np.asarray(lengths, dtype=float)
    attn_width = model.heads * (model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim if model.mla
                                else model.head_dim)
    flops = 2 * active_param_count(model) * s + 2 * model.layers * attn_width * s**2
    recompute = flops / (costs.mfu * gpu.bf16_flops * tp)
    per_layer_rank = kv_bytes_per_token_per_layer(model, kv_dtype_bytes(kv_cache_dtype), tp)
    tensors = 1 if model.mla else 2
    copy_bytes = block_size * per_layer_rank / tensors
    copies = np.ceil(s / block_size) * model.layers * tensors
    swap = 2 * copies * (costs.memcpy_latency_s + copy_bytes / (gpu.pcie_bytes_s * costs.pcie_efficiency))
    cheaper_swap = swap < recompute
    crossover = None
    if cheaper_swap.any() and not cheaper_swap.all():
        crossover = float(s[np.argmax(cheaper_swap != cheaper_swap[0])])
    return {"length": s, "recompute_s": recompute, "swap_s": swap, "crossover_tokens": crossover,
            "swap_cheaper_above": bool(crossover is not None and not cheaper_swap[0]),
            "note": "vLLM V1 always recomputes; swap is vLLM V0's (and the seed's) alternative"}
