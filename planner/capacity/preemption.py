"""Recompute against swap: seconds to resume a preempted sequence of each length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.capacity.memory import kv_bytes_per_token_per_layer, kv_dtype_bytes
from planner.catalog.gpus import GPU
from planner.catalog.models import ModelSpec, active_param_count


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

