"""vLLM V0 (historical): prefill-priority steps, a 1% watermark, preemption by recompute or swap over PCIe."""

import numba
import numpy as np

from planner.sim.cost_model import WINDOW_SHARE, WINDOW_TOKENS, step_seconds
from planner.sim.engines.base import Engine, EngineSettings, RawRun, plan_note, vllm_scenario_flags
from planner.sim.kernel import enqueue_arrivals, log_step
from planner.sim.step_spec import window_skips, windowed

# vLLM V0 (0.6) turns chunked prefill on by itself for a max_model_len above 32K unless told not to
V0_CHUNKS_ABOVE = 32 * 1024

WATERMARK = 0.01


@numba.njit(cache=True, nogil=True)
def _v0_kernel(arrival, prompt, output, coeffs, max_num_seqs, budget, block_size, num_blocks, swap,
               swap_s_per_block, log_every):
    n = arrival.shape[0]
    first_token = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    first_sched = np.full(n, np.nan)
    preemptions = np.zeros(n, np.int64)
    rejected = np.zeros(n, np.bool_)
    tokens = np.zeros(n, np.int64)             # tokens whose KV exists (on GPU, or on the host when swapped)
    generated = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    swapped = np.zeros(n, np.bool_)
    queue = np.empty(n + 1, np.int64)
    head, size = 0, 0
    running = np.empty(n, np.int64)
    run_count = 0
    watermark = int(WATERMARK * num_blocks)
    window = np.int64(coeffs[WINDOW_TOKENS])
    timeline = np.empty((1024, 6))
    rows, steps, next_arrival, done = 0, 0, 0, 0
    free = num_blocks
    t = 0.0
    while done < n:
        size, next_arrival = enqueue_arrivals(arrival, queue, head, size, next_arrival, t)
        if run_count == 0 and size == 0:
            t = arrival[next_arrival]
            continue
        extra = 0.0
        # prefill step: admit from the queue (swapped-out requests first, as they sit at its front)
        admitted, prefill_tokens, pairs, skipped = 0, 0.0, 0.0, 0.0     # skipped: pairs a sliding window skips
        while size > 0 and run_count < max_num_seqs:
            r = queue[head]
            if swapped[r]:
                need = blocks[r]
                if need > num_blocks - watermark or (tokens[r] + block_size) // block_size > num_blocks:
                    # it outgrew the pool alone: it cannot swap in past the watermark (vLLM fails a group that can
                    # never swap in, and waits forever on one just short of it), or swapped in it cannot take its
                    # next token; it swapped out and in forever at one instant. It fails, as a benchmark client
                    # counts a failed request: no first token
                    head = (head + 1) % (n + 1)
                    size -= 1
                    swapped[r] = False
                    rejected[r] = True
                    first_token[r] = np.nan
                    first_sched[r] = np.nan
                    done += 1
                    continue
                if free - need < watermark:
                    break
                extra += need * swap_s_per_block
                swapped[r] = False
            else:
                new = prompt[r] + generated[r]
                need = (new + block_size - 1) // block_size
                if need > num_blocks - watermark:       # too long for the pool (re-admitted after running too)
                    head = (head + 1) % (n + 1)
                    size -= 1
                    rejected[r] = True
                    first_token[r] = np.nan
                    first_sched[r] = np.nan
                    done += 1
                    continue
                if prefill_tokens + new > budget or free - need < watermark:
                    break
                prefill_tokens += new
                pairs += new * (new + 1) / 2
                skipped += window_skips(new, 0, window)[0]
                tokens[r] = new
                blocks[r] = need
                admitted += 1
            head = (head + 1) % (n + 1)
            size -= 1
            free -= need
            running[run_count] = r
            run_count += 1
            if np.isnan(first_sched[r]):
                first_sched[r] = t
        if admitted > 0:
            pairs, _ = windowed(pairs, 0.0, skipped, 0.0, coeffs[WINDOW_SHARE])
            dt, bound = step_seconds(coeffs, prefill_tokens, pairs, 0.0, 0.0, float(admitted))
            t += dt + extra
            for j in range(run_count - admitted, run_count):
                r = running[j]
                if tokens[r] == prompt[r] + generated[r]:
                    generated[r] += 1
                    if generated[r] == 1:
                        first_token[r] = t
        else:
            # decode step: every running sequence appends one token; preempt from the tail when blocks run out
            j = 0
            while j < run_count:
                r = running[j]
                need = (tokens[r] + 1 + block_size - 1) // block_size - blocks[r]
                while need > free and run_count > j:
                    run_count -= 1
                    victim = running[run_count]
                    preemptions[victim] += 1
                    free += blocks[victim]
                    if swap:        # the KV moves to the host and comes back on re-admission
                        swapped[victim] = True
                        extra += blocks[victim] * swap_s_per_block
                    else:           # recompute: forget the KV, re-prefill prompt + output so far later
                        tokens[victim] = 0
                        blocks[victim] = 0
                    head = (head - 1) % (n + 1)
                    queue[head] = victim
                    size += 1
                if run_count <= j:
                    break
                blocks[r] += need
                free -= need
                j += 1
            if run_count == 0:
                continue
            context, skipped = 0.0, 0.0
            for j in range(run_count):
                context += tokens[running[j]]
                skipped += window_skips(1, tokens[running[j]], window)[0]
            pairs, context = windowed(context + run_count, context, skipped, skipped, coeffs[WINDOW_SHARE])
            dt, bound = step_seconds(coeffs, 0.0, pairs, float(run_count), context, float(run_count))
            t += dt + extra
            for j in range(run_count):
                r = running[j]
                tokens[r] += 1
                generated[r] += 1
        steps += 1
        kept = 0
        for j in range(run_count):
            r = running[j]
            if generated[r] >= output[r] and np.isnan(finish[r]):
                finish[r] = t
                free += blocks[r]
                blocks[r] = 0
                done += 1
            else:
                running[kept] = r
                kept += 1
        run_count = kept
        if steps % log_every == 0:
            timeline, rows = log_step(timeline, rows, t, run_count, size, num_blocks - free, dt, bound)
    return first_token, finish, first_sched, preemptions, rejected, steps, timeline[:rows], generated, free


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1) -> RawRun:
    """One replica (the caller splits a fleet's requests round-robin)."""
    budget = max(settings.max_num_batched_tokens, settings.max_model_len)
    return RawRun(*_v0_kernel(arrival, prompt, output, coeffs, settings.max_num_seqs, budget, settings.block_size,
                              settings.num_blocks, settings.preemption == "swap", settings.swap_s_per_block,
                              log_every), np.zeros(arrival.shape[0], np.int64))


