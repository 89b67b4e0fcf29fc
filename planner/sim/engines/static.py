"""Static (request-level) batching: a batch is fixed until its longest member finishes, every slot padded."""

import numba
import numpy as np

from planner.sim.cost_model import WINDOW_SHARE, WINDOW_TOKENS, step_seconds
from planner.sim.engines.base import Engine, EngineSettings, RawRun
from planner.sim.kernel import log_step
from planner.sim.step_spec import window_skips, windowed


@numba.njit(cache=True, nogil=True)
def _static_kernel(arrival, prompt, output, coeffs, batch_size, block_size, num_blocks, log_every):
    n = arrival.shape[0]
    first_token = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    first_sched = np.full(n, np.nan)
    rejected = np.zeros(n, np.bool_)
    timeline = np.empty((1024, 6))
    rows, steps, start, t = 0, 0, 0, 0.0
    window, share = np.int64(coeffs[WINDOW_TOKENS]), coeffs[WINDOW_SHARE]
    while start < n:
        if arrival[start] > t:
            t = arrival[start]
        # the batch: waiting requests in arrival order, as many as the slots and the padded KV allow
        end, longest_prompt, longest_output = start, 0, 0
        while end < n and end - start < batch_size and arrival[end] <= t:
            lp = max(longest_prompt, prompt[end])
            lo = max(longest_output, output[end])
            if (end - start + 1) * ((lp + lo + block_size - 1) // block_size) > num_blocks:
                break
            longest_prompt, longest_output = lp, lo
            end += 1
        if end == start:                 # one request alone exceeds the pool
            rejected[start] = True
            start += 1
            continue
        b = float(end - start)
        for r in range(start, end):
            first_sched[r] = t
        pairs, _ = windowed(b * longest_prompt * (longest_prompt + 1) / 2, 0.0,
                            b * window_skips(longest_prompt, 0, window)[0], 0.0, share)
        dt, bound = step_seconds(coeffs, b * longest_prompt, pairs, 0.0, 0.0, b)
        t += dt
        steps += 1
        for r in range(start, end):
            first_token[r] = t
            if output[r] == 1:
                finish[r] = t
        for s in range(1, longest_output):
            context = longest_prompt + s - 1
            skipped = b * window_skips(1, context, window)[0]
            pairs, kv_context = windowed(b * (context + 1), b * context, skipped, skipped, share)
            dt, bound = step_seconds(coeffs, 0.0, pairs, b, kv_context, b)
            t += dt
            steps += 1
            for r in range(start, end):
                if output[r] == s + 1:
                    finish[r] = t
            if steps % log_every == 0:
                timeline, rows = log_step(timeline, rows, t, b, 0.0,
                                          b * ((longest_prompt + longest_output + block_size - 1) // block_size),
                                          dt, bound)
        start = end
    generated = np.where(rejected, 0, output)     # every member decodes to its own length (padding aside)
    return (first_token, finish, first_sched, np.zeros(n, np.int64), rejected, steps, timeline[:rows], generated,
            num_blocks)


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1) -> RawRun:
    """One replica (the caller splits a fleet's requests round-robin)."""
    return RawRun(*_static_kernel(arrival, prompt, output, coeffs, settings.max_num_seqs, settings.block_size,
                                  settings.num_blocks, log_every), np.zeros(arrival.shape[0], np.int64))


ENGINE = Engine("static", "Static batching", "Request-level batches of up to max_num_seqs waiting requests: every "
                "prompt padded to the longest, every sequence decoding until the longest output ends; the next "
                "batch waits for it (Hugging Face generate-style).", run, chunks_prefill=False, reservation=None,
                fleet_loop=False)
