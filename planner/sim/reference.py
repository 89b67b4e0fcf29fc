"""The slow, obviously-correct vLLM V1 loop: one Python object per request, read like vLLM's ``schedule()``.

Kept for the tests (the compiled kernel must match it exactly) and for the speed benchmark's baseline.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from planner.sim.cost_model import step_seconds
from planner.sim.engines.base import EngineSettings, RawRun


@dataclass
class Request:
    index: int
    arrival: float
    prompt: int
    output: int
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    first_token: float = math.nan
    finish: float = math.nan
    first_scheduled: float = math.nan

    @property
    def known_tokens(self) -> int:          # prompt plus every token sampled so far
        return self.prompt + self.generated


def run_reference(arrival, prompt, output, settings: EngineSettings, coeffs: tuple) -> RawRun:
    """vLLM V1 scheduling of the requests, one step at a time."""
    step = step_seconds.py_func
    pending = deque(Request(i, float(a), int(p), int(o))
                    for i, (a, p, o) in enumerate(zip(arrival, prompt, output, strict=True)))
    requests = list(pending)
    waiting: deque[Request] = deque()
    running: list[Request] = []
    free = settings.num_blocks
    now, steps = 0.0, 0
    rejected = np.zeros(len(requests), bool)
    finished = 0

    def blocks_for(tokens: int) -> int:
        return -(-tokens // settings.block_size)

    while finished < len(requests):
        while pending and pending[0].arrival <= now:
            waiting.append(pending.popleft())
        if not running and not waiting:
            now = pending[0].arrival
            continue
        budget = settings.max_num_batched_tokens
        scheduled: list[tuple[Request, int, int]] = []       # request, new tokens, context before
        preempted_any = False
        index = 0
        while index < len(running) and budget > 0:          # 1. running requests, oldest first
            req = running[index]
            new = min(req.known_tokens - req.computed, budget)
            preempted_itself = False
            while blocks_for(req.computed + new) - req.blocks > free:
                victim = running.pop()                       # the most recently admitted
                free += victim.blocks
                victim.blocks, victim.computed = 0, 0
                victim.preemptions += 1
                waiting.appendleft(victim)
                preempted_any = True
                if victim is req:
                    preempted_itself = True
                    break
            if preempted_itself:
                break
            need = blocks_for(req.computed + new) - req.blocks
            req.blocks += need
            free -= need
            scheduled.append((req, new, req.computed))
            budget -= new
            index += 1
        if not preempted_any:                                 # 2. admissions, FCFS
            while waiting and budget > 0 and len(running) < settings.max_num_seqs:
                req = waiting[0]
                new = req.known_tokens - req.computed
                if new > budget:
                    if not settings.chunked_prefill:
                        break
                    new = budget
                need = blocks_for(new)
                if need > free:
                    break
                waiting.popleft()
                req.blocks, free = need, free - need
                running.append(req)
                if math.isnan(req.first_scheduled):
                    req.first_scheduled = now
                scheduled.append((req, new, req.computed))
                budget -= new
        if not scheduled:
            req = waiting.popleft()                           # needs more blocks than exist: never runs
            rejected[req.index] = True
            finished += 1
            continue
        is_decode = [new == 1 and req.generated > 0 and ctx == req.known_tokens - 1 for req, new, ctx in scheduled]
        prefill = sum(new for (_, new, _), decode in zip(scheduled, is_decode, strict=True) if not decode)
        decodes = sum(is_decode)
        pairs = sum(new * ctx + new * (new + 1) / 2 for _, new, ctx in scheduled)
        context = sum(ctx for _, _, ctx in scheduled)
        seconds, _ = step(coeffs, float(prefill), float(pairs), float(decodes), float(context), float(len(scheduled)))
        now += seconds
        steps += 1
        for req, new, _ in scheduled:
            req.computed += new
            if req.computed == req.known_tokens:
                req.generated += 1
                if req.generated == 1:
                    req.first_token = now
                if req.generated >= req.output:
                    req.finish = now
                    free += req.blocks
                    req.blocks = 0
                    running.remove(req)
                    finished += 1
    return RawRun(np.array([r.first_token for r in requests]), np.array([r.finish for r in requests]),
                  np.array([r.first_scheduled for r in requests]), np.array([r.preemptions for r in requests]),
                  rejected, steps, np.empty((0, 6)), np.array([r.generated for r in requests]), free,
                  np.zeros(len(requests), np.int64))
