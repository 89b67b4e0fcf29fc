"""The continuous-batching step loop, compiled with numba: vLLM V1's scheduler and the reservation variants.

One function runs the whole simulation so a 100,000-request replay takes well under a second. Its semantics are
vLLM V1's ``Scheduler.schedule`` (``../shared/reference/engines.md`` §3.5): one token budget per step shared by
running requests first (a decode costs one token, partial prefills continue), then FCFS admission of waiting
requests while fewer than ``max_num_seqs`` run and blocks exist for their first chunk, no admission in a step
that preempted; blocks are allocated as tokens are computed; when none is free the most recently admitted request
is preempted (its blocks freed, its computed tokens forgotten) and re-queued at the front. Reservation modes
replace lazy allocation with blocks reserved at admission and never preempt (Orca, TensorRT-LLM, TGI).
:mod:`planner.sim.reference` is the slow, obviously-correct twin the tests hold this to.
"""

from __future__ import annotations

import numba
import numpy as np

from planner.sim.cost_model import WINDOW_SHARE, WINDOW_TOKENS, step_seconds
from planner.sim.decode_runs import decode_run
from planner.sim.kv_pool import allocate, longest_hit, new_pool, publish, release, revive
from planner.sim.routers.base import ROUND_ROBIN
from planner.sim.routers.rule import route
from planner.sim.step_spec import tally, windowed

LAZY, RESERVE_MAX, RESERVE_CHUNKED = 0, 1, 2   # vLLM; Orca/TRT-LLM (prompt + max_new); TGI (+ min(max_new, 1024) - 1)
TGI_CHUNK = 1024


