"""Recompute against swap: seconds to resume a preempted sequence of each length, both from the cost model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.capacity.memory import kv_bytes_per_token
from planner.sim.cost_model import prefill_seconds

if TYPE_CHECKING:
    from planner.scenario import Scenario

# one host<->device copy's fixed cost (V0 swaps block by block, layer by layer): performance-models.md §2's ~5-10 µs
# per-kernel floor, AIConfigurator's 10 µs per p2p copy
HOST_COPY_LATENCY_S = 10e-6


def swap_block_seconds(scenario: Scenario) -> float:
    """Seconds to copy one KV block (every layer's K and V, as vLLM V0 swaps block by block, layer by layer) one
    way between GPU and host: each copy pays a launch latency plus its bytes over the host link."""
    model = scenario.model
    copies = model.layers * (1 if model.mla else 2)
    block_bytes = scenario.block_size * kv_bytes_per_token(model, scenario.kv_cache_dtype, scenario.tp)
    return copies * HOST_COPY_LATENCY_S + block_bytes / scenario.gpu.pcie_bytes_s



def preemption_cost(scenario: Scenario, lengths: np.ndarray) -> dict:
    """Seconds to resume a preempted sequence of each length: recompute (re-prefill) vs swap (out and back).

    Recompute: one prefill step of the whole sequence, priced by the scenario's cost model. Swap: every block out
    to the host and back, each block priced as the V0 engine's swap is (:func:`swap_block_seconds`). The crossover
    is where they meet.
    """
    s = np.asarray(lengths, dtype=float)
    recompute = prefill_seconds(scenario, s)
    swap = 2 * np.ceil(s / scenario.block_size) * swap_block_seconds(scenario)
    cheaper_swap = swap < recompute
    crossover = None
    if cheaper_swap.any() and not cheaper_swap.all():
        crossover = float(s[np.argmax(cheaper_swap != cheaper_swap[0])])
    return {"length": s, "recompute_s": recompute, "swap_s": swap, "crossover_tokens": crossover,
            "swap_cheaper_above": bool(crossover is not None and not cheaper_swap[0]),
            "note": "vLLM V1 always recomputes; swap is vLLM V0's (and the seed's) alternative"}
