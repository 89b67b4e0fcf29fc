"""TensorRT-LLM with GUARANTEED_NO_EVICT: ceil((prompt + max output) / 32) blocks reserved up front."""

import numpy as np

from planner.sim.engines.base import (ONE_REPLICA, Engine, EngineSettings, FleetSpec, RawRun, checkpoint_note,
                                      reservation_limit)
from planner.sim.kernel import RESERVE_MAX, simulate_kernel

TOKENS_PER_BLOCK = 32


def max_num_tokens(budget: int, chunked: bool, max_model_len: int) -> int:
    """TensorRT-LLM's token budget per step: without chunked context it must hold a whole prompt."""
    return budget if chunked else max(budget, max_model_len)


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1,
        fleet: FleetSpec = ONE_REPLICA) -> RawRun:
    blocks = settings.num_blocks * settings.block_size // TOKENS_PER_BLOCK     # the same pool in its own blocks
    budget = max_num_tokens(settings.max_num_batched_tokens, settings.chunked_prefill, settings.max_model_len)
    out = simulate_kernel(arrival, prompt, output, reservation_limit(prompt, settings), coeffs,
                          settings.max_num_seqs, budget, ENGINE.block_tokens, blocks, settings.chunked_prefill, 0,
                          ENGINE.reservation, log_every, arrival, False, np.inf, False,
                          *fleet.kernel_args(settings, prompt, output))
    return RawRun(*out)


def launch_args(config: dict, scenario) -> str:
    """``trtllm-serve`` flags (the PyTorch backend's names). Chunked context is off unless asked for
    (``--enable_chunked_prefill``), and then ``max_num_tokens`` must hold a whole prompt, as :func:`run` has it."""
    chunked = config["enable_chunked_prefill"]
    budget = max_num_tokens(config["max_num_batched_tokens"], chunked, scenario.max_model_len)
    parts = [f"--max_batch_size {config['max_num_seqs']}", f"--max_num_tokens {budget}",
             f"--max_seq_len {scenario.max_model_len}"]
    if chunked:
        parts.append("--enable_chunked_prefill")
    if scenario.tp > 1:
        parts.append(f"--tp_size {scenario.tp}")
    return " ".join(parts) + checkpoint_note(scenario)


ENGINE = Engine("trtllm", "TensorRT-LLM (GUARANTEED_NO_EVICT)",
                "In-flight batching with max_num_tokens per step; a request is admitted only when its prompt + "
                "max output fits in 32-token blocks, so a started request is never paused.", run,
                reservation=RESERVE_MAX, block_tokens=TOKENS_PER_BLOCK, launcher="trtllm-serve {model}",
                launch_args=launch_args,
                prefix_cache_note="computes every prompt: TensorRT-LLM's KV cache reuse (enable_block_reuse) is "
                "not modelled, so its TTFT on reused prompts is an upper bound")
