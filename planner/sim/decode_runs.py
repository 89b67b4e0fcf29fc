"""Long decode stretches of the step loop advanced in one go (:func:`decode_run`), step for step what
:func:`planner.sim.kernel.simulate_kernel` would do, at a cost per block instead of per token: on decode-heavy
traffic most steps are plain decodes in which nothing but the clock and the requests' lengths changes."""

from __future__ import annotations

import numba
import numpy as np

from planner.sim.cost_model import WINDOW_SHARE, WINDOW_TOKENS, step_seconds
from planner.sim.kv_pool import allocate, block_span, publish
from planner.sim.step_spec import window_skips, windowed


@numba.njit(cache=True, nogil=True)
def next_block_event(c0, s, blocks, published, caching, block_size):
    """The first step from ``s`` on of a decode run (step ``s`` computes token ``c0 + s``) in which a request
    holding ``blocks`` blocks, ``published`` of them cached, needs a new block or fills one."""
    grows = blocks * block_size - c0                    # the token at c0 + s needs block ``blocks`` (0-based)
    if caching:
        fills = (published + 1) * block_size - c0 - 1   # the token at c0 + s completes block ``published``
        if fills < grows:
            grows = fills
    return grows if grows > s else s


@numba.njit(cache=True, nogil=True)
def decode_run(running, ns, horizon, t, steps, free, log_every, prompt, output, computed, generated, blocks,
               published, coeffs, block_size, shift, caching, state, duphead, ent, dups, meta, pool, rdup, run_off,
               run_end, run_base, k, n_keys, load, scratch):
    """The steps of replica ``k`` while its ``ns`` running requests all decode and nothing else can happen: no
    request waits, none finishes, none is preempted and the next arrival (or another replica's step) comes after
    ``horizon``. Each such step is the one :func:`simulate_kernel` would take, its batch summed in closed form (the
    tallies are sums of integers, exact in floating point whatever the order) and only the requests that need or
    fill a block that step visited, in running order, so a long decode costs per block, not per token; but a
    sliding window's skips, which a request's context past the window moves, are summed request by request.

    The blocks the run takes from the free queue are taken together, at its end: evicting only ever uncaches free
    keys, so it cannot change a publication of a key nobody caches, which is all the run publishes by itself
    (any other publication first takes the blocks owed, then goes through :func:`planner.sim.kv_pool.publish`).
    Stops after the step ``log_every`` divides (the caller logs it); returns ``(steps_run, t, steps, free, dt,
    bound)`` with the requests' counters advanced. ``scratch`` rows: tokens computed at the start, next event
    step, this step's events, run holding the next block to fill."""
    c0, event, todo, seg = scratch[0], scratch[1], scratch[2], scratch[3]
    last, window = np.int64(1) << 62, np.int64(coeffs[WINDOW_TOKENS])
    context0 = 0
    for i in range(ns):
        r = running[i]
        c = computed[r]
        if generated[r] == 0 or c != prompt[r] + generated[r] - 1:
            return 0, t, steps, free, 0.0, 0
        if output[r] - generated[r] - 1 < last:
            last = output[r] - generated[r] - 1         # the step that computes its last token finishes it
        c0[i] = c
        event[i] = next_block_event(c, 0, blocks[r], published[r], caching, block_size)
        if caching:                                     # without the cache there are no runs to read
            seg[i] = run_off[r]
        context0 += c
    off = k * n_keys
    s, dt, bound, owed = 0, 0.0, 0, 0
    while s < last and t < horizon:
        todo_count, need_sum = 0, 0
        for i in range(ns):
            if event[i] == s:
                todo[todo_count] = i
                todo_count += 1
                need = ((c0[i] + s + block_size) >> shift) - blocks[running[i]]
                if need > 0:
                    need_sum += need
        if need_sum > free:
            break                                       # the ordinary step preempts
        for q in range(todo_count):
            i = todo[q]
            r = running[i]
            filled = c0[i] + s + 1
            need = ((filled + block_size - 1) >> shift) - blocks[r]
            if need > 0:
                blocks[r] += need
                free -= need
                owed += need
            if caching and (filled >> shift) > published[r]:
                j = published[r]
                seg[i], base, _ = block_span(run_end, run_base, seg[i], j, j + 1, off)
                if (filled >> shift) == j + 1 and state[base + j] == 0:
                    state[base + j] = 1                 # the common case: one block, its key cached by nobody
                else:
                    if owed > 0:
                        allocate(owed, state, duphead, ent, dups, meta, pool, k, n_keys)
                        owed = 0
                    publish(j, filled >> shift, state, duphead, dups, meta, pool, rdup, run_off, run_end, run_base,
                            r, k, n_keys)
                published[r] = filled >> shift
            event[i] = next_block_event(c0[i], s + 1, blocks[r], published[r], caching, block_size)
        skipped = 0
        if window > 0:          # a decode's window skips as many (query, key) pairs as context tokens read
            for i in range(ns):
                skipped += window_skips(1, c0[i] + s, window)[0]
        pairs, context = windowed(float(context0 + s * ns + ns), float(context0 + s * ns), float(skipped),
                                  float(skipped), coeffs[WINDOW_SHARE])
        dt, bound = step_seconds(coeffs, 0.0, pairs, float(ns), context, float(ns))
        t += dt
        steps += 1
        s += 1
        load[k] += ns
        if steps % log_every == 0:
            break
    if caching and owed > 0:
        allocate(owed, state, duphead, ent, dups, meta, pool, k, n_keys)
    for i in range(ns):
        computed[running[i]] = c0[i] + s
        generated[running[i]] += s
    return s, t, steps, free, dt, bound
