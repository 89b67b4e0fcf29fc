"""vLLM V1 (the default): one token budget per step, lazy blocks, recompute preemption of the last admitted."""

import numpy as np

from planner.sim.engines.base import (ONE_REPLICA, Engine, EngineSettings, FleetSpec, RawRun, plan_note,
                                      reservation_limit, vllm_scenario_flags)
from planner.sim.kernel import LAZY, RESERVE_MAX, simulate_kernel
from planner.sim.prediction import predicted_lengths


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1,
        fleet: FleetSpec = ONE_REPLICA) -> RawRun:
    limit, mode, key = reservation_limit(prompt, settings), LAZY, arrival
    if settings.reserve_quantile or settings.priority != "fcfs":
        # the seeds' remedies: reserve a predicted output quantile per request; admit the shortest predicted first
        median, quantile = predicted_lengths(output, settings.reserve_quantile or 0.5)
        if settings.reserve_quantile:
            limit, mode = np.minimum(limit, quantile), RESERVE_MAX
        key = median.astype(float)
    out = simulate_kernel(arrival, prompt, output, limit, coeffs, settings.max_num_seqs,
                          settings.max_num_batched_tokens, settings.block_size, usable_blocks(settings),
                          settings.chunked_prefill, settings.long_prefill_token_threshold, mode, log_every, key,
                          settings.priority != "fcfs", settings.abort_wait_s, settings.async_scheduling,
                          *fleet.kernel_args(settings, prompt, output, ENGINE.caches_prefixes(settings)))
    return RawRun(*out)


def usable_blocks(settings: EngineSettings) -> int:
    """The blocks a vLLM V1 replica schedules against: ``num_gpu_blocks`` less the one its BlockPool takes for
    itself at start, the null block that pads block tables (``v1/core/block_pool.py``: ``self.null_block =
    self.free_block_queue.popleft()``)."""
    return settings.num_blocks - 1


def _caches(settings: EngineSettings) -> bool:
    # the remedies reserve blocks up front, which vLLM's prefix cache has no rule for: modelled without it
    return settings.prefix_caching and not settings.reserve_quantile


def launch_args(config: dict, scenario) -> str:
    """``vllm serve`` flags (vLLM V1 names) of a configuration in a scenario."""
    parts = [f"--max-num-seqs {config['max_num_seqs']}", f"--max-num-batched-tokens {config['max_num_batched_tokens']}"]
    if not config["enable_chunked_prefill"]:
        parts.append("--no-enable-chunked-prefill")
    if not scenario.prefix_caching:
        parts.append("--no-enable-prefix-caching")
    if scenario.async_scheduling != scenario.release.async_scheduling:      # the release's own default needs no flag
        parts.append("--async-scheduling" if scenario.async_scheduling else "--no-async-scheduling")
    return " ".join(parts + vllm_scenario_flags(scenario)) + plan_note(scenario)


ENGINE = Engine("vllm-v1", "vLLM V1", "One token budget (max_num_batched_tokens) per step: running requests first "
                "(a decode costs one token, partial prefills continue), then FCFS admission while fewer than "
                "max_num_seqs run and blocks exist for the first chunk; no admission in a step that preempted; "
                "blocks allocated lazily; the last admitted request is preempted by recompute when they run out.",
                run, launcher="vllm serve {model}", launch_args=launch_args, prefix_caching=_caches, v1_runtime=True,
                prefix_cache_note="caches prefixes as vLLM V1 does by default (--no-prefix-cache turns it off; the "
                "seeds' reservation remedy computes every prompt)")
