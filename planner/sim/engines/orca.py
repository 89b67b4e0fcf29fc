"""Orca: iteration-level scheduling that reserves each request's maximum length at admission."""

import numpy as np

from planner.sim.engines.base import Engine, ONE_REPLICA, EngineSettings, FleetSpec, RawRun, reservation_limit
from planner.sim.kernel import RESERVE_MAX, simulate_kernel


def run(arrival, prompt, output, settings: EngineSettings, coeffs: tuple, log_every: int = 1,
        fleet: FleetSpec = ONE_REPLICA) -> RawRun:
    out = simulate_kernel(arrival, prompt, output, reservation_limit(prompt, settings), coeffs,
                          settings.max_num_seqs, max(settings.max_num_batched_tokens, settings.max_model_len),
                          settings.block_size, settings.num_blocks, False, 0, ENGINE.reservation, log_every,
                          arrival, False, np.inf, False, *fleet.kernel_args(settings, prompt, output))
    return RawRun(*out)


ENGINE = Engine("orca", "Orca", "Iteration-level batching (requests join and leave every step) with each request's "
                "prompt + max_new_tokens reserved at admission; whole prompts, no chunking; never preempts.", run,
                reservation=RESERVE_MAX, chunks_prefill=False)
