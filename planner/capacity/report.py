"""One memory-and-capacity report for the CLI and the page: the vLLM plan, the seed's arithmetic beside it,
and, given a trace, its concurrency, reservation trade-off, padding and preemption cost."""

from __future__ import annotations

import numpy as np

from planner.capacity.concurrency import fit_check, trace_concurrency
from planner.capacity.memory import MemoryPlan, Overheads, plan_memory, seed_pool_sequences
from planner.capacity.padding import expected_useful_fraction
from planner.capacity.preemption import preemption_cost
from planner.capacity.reservation import percentile_settings, tradeoff_table
from planner.catalog.gpus import GPU, GiB
from planner.catalog.models import ModelSpec

PADDING_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SEED_CONTEXTS = (4096, 8192)


def seed_view(model: ModelSpec, gpu: GPU, plan: MemoryPlan, tp: int, utilization: float) -> dict:
    """The seed article's simplified sequences-per-context, next to vLLM's (labelled: not an engine's figure)."""
    weights_gb = plan.weights_bytes / 1e9
    total_gb = gpu.nominal_memory_gb * tp
    rows = []
    for context in SEED_CONTEXTS:
        rows.append({"context": context,
                     "seed_binary": seed_pool_sequences(total_gb, utilization, weights_gb, plan.kv_bytes_per_token,
                                                        context, binary=True),
                     "seed_decimal": seed_pool_sequences(total_gb, utilization, weights_gb, plan.kv_bytes_per_token,
                                                         context, binary=False),
                     "vllm": plan.num_blocks / -(-context // plan.block_size)})
    return {"formula": "(nominal GB × util − weights) / (KV per token × context); no activation, non-torch or "
                       "CUDA-graph memory; GB read as GiB (binary) or 10^9 B (decimal)",
            "pool_gb": total_gb * utilization - weights_gb, "rows": rows}


def memory_report(model: ModelSpec, gpu: GPU, *, tp: int = 1, gpu_memory_utilization: float = 0.9,
                  kv_cache_dtype: str = "auto", max_model_len: int | None = None, block_size: int = 16,
                  max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                  num_gpu_blocks: int | None = None, weight_dtype: str = "bf16", overheads: Overheads | None = None,
                  lengths: tuple[np.ndarray, np.ndarray] | None = None,
                  fit: tuple[int, int] | None = None) -> dict:
    """The ``memory`` CLI object: CONTRACT keys at the top, the plan term by term, and the optional sections.

    Parameters
    ----------
    lengths : (input_tokens, output_tokens), optional
        A trace's non-failed requests: adds trace concurrency, the reservation trade-off, padding, preemption.
    fit : (sequences, tokens), optional
        Adds the smallest TP degree that holds the model with room for that many sequences of that length.
    """
    plan = plan_memory(model, gpu, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                       kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, block_size=block_size,
                       max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                       num_gpu_blocks=num_gpu_blocks, weight_dtype=weight_dtype, overheads=overheads)
    out = {k: getattr(plan, k) for k in ("param_count", "weights_bytes", "kv_bytes_per_token",
                                         "kv_bytes_per_token_per_gpu", "kv_pool_bytes", "num_blocks",
                                         "kv_capacity_tokens", "max_concurrency")}
    out.update({"model": model.name, "gpu": gpu.name, "tp": tp, "plan": plan.as_dict(),
                "breakdown_gib": breakdown(plan), "seed": seed_view(model, gpu, plan, tp, gpu_memory_utilization)})
    contexts = [c for c in (512 * 2**i for i in range(12)) if c <= max(model.max_position, plan.max_model_len)]
    out["concurrency_curve"] = []
    for context in contexts:
        point = plan_memory(model, gpu, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                            kv_cache_dtype=kv_cache_dtype, max_model_len=context, block_size=block_size,
                            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                            num_gpu_blocks=num_gpu_blocks, weight_dtype=weight_dtype, overheads=overheads)
        out["concurrency_curve"].append({"max_model_len": context, "max_concurrency": point.max_concurrency})
    if fit is not None:
        check = fit_check(model, gpu, fit[0], fit[1], gpu_memory_utilization=gpu_memory_utilization,
                          kv_cache_dtype=kv_cache_dtype, weight_dtype=weight_dtype)
        out["fit_check"] = {"tp": check.tp, "gpus": check.gpus, "sequences": check.sequences,
                            "tokens": check.tokens, "tried": check.tried}
    if lengths is not None:
        prompt, output = lengths
        final = prompt + output
        out["trace"] = trace_concurrency(plan, final)
        out["reservations"] = tradeoff_table(plan.kv_capacity_tokens, prompt, output)
        out["max_new_tokens_settings"] = percentile_settings(output)
        out["padding"] = [expected_useful_fraction(final, b) for b in PADDING_BATCH_SIZES]
        # whole blocks: a swap moves whole blocks, so lengths between them only add sawtooth
        grid = np.unique(np.ceil(np.geomspace(block_size, max(plan.max_model_len, 2 * block_size), 64)
                                 / block_size) * block_size)
        cost = preemption_cost(model, gpu, grid, tp=tp, kv_cache_dtype=kv_cache_dtype, block_size=block_size)
        out["preemption"] = {"crossover_tokens": cost["crossover_tokens"], "note": cost["note"],
                             "cheaper_at_shortest": "swap" if cost["swap_s"][0] < cost["recompute_s"][0]
                             else "recompute",
                             "points": [{"length": float(s), "recompute_s": float(r), "swap_s": float(w)}
                                        for s, r, w in zip(grid, cost["recompute_s"], cost["swap_s"], strict=True)]}
    return out


def breakdown(plan: MemoryPlan) -> dict:
    """Where one GPU's memory goes (GiB): the bar the page draws."""
    unused = plan.total_bytes - plan.requested_bytes
    return {"weights": plan.weights_bytes_per_gpu / GiB, "activation": plan.activation_bytes / GiB,
            "non_torch": plan.non_torch_bytes / GiB,
            "cuda_graphs": plan.cudagraph_bytes / GiB,
            "kv_cache": max(plan.kv_pool_bytes, 0) / GiB,
            "outside_budget": (unused - (0 if plan.cudagraph_counted else plan.cudagraph_bytes)) / GiB}
