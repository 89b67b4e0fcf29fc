"""The slow, obviously-correct vLLM V1 loop: one Python object per request, read like vLLM's ``schedule()``.

Kept for the tests (the compiled kernel must match it exactly) and for the speed benchmark's baseline.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from planner.sim.cost_model import WINDOW_SHARE, WINDOW_TOKENS, step_seconds
from planner.sim.engines.base import EngineSettings, RawRun
from planner.sim.engines.vllm_v1 import usable_blocks
from planner.sim.prefix import BlockRuns
from planner.sim.step_spec import window_skips, windowed


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
    keys: list[int] = field(default_factory=list)      # its full blocks' keys (prefix caching)
    table: list[int] = field(default_factory=list)     # the physical blocks it holds, in order
    published: int = 0                                 # how many of them are cached under their key
    hits: int = 0
    rehits: int = 0

    @property
    def known_tokens(self) -> int:          # prompt plus every token sampled so far
        return self.prompt + self.generated


class Pool:
    """vLLM V1's block pool with prefix caching: a free queue of every unused block (LRU at the head), blocks
    cached under their key until popped for reuse, reference counts, duplicates kept oldest first."""

    def __init__(self, blocks: int):
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(blocks))
        self.cached: dict[int, list[int]] = {}
        self.key = [-1] * blocks
        self.ref = [0] * blocks

    def find(self, key: int) -> int | None:
        found = self.cached.get(key)
        return found[0] if found else None

    def pop(self) -> int:
        block = next(iter(self.free))
        del self.free[block]
        if self.key[block] >= 0:                        # lazy eviction: only now does the key go
            holders = self.cached[self.key[block]]
            holders.remove(block)
            if not holders:
                del self.cached[self.key[block]]
            self.key[block] = -1
        self.ref[block] = 1
        return block

    def touch(self, block: int) -> None:
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def publish(self, block: int, key: int) -> None:
        self.key[block] = key
        self.cached.setdefault(key, []).append(block)

    def release(self, table: list[int]) -> int:
        freed = 0
        for block in reversed(table):                   # the last block first
            self.ref[block] -= 1
            if self.ref[block] == 0:
                self.free[block] = None                 # keyed: to the tail
                if self.key[block] < 0:
                    self.free.move_to_end(block, last=False)   # no key: to the head
                freed += 1
        return freed


def run_reference(arrival, prompt, output, settings: EngineSettings, coeffs: tuple,
                  runs: BlockRuns | None = None) -> RawRun:
    """vLLM V1 scheduling of the requests, one step at a time; with ``runs`` (the requests' block keys) and
    ``settings.prefix_caching``, with vLLM V1's prefix cache."""
    step = step_seconds.py_func
    pending = deque(Request(i, float(a), int(p), int(o))
                    for i, (a, p, o) in enumerate(zip(arrival, prompt, output, strict=True)))
    requests = list(pending)
    caching = runs is not None and settings.prefix_caching
    if caching:
        for req in requests:
            req.keys = [int(k) for k in runs.keys(req.index)]
    pool = Pool(usable_blocks(settings))
    waiting: deque[Request] = deque()
    running: list[Request] = []
    free = usable_blocks(settings)
    now, steps, last_seconds = 0.0, 0, 0.0
    rejected = np.zeros(len(requests), bool)
    finished = 0
    block = settings.block_size

    def blocks_for(tokens: int) -> int:
        return -(-tokens // block)

    def grow(req: Request, count: int, upto_tokens: int) -> None:
        """Give ``req`` ``count`` new blocks and cache the blocks full once ``upto_tokens`` are computed."""
        if caching:
            req.table += [pool.pop() for _ in range(count)]
            for j in range(req.published, upto_tokens // block):
                pool.publish(req.table[j], req.keys[j])
            req.published = max(req.published, upto_tokens // block)
        req.blocks += count

    def drop(req: Request) -> int:
        """Release ``req``'s blocks; returns how many became free."""
        freed = pool.release(req.table) if caching else req.blocks
        req.table, req.blocks, req.published = [], 0, 0
        return freed

    while finished < len(requests):
        while pending and pending[0].arrival <= now:
            waiting.append(pending.popleft())
        if not running and not waiting:
            now = pending[0].arrival
            continue
        # async scheduling: this step's batch was fixed when the last one started, if anything was running
        seen = now - last_seconds if settings.async_scheduling and running else now
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
                free += drop(victim)
                victim.computed = 0
                victim.preemptions += 1
                waiting.appendleft(victim)
                preempted_any = True
                if victim is req:
                    preempted_itself = True
                    break
            if preempted_itself:
                break
            need = blocks_for(req.computed + new) - req.blocks
            grow(req, need, req.computed + new)
            free -= need
            scheduled.append((req, new, req.computed))
            budget -= new
            index += 1
        if not preempted_any:                                 # 2. admissions, FCFS
            while waiting and budget > 0 and len(running) < settings.max_num_seqs:
                req = waiting[0]
                if req.arrival > seen:
                    break
                hit: list[int] = []
                if caching:             # the longest cached prefix, at least one known token short
                    for key in req.keys[:(req.known_tokens - 1) // block]:
                        found = pool.find(key)
                        if found is None:
                            break
                        hit.append(found)
                cached = len(hit) * block
                new = req.known_tokens - cached
                if new > budget:
                    if not settings.chunked_prefill:
                        break
                    new = budget
                revived = sum(pool.ref[b] == 0 for b in hit)
                need = blocks_for(cached + new) - len(hit) + revived
                if need > free:
                    break
                waiting.popleft()
                for b in hit:
                    pool.touch(b)
                req.table, req.blocks, req.published, req.computed = list(hit), len(hit), len(hit), cached
                if req.preemptions:
                    req.rehits += cached
                else:
                    req.hits = cached
                grow(req, need - revived, cached + new)
                free -= need
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
        skips = [window_skips.py_func(new, ctx, int(coeffs[WINDOW_TOKENS])) for _, new, ctx in scheduled]
        pairs, context = windowed.py_func(float(pairs), float(context), float(sum(p for p, _ in skips)),
                                          float(sum(c for _, c in skips)), coeffs[WINDOW_SHARE])
        seconds, _ = step(coeffs, float(prefill), pairs, float(decodes), context, float(len(scheduled)))
        now += seconds
        last_seconds = seconds
        steps += 1
        for req, new, _ in scheduled:
            req.computed += new
            if req.computed == req.known_tokens:
                req.generated += 1
                if req.generated == 1:
                    req.first_token = now
                if req.generated >= req.output:
                    req.finish = now
                    free += drop(req)
                    running.remove(req)
                    finished += 1
    return RawRun(np.array([r.first_token for r in requests]), np.array([r.finish for r in requests]),
                  np.array([r.first_scheduled for r in requests]), np.array([r.preemptions for r in requests]),
                  rejected, steps, np.empty((0, 6)), np.array([r.generated for r in requests]), free,
                  np.zeros(len(requests), np.int64), np.array([r.hits for r in requests], np.int64),
                  np.array([r.rehits for r in requests], np.int64))