def launch_args(config: dict, scenario) -> str:
    """Flags of vLLM ≤ 0.10 running its V0 engine (``--preemption-mode`` left with V0)."""
    # V0 without chunking needs a whole prompt
    budget = max(config["max_num_batched_tokens"], scenario.max_model_len)
    parts = [f"--max-num-seqs {config['max_num_seqs']}", f"--max-num-batched-tokens {budget}",
             f"--preemption-mode {config.get('preemption_mode', 'recompute')}"]
    if config.get("preemption_mode") == "swap":
        parts.append("--swap-space 16")
    spelling = ""
    if scenario.max_model_len > V0_CHUNKS_ABOVE:
        parts.append("--enable-chunked-prefill False")      # 0.6-0.8 (StoreBoolean); 0.9 on takes no value
        spelling = "  # vLLM 0.9-0.10: --no-enable-chunked-prefill"
    return " ".join(parts + vllm_scenario_flags(scenario)) + plan_note(scenario) + spelling


ENGINE = Engine("vllm-v0", "vLLM V0 (historical)",
                "Prefill-priority: a step admits waiting prompts (whole, up to max(max_num_batched_tokens, "
                "max_model_len) tokens, keeping 1% of blocks free) and pauses decodes, else every running sequence "
                "decodes one token; when blocks run out the latest request is preempted by recompute, or swapped "
                "to the host and back over PCIe (--preemption swap).", run,
                preemption_modes=("recompute", "swap"), chunks_prefill=False,
                launcher="VLLM_USE_V1=0 vllm serve {model}", launch_args=launch_args, fleet_loop=False,
                # DistServe's A100-80GB profiles of vLLM V0 (bench/calibrate_points.py): a TP 2 decode step takes
                # 7.0 ms more than the TP 1 calibration predicts, at every batch below 64 (Ray-driven workers)
                tp_step_overhead_s=7e-3,
                prefix_cache_note="computes every prompt: V0's prefix caching was off by default "
                "(--enable-prefix-caching), and is not modelled")
