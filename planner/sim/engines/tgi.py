"""HF TGI ≥ 3.1.1: input + min(max_new_tokens, 1024) - 1 reserved; longer outputs re-queued per 1,024-token chunk."""

import numpy as np

from planner.sim.engines.base import (ONE_REPLICA, Engine, EngineSettings, FleetSpec, RawRun, plan_note,
                                      reservation_limit)
from planner.sim.kernel import RESERVE_CHUNKED, simulate_kernel


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1,
        fleet: FleetSpec = ONE_REPLICA) -> RawRun:
    # chunking, TGI grows a batch by its token budgets alone: as many sequences as there are requests at most
    seqs = settings.max_num_seqs if ENGINE.chunked_seq_cap or not settings.chunked_prefill else max(1, len(prompt))
    out = simulate_kernel(arrival, prompt, output, reservation_limit(prompt, settings), coeffs,
                          seqs, settings.max_num_batched_tokens, settings.block_size,
                          settings.num_blocks, settings.chunked_prefill, 0, ENGINE.reservation, log_every,
                          arrival, False, np.inf, False, *fleet.kernel_args(settings, prompt, output))
    return RawRun(*out)


def launch_args(config: dict, scenario) -> str:
    """``text-generation-launcher`` flags: the token budget is ``--max-batch-prefill-tokens``. TGI sizes a batch
    by its token budgets; ``--max-batch-size`` caps it only without chunking (:func:`launch_prefix`), where it is
    given; chunking, TGI ignores it (but for a batch formed from idle), so it is left out."""
    max_len = scenario.max_model_len
    parts = [f"--max-batch-prefill-tokens {config['max_num_batched_tokens']}"]
    if not config["enable_chunked_prefill"]:
        parts.append(f"--max-batch-size {config['max_num_seqs']}")
    parts += [f"--max-input-tokens {max_len - 1}", f"--max-total-tokens {max_len}"]
    if scenario.tp > 1:
        parts.append(f"--num-shard {scenario.tp}")
    if scenario.kv_cache_dtype.startswith("fp8"):        # TGI's two fp8 caches; vLLM's plain "fp8" is e4m3
        parts.append(f"--kv-cache-dtype {'fp8_e5m2' if scenario.kv_cache_dtype == 'fp8_e5m2' else 'fp8_e4m3fn'}")
    if scenario.weight_dtype == "fp8" and scenario.model.weight_dtype != "fp8":
        parts.append("--quantize fp8")
    return " ".join(parts) + plan_note(scenario)


def launch_prefix(config: dict, scenario) -> str:
    """Environment the server reads (its ``server/text_generation_server/models/globals.py``).
    ``TGI_WIGGLE_ROOM``: TGI gives the KV cache what is free after its warmup less ``1 − wiggle × cuda memory
    fraction`` of the GPU (``flash_causal_lm.py``, ``warmup``), which is ``gpu_memory_utilization``'s budget with
    the fraction at its default 1; its default moved (0.95 to 3.0, 0.93 in 3.1, 0.90 from 3.3), so the plan's is
    written out. ``PREFILL_CHUNKING=0``: TGI chunks prompts wherever the model's attention allows."""
    env = f"TGI_WIGGLE_ROOM={scenario.gpu_memory_utilization!r} "
    return env if config["enable_chunked_prefill"] else env + "PREFILL_CHUNKING=0 "


ENGINE = Engine("tgi", "HF TGI", "FCFS; admits a request when input + min(max_new_tokens, 1024) - 1 fits; a longer "
                "output is re-queued per 1,024-token chunk with what it generated as prompt; never preempts "
                "otherwise. max_num_batched_tokens plays max_batch_prefill_tokens; max_num_seqs caps the batch "
                "only without chunked prefill (TGI ignores --max-batch-size while chunking).", run,
                reservation=RESERVE_CHUNKED, chunked_seq_cap=False,
                launcher="text-generation-launcher --model-id {model}", launch_args=launch_args,
                launch_prefix=launch_prefix,
                full_memory_refusal="TGI asserts TGI_WIGGLE_ROOM < 1 (server/text_generation_server/models/globals.py)",
                prefix_cache_note="computes every prompt: TGI 3's prefix caching (on by default there) is not "
                "modelled, so its TTFT on reused prompts is an upper bound")