@numba.njit(cache=True, nogil=True)
def reserved_tokens(mode, prompt, generated, max_new):
    """KV tokens a reserving engine holds for a request that has generated ``generated`` tokens: Orca and
    TensorRT-LLM the prompt plus ``max_new``; TGI the prompt plus the next 1,024-token chunk of output less one (a
    longer output is re-queued per chunk; ``backends/v3/src/queue.rs``: ``input_length + max_new_tokens +
    speculate - 1``, the last token needing no KV). The engines' one admission rule: the loop admits by it and
    the reservation view (:mod:`planner.capacity.reservation`) applies it to whole traces (its ``py_func`` takes
    arrays too)."""
    if mode == RESERVE_MAX:
        return prompt + max_new
    chunk = TGI_CHUNK * (generated // TGI_CHUNK + 1)
    return prompt + np.minimum(max_new, chunk) - 1


@numba.njit(cache=True, nogil=True)
def enqueue_arrivals(arrival, queue, head, size, next_arrival, t):
    """Append every request that has arrived by ``t`` to the ring-buffer queue; returns ``(size, next_arrival)``."""
    n = arrival.shape[0]
    while next_arrival < n and arrival[next_arrival] <= t:
        queue[(head + size) % (n + 1)] = next_arrival
        size += 1
        next_arrival += 1
    return size, next_arrival


@numba.njit(cache=True, nogil=True)
def log_step(timeline, rows, t, running, waiting, blocks_used, dt, bound):
    """Append a timeline row ``(time_s, running, waiting, blocks_used, step_s, bound)``, doubling the array when
    full; returns the (possibly new) array and the row count."""
    if rows == timeline.shape[0]:
        grown = np.empty((rows * 2, 6))
        grown[:rows] = timeline
        timeline = grown
    timeline[rows, 0] = t
    timeline[rows, 1] = running
    timeline[rows, 2] = waiting
    timeline[rows, 3] = blocks_used
    timeline[rows, 4] = dt
    timeline[rows, 5] = bound
    return timeline, rows + 1


@numba.njit(cache=True, nogil=True)
def simulate_kernel(arrival, prompt, output, max_new, coeffs, max_num_seqs, token_budget, block_size, num_blocks,
                    chunked, long_prefill, mode, log_every, key, by_key, abort_wait_s, lagged, replicas, router, group,
                    n_groups, pool_tokens, caching, run_off, run_end, run_base, state, duphead, lineage):
    """Run the trace on ``replicas`` copies of one engine behind ``router``, on one clock; returns per-request
    times and counters plus a sampled timeline.

    The next event is the earlier of the next arrival (routed on the replicas' state at that moment) and the end
    of the step of the busy replica whose clock is earliest; a replica's step starts once every request that
    arrived by then is routed. A step is computed whole when it starts, so a replica whose step spans an arrival
    shows the router its load at the step's start plus what was routed to it since: what the engine reports
    between steps, not what that step will have done. With one replica this is the single engine's loop, step for
    step.

    With ``caching`` (lazy allocation only) each replica caches prefixes as vLLM V1 does
    (:mod:`planner.sim.kv_pool`): request ``r``'s block ``j`` has the key its runs give (``run_off``, ``run_end``,
    ``run_base``: :class:`planner.sim.prefix.BlockRuns`); ``state`` and ``duphead`` are the pools' per-key arrays
    (:func:`planner.sim.kv_pool.pool_keys`, zeros, used up by the run); a request admitted with nothing computed
    starts from its longest cached prefix, capped one token short of what it knows; a step publishes the blocks it
    fills when it is scheduled.

    With ``lagged`` (vLLM V1's async scheduling) the batch of a step is fixed when the step before it starts: a
    request arriving during a step first runs in the step after next, unless nothing is running.

    Returns
    -------
    tuple
        ``first_token, finish, first_scheduled, preemptions, rejected, steps, timeline, generated, free, replica,
        hits, rehits`` where ``hits`` are the prompt tokens each request found cached when first admitted and
        ``rehits`` those found again on re-admissions after preemption; timeline rows are the fleet's ``(time_s,
        running, waiting, blocks_used, step_s, bound)`` every ``log_every`` steps and ``free`` sums the replicas'
        free blocks at the end. With a finite ``abort_wait_s`` the run stops once a replica's oldest waiting request
        has waited longer; the requests not finished by then keep NaN times.
    """
    n = arrival.shape[0]
    shift = 0           # block sizes are powers of two (vLLM's): shifts, not divisions, in the innermost loop
    while (1 << shift) < block_size:
        shift += 1
    if (1 << shift) != block_size:
        raise ValueError("block_size must be a power of two")
    first_token = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    first_sched = np.full(n, np.nan)
    preemptions = np.zeros(n, np.int64)
    rejected = np.zeros(n, np.bool_)
    computed = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    replica = np.full(n, -1, np.int64)      # -1: never routed (a search stopped the run first)
    ring = n + 1
    queues = np.empty((replicas, ring), np.int64)   # ring buffers: preempted requests return to the front
    heads = np.zeros(replicas, np.int64)
    sizes = np.zeros(replicas, np.int64)
    runs = np.empty((replicas, min(n, max_num_seqs) + 1), np.int64)
    counts = np.zeros(replicas, np.int64)
    frees = np.full(replicas, num_blocks, np.int64)
    clocks = np.zeros(replicas)
    step_dt = np.zeros(replicas)        # each replica's last step time
    # outstanding tokens: the context of every request routed here and not finished (waiting prompts, queued
    # prefill and the KV of running requests): what a router can know, not the outputs still to come
    load = np.zeros(replicas, np.int64)
    # the load as a router sees it during a replica's step (clock after the arrival): its load when the step
    # started, plus the prompts routed to it since
    step_load = np.zeros(replicas, np.int64)
    seen_load = np.zeros(replicas, np.int64)
    home = np.full(max(n_groups, 1), -1, np.int64)
    sched_req = np.empty(max_num_seqs + 1, np.int64)
    sched_tok = np.empty(max_num_seqs + 1, np.int64)
    run_scratch = np.empty((4, max_num_seqs + 1), np.int64)      # decode runs'
    batch, window = np.zeros(6), np.int64(coeffs[WINDOW_TOKENS])
    timeline = np.empty((1024, 6))
    rows = 0
    caching = caching and mode == LAZY
    hits = np.zeros(n, np.int64)
    rehits = np.zeros(n, np.int64)
    published = np.zeros(n, np.int64)
    rdup = np.zeros(n if caching else 0, np.int64)
    n_keys = state.shape[0] // replicas
    ent, dups, meta, pool = new_pool(replicas if caching else 0, num_blocks)
    next_arrival, done, steps, turn = 0, 0, 0, 0
    while done < n:
        k = -1
        for j in range(replicas):
            if (counts[j] > 0 or sizes[j] > 0) and (k < 0 or clocks[j] < clocks[k]):
                k = j
        if next_arrival < n and (k < 0 or arrival[next_arrival] <= clocks[k]):
            r = next_arrival
            if router != ROUND_ROBIN:
                for j in range(replicas):
                    seen_load[j] = step_load[j] if clocks[j] > arrival[r] else load[j]
            j = route(router, r, replicas, sizes, seen_load, group, home, pool_tokens, turn, lineage, replica)
            turn = j + 1
            replica[r] = j
            if counts[j] == 0 and sizes[j] == 0 and clocks[j] < arrival[r]:
                clocks[j] = arrival[r]        # an idle replica wakes at the arrival
            queues[j, (heads[j] + sizes[j]) % ring] = r
            sizes[j] += 1
            load[j] += prompt[r]
            step_load[j] += prompt[r]
            next_arrival += 1
            continue
        queue = queues[k]
        running = runs[k]
        head, size, run_count, free, t = heads[k], sizes[k], counts[k], frees[k], clocks[k]
        # a caller that only needs to know the queue blew past a bound stops here: at the first request that never
        # ran (preempted ones, back at the head, have not waited since their arrival, as the verdict reads waiting)
        if size > 0 and abort_wait_s < np.inf:
            first = 0
            while first < size and not np.isnan(first_sched[queue[(head + first) % ring]]):
                first += 1
            if first < size and t - arrival[queue[(head + first) % ring]] > abort_wait_s:
                break
        if mode == LAZY and size == 0 and 0 < run_count <= token_budget:
            horizon = arrival[next_arrival] if next_arrival < n else np.inf
            for j in range(replicas):
                if j != k and (counts[j] > 0 or sizes[j] > 0) and clocks[j] < horizon:
                    horizon = clocks[j]
            # a run cut short after a step (a fleet's replicas interleave) is not worth its setup: which steps are
            # taken is the same either way
            did = 0
            if horizon - t > 2.0 * step_dt[k]:
                did, t, steps, free, dt, bound = decode_run(
                    running, run_count, horizon, t, steps, free, log_every, prompt, output, computed, generated,
                    blocks, published, coeffs, block_size, shift, caching, state, duphead, ent, dups, meta, pool, rdup,
                    run_off, run_end, run_base, k, n_keys, load, run_scratch)
            if did > 0:
                frees[k], clocks[k], step_dt[k] = free, t, dt
                step_load[k] = load[k] - run_count          # its last step decoded each running request once
                if steps % log_every == 0:
                    timeline, rows = log_step(timeline, rows, t, counts.sum(), sizes.sum(),
                                              replicas * num_blocks - frees.sum(), dt, bound)
                continue
        budget = token_budget
        preempted = False
        ns = 0
        seen = t - step_dt[k] if lagged and run_count > 0 else t      # arrivals the scheduler has seen
        batch[:] = 0.0          # the step's batch, tallied as scheduled (tally)
        i = 0
        while i < run_count and budget > 0:
            r = running[i]
            new = prompt[r] + generated[r] - computed[r]
            if long_prefill > 0 and new > long_prefill:
                new = long_prefill
            if new > budget:
                new = budget
            need = ((computed[r] + new + block_size - 1) >> shift) - blocks[r]
            if mode != LAZY:
                # a reservation covers the growth; beyond it (a predicted length that fell short) blocks grow lazily
                reserved = ((reserved_tokens(mode, prompt[r], generated[r], max_new[r]) + block_size - 1)
                            >> shift) - blocks[r]
                if reserved > need:
                    need = reserved
                if need > free and mode == RESERVE_CHUNKED:
                    # TGI never preempts: a request that outgrew its 1,024-token chunk is re-queued with
                    # everything it generated as its new prompt (recomputed on re-admission)
                    free += blocks[r]
                    blocks[r] = 0
                    computed[r] = 0
                    queue[(head + size) % ring] = r
                    size += 1
                    preemptions[r] += 1
                    for j in range(i, run_count - 1):
                        running[j] = running[j + 1]
                    run_count -= 1
                    continue
            self_preempted = False
            while need > free:
                run_count -= 1
                victim = running[run_count]
                if caching:
                    free += release(blocks[victim], published[victim], state, duphead, ent, dups, meta, pool,
                                    rdup, run_off, run_end, run_base, victim, k, n_keys)
                    published[victim] = 0
                else:
                    free += blocks[victim]
                blocks[victim] = 0
                computed[victim] = 0
                preemptions[victim] += 1
                head = (head - 1) % ring
                queue[head] = victim
                size += 1
                preempted = True
                if victim == r:
                    self_preempted = True
                    break
            if self_preempted:
                break
            if need > 0:
                if caching:
                    allocate(need, state, duphead, ent, dups, meta, pool, k, n_keys)
                blocks[r] += need
                free -= need
            if caching and ((computed[r] + new) >> shift) > published[r]:
                # vLLM caches the blocks a step fills when it is scheduled
                full = (computed[r] + new) >> shift
                publish(published[r], full, state, duphead, dups, meta, pool, rdup, run_off, run_end, run_base,
                        r, k, n_keys)
                published[r] = full
            sched_req[ns] = r
            sched_tok[ns] = new
            ns += 1
            tally(batch, new, computed[r], prompt[r], generated[r], window)
            budget -= new
            i += 1
        if not preempted:
            while size > 0 and budget > 0 and run_count < max_num_seqs:
                if by_key:      # length-aware priority: the smallest key waiting goes first
                    best = -1
                    for j in range(size):
                        q = (head + j) % ring
                        if arrival[queue[q]] <= seen and (best < 0 or key[queue[q]] < key[queue[best]]):
                            best = q
                    if best < 0:
                        break
                    chosen = queue[best]    # to the head, the ones before it one place back: ties keep arrival order
                    for j in range((best - head + ring) % ring, 0, -1):
                        queue[(head + j) % ring] = queue[(head + j - 1) % ring]
                    queue[head] = chosen
                r = queue[head]
                if arrival[r] > seen:
                    break
                known = prompt[r] + generated[r]
                hit_blocks, revived = 0, 0
                if caching:     # nothing computed: look up the longest cached prefix, one token short of known
                    hit_blocks, revived = longest_hit(state, k * n_keys, run_off, run_end, run_base, r,
                                                      (known - 1) >> shift)
                cached = hit_blocks << shift
                new = known - cached
                if long_prefill > 0 and new > long_prefill:
                    new = long_prefill
                if new > budget:
                    if not chunked:
                        break
                    new = budget
                # new blocks for the uncached part, plus the free cached blocks a hit takes out of the free queue
                need = ((cached + new + block_size - 1) >> shift) - hit_blocks + revived
                if mode != LAZY:
                    reserved = (reserved_tokens(mode, prompt[r], generated[r], max_new[r]) + block_size - 1) \
                        >> shift
                    if reserved > need:
                        need = reserved
                if need > free:
                    break
                head = (head + 1) % ring
                size -= 1
                if caching:
                    revive(state, ent, meta, pool, k * n_keys, run_off, run_end, run_base, r, hit_blocks, k)
                    allocate(need - revived, state, duphead, ent, dups, meta, pool, k, n_keys)
                    blocks[r] = hit_blocks + need - revived
                    computed[r] = cached
                    if preemptions[r] == 0:
                        hits[r] = cached
                    else:
                        rehits[r] += cached
                    full = (cached + new) >> shift
                    publish(hit_blocks, full, state, duphead, dups, meta, pool, rdup, run_off, run_end, run_base,
                            r, k, n_keys)
                    published[r] = full
                else:
                    blocks[r] = need
                free -= need
                running[run_count] = r
                run_count += 1
                if np.isnan(first_sched[r]):
                    first_sched[r] = t
                sched_req[ns] = r
                sched_tok[ns] = new
                ns += 1
                tally(batch, new, computed[r], prompt[r], generated[r], window)
                budget -= new
        if ns == 0:
            if run_count == 0 and size > 0:
                # the head needs more blocks than the whole pool: it can never run (vLLM would livelock)
                r = queue[head]
                head = (head + 1) % ring
                size -= 1
                rejected[r] = True
                load[k] -= prompt[r] + generated[r]
                done += 1
                heads[k], sizes[k], counts[k], frees[k] = head, size, run_count, free
                continue
            raise RuntimeError("no request could be scheduled while some are running")
        pairs, context = windowed(batch[1], batch[3], batch[4], batch[5], coeffs[WINDOW_SHARE])
        dt, bound = step_seconds(coeffs, batch[0], pairs, batch[2], context, float(ns))
        t += dt
        steps += 1
        step_dt[k] = dt
        step_load[k] = load[k]
        finished_any = False
        for j in range(ns):
            r = sched_req[j]
            computed[r] += sched_tok[j]
            if computed[r] == prompt[r] + generated[r]:
                generated[r] += 1
                load[k] += 1
                if generated[r] == 1:
                    first_token[r] = t
                if generated[r] >= output[r]:
                    finish[r] = t
                    if caching:
                        free += release(blocks[r], published[r], state, duphead, ent, dups, meta, pool, rdup,
                                        run_off, run_end, run_base, r, k, n_keys)
                    else:
                        free += blocks[r]
                    blocks[r] = 0
                    load[k] -= prompt[r] + generated[r]
                    done += 1
                    finished_any = True
        if finished_any:
            kept = 0
            for j in range(run_count):
                if np.isnan(finish[running[j]]):
                    running[kept] = running[j]
                    kept += 1
            run_count = kept
        heads[k], sizes[k], counts[k], frees[k], clocks[k] = head, size, run_count, free, t
        if steps % log_every == 0:
            timeline, rows = log_step(timeline, rows, t, counts.sum(), sizes.sum(),
                                      replicas * num_blocks - frees.sum(), dt, bound)
    return (first_token, finish, first_sched, preemptions, rejected, steps, timeline[:rows], generated,
            frees.sum(), replica, hits, rehits)
