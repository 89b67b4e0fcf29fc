"""simulate(): a pure function of (workload, scenario) → per-request results (deterministic for a given input)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from planner.sim.engines import get_engine
from planner.sim.results import SimResult
from planner.sim.workload import SimWorkload

if TYPE_CHECKING:
    from planner.scenario import Scenario


def simulate(workload: SimWorkload, scenario: Scenario, *, abort_wait_s: float = float("inf"),
             progress: Callable[[float, str], None] | None = None) -> SimResult:
    """Replay ``workload`` through the scenario's engine on its GPUs, with its memory plan and cost model.

    Outputs are cut at ``max_new_tokens`` and at ``max_model_len − prompt``; a prompt that does not fit
    ``max_model_len`` is rejected, as vLLM rejects it. ``abort_wait_s`` lets the vllm-v1 loop stop once a request
    has waited that long (a search's pruning: such a run already fails every class).
    """
    eng = get_engine(scenario.engine)
    settings = scenario.settings
    if abort_wait_s != settings.abort_wait_s:
        settings = replace(settings, abort_wait_s=abort_wait_s)
    work = workload.truncated(settings.max_new_tokens)
    prompt = work.input_tokens.astype(np.int64)
    output = np.minimum(work.output_tokens, np.maximum(settings.max_model_len - prompt, 1)).astype(np.int64)
    too_long = prompt >= settings.max_model_len
    coeffs = scenario.coefficients.as_tuple()
    if progress:
        progress(0.0, f"simulating {work.n:,} requests with {eng.label}")
    started = time.perf_counter()
    keep = ~too_long
    raw = eng.run(work.arrival_s[keep], prompt[keep], output[keep], settings, coeffs, max(1, work.n // 200))
    wall = time.perf_counter() - started
    if progress:
        progress(1.0, f"{raw.steps:,} steps in {wall:.2f} s")

    def full(values, fill):
        out = np.full(work.n, fill, dtype=np.asarray(values).dtype)
        out[keep] = values
        return out
    rejected = full(raw.rejected, True)
    rejected[too_long] = True
    final = SimWorkload(work.arrival_s, prompt, output, work.source)
    return SimResult(scenario, final, full(raw.first_token, np.nan), full(raw.finish, np.nan),
                     full(raw.first_scheduled, np.nan), full(raw.preemptions, 0), rejected, too_long, raw.steps,
                     raw.timeline, wall, full(raw.generated, 0), raw.free_blocks_at_end)
