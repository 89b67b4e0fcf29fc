"""TensorRT-LLM with GUARANTEED_NO_EVICT: ceil((prompt + max output) / 32) blocks reserved up front."""

import numpy as np

from planner.sim.engines.base import (ONE_REPLICA, Engine, EngineSettings, FleetSpec, RawRun, plan_note,
                                      reservation_limit)
from planner.sim.kernel import RESERVE_MAX, simulate_kernel

TOKENS_PER_BLOCK = 32


def max_num_tokens(budget: int, chunked: bool, max_model_len: int) -> int:
    """TensorRT-LLM's token budget per step: without chunked context it must hold a whole prompt."""
    return budget if chunked else max(budget, max_model_len)


# the file of LLM API options the launch command writes and passes (``--extra_llm_api_options``)
OPTIONS_FILE = "trtllm-serve.yaml"


def pool_blocks(settings: EngineSettings) -> int:
    """The plan's KV pool in TensorRT-LLM's own 32-token blocks."""
    return settings.num_blocks * settings.block_size // TOKENS_PER_BLOCK


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1,
        fleet: FleetSpec = ONE_REPLICA) -> RawRun:
    blocks = pool_blocks(settings)
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
    parts.append(f"--extra_llm_api_options {OPTIONS_FILE}")
    return " ".join(parts) + plan_note(scenario, online=())


def launch_prefix(config: dict, scenario) -> str:
    """Writes the options ``trtllm-serve`` takes only from a YAML file (its ``KvCacheConfig``): ``max_tokens``,
    the plan's pool, which TensorRT-LLM takes where its own sizing gives more, so the server holds the KV the replay
    had; ``free_gpu_memory_fraction``, that sizing (default 0.9 of the memory left after the weights), set to the
    plan's utilization, whose fraction of what the weights leave holds the plan's pool at any utilization (a file's
    ``kv_cache_config`` replaces the flags' whole); and an FP8 cache (``dtype``), which no flag sets (its FP8 is
    e4m3; an e5m2 plan needs the same bytes)."""
    lines = ["kv_cache_config:", f"  max_tokens: {pool_blocks(scenario.settings) * TOKENS_PER_BLOCK}",
             f"  free_gpu_memory_fraction: {scenario.gpu_memory_utilization!r}"]
    if scenario.kv_cache_dtype.startswith("fp8"):
        lines.append("  dtype: fp8")
    return "printf '" + "\\n".join(lines) + f"\\n' > {OPTIONS_FILE} && "


ENGINE = Engine("trtllm", "TensorRT-LLM (GUARANTEED_NO_EVICT)",
                "In-flight batching with max_num_tokens per step; a request is admitted only when its prompt + "
                "max output fits in 32-token blocks, so a started request is never paused.", run,
                reservation=RESERVE_MAX, block_tokens=TOKENS_PER_BLOCK, launcher="trtllm-serve {model}",
                launch_args=launch_args, launch_prefix=launch_prefix,
                prefix_cache_note="computes every prompt: TensorRT-LLM's KV cache reuse (enable_block_reuse) is "
                "not modelled, so its TTFT on reused prompts is an upper bound")
