"""vLLM V1's KV block pool with prefix caching, as compiled helpers over flat arrays (one pool per replica).

The rules are vLLM V1's ``BlockPool`` and ``KVCacheManager`` (``../shared/reference/prefix-cache-and-routing.md``
§1.2–1.7, vLLM ``block_pool.py`` @c59cb794): one free queue per replica holding every block no running request
uses, cached or not, popped at the head; a block's key (its chained prefix hash) is set when a step that fills it is
scheduled and stays findable while the block waits in the free queue, until the block is popped for reuse (lazy
eviction); a hit on a free block takes it out of the queue and counts against the free blocks; a request's blocks
are released last block first, blocks without a key prepended to the head (reused first) and keyed ones appended to
the tail (vLLM PR #42656), so a chain's tail is evicted before the prefix it extends; duplicates of a key are kept
(block tables are append-only) and a lookup returns the first one cached (``get_cached_block``).

Which physical block is which is unobservable: only how many are free, which keys are cached and the order the
free queue evicts them in. So the pool is kept by key, which makes every operation a pass over consecutive keys
(a request's keys are runs of consecutive integers, :class:`planner.sim.prefix.BlockRuns`) instead of a walk
through block ids:

- ``state[g]`` for ``g = replica × n_keys + key``, the first block cached under the key (the one a lookup
  returns): 0 none, ``c ≥ 1`` used by ``c`` running requests, ``−1 − e`` free, waiting in free-queue *entry* ``e``;
- keyless blocks carry nothing, so the free ones are a count, and a request's own keyless blocks (at most its
  last, partly filled one) are its blocks past those it published;
- the keyed part of the free queue is a FIFO of entries in release order, each a range of consecutive keys
  released together, walked from its highest key down (the order vLLM appends them in); a key that left the queue
  (a hit) or was released again later no longer points at the entry, so the walk passes it (a hole);
- a block cached under a key that already has one (a request computed it before the first was published) is a
  *duplicate*: a record with its own state, waiting in a one-key entry when free; when the first block is evicted
  the oldest duplicate takes its place (``promote``). Duplicates are rare, so they take the slow paths.

The pool's arrays: ``state`` and ``duphead`` (per replica and key: the first duplicate + 1, 0 none; allocated by
:func:`pool_keys`), ``ent`` (entries, fields ``E_*``: lowest key, highest key + 1, duplicate or −1, next and
previous entry of the replica's queue, free blocks left in it; an entry left with none leaves the queue at once),
``dups`` (records, fields ``D_*``), ``meta`` (per replica, ``M_*``: free keyless blocks, first and last entry, the
next key the head entry evicts, live duplicates) and ``pool`` (``P_*``: free lists and high-water marks of entries
and records, which every live one being a distinct block bounds by the blocks); ``rdup`` holds each request's
duplicates (the first + 1). Nothing is ever reallocated, because a numba loop that rebinds an array pays reference
counting on every iteration. :mod:`planner.sim.reference` keeps the same rules with a Python ``OrderedDict`` of
block ids as the queue; the tests hold the two to identical results.
"""

from __future__ import annotations

import mmap

import numba
import numpy as np

E_LO, E_HI, E_DUP, E_NEXT, E_PREV, E_LIVE = 0, 1, 2, 3, 4, 5
D_G, D_J, D_STATE, D_NEXT_KEY, D_PROMOTED, D_NEXT_REQ = 0, 1, 2, 3, 4, 5
M_KEYLESS, M_HEAD, M_TAIL, M_CUR, M_DUPS = 0, 1, 2, 3, 4
P_FREE_ENTRY, P_FREE_DUP, P_HIGH_ENTRY, P_HIGH_DUP = 0, 1, 2, 3


def pool_keys(replicas: int, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The per-key arrays of ``replicas`` pools for keys below ``n_keys``: ``(state, duphead)``, zeros straight from
    the operating system, so only the pages of keys a replica uses cost memory and time (a compiled ``np.zeros``
    would write every page first). One pool gets numpy's 2 MiB pages (fewer faults); a fleet gets 4 KiB ones,
    because each replica touches only its own requests' keys and a 2 MiB page would commit every replica's whole
    range (8 replicas on the Mooncake-like bench: 540 MB instead of 126)."""
    size = replicas * n_keys
    if replicas == 1:
        return np.zeros(size, np.int32), np.zeros(size, np.int32)
    return tuple(np.frombuffer(mmap.mmap(-1, max(size, 1) * 4), np.int32)[:size] for _ in range(2))


@numba.njit(cache=True, nogil=True)
def new_pool(replicas, blocks):
    """The rest of ``replicas`` empty pools of ``blocks`` blocks: ``(ent, dups, meta, pool)``. Every live entry
    holds a free block and every live duplicate is a block, so ``replicas × blocks`` of each always suffice
    (recycled through free lists)."""
    cap = max(replicas * blocks, 1) + 1
    ent = np.empty((cap, 6), np.int64)
    dups = np.empty((cap, 6), np.int64)
    meta = np.zeros((max(replicas, 1), 5), np.int64)
    meta[:, M_KEYLESS] = blocks
    meta[:, M_HEAD] = -1
    meta[:, M_TAIL] = -1
    pool = np.array([-1, -1, 0, 0], np.int64)
    return ent, dups, meta, pool


@numba.njit(cache=True, nogil=True)
def _take(pool, free, high, table, link):
    """A row of ``table`` (entries or duplicates): the head of the free list at ``pool[free]``, linked through
    column ``link``, or a fresh one past the high-water mark at ``pool[high]``."""
    i = pool[free]
    if i >= 0:
        pool[free] = table[i, link]
        return i
    i = pool[high]
    if i >= table.shape[0]:
        raise RuntimeError("prefix cache: more records than blocks (a bug)")
    pool[high] = i + 1
    return i


@numba.njit(cache=True, nogil=True)
def block_span(run_end, run_base, i, j, hi, off):
    """From run ``i`` on, the run holding block ``j``: ``(run, base, stop)``, its blocks ``j … stop − 1`` (below
    ``hi``) having the keys at ``base + j`` in ``state``."""
    while run_end[i] <= j:
        i += 1
    return i, off + run_base[i], min(hi, run_end[i])


@numba.njit(cache=True, nogil=True)
def longest_hit(state, off, run_off, run_end, run_base, r, cap):
    """vLLM's ``find_longest_cache_hit``: how many of request ``r``'s blocks from block 0 are cached (``off``:
    the replica's first index into ``state``), at most ``cap``; returns ``(hits, revived)``, ``revived`` of them
    free (a hit takes them out of the free queue)."""
    i, j, revived = run_off[r], 0, 0
    while j < cap:
        i, base, stop = block_span(run_end, run_base, i, j, cap, off)
        while j < stop:
            s = state[base + j]
            if s == 0:
                return j, revived
            if s < 0:
                revived += 1
            j += 1
    return cap, revived


@numba.njit(cache=True, nogil=True, inline="always")
def _unlink(e, ent, meta, pool, k):
    """Entry ``e`` holds no free block any more: out of replica ``k``'s queue and onto the free list."""
    prev, nxt = ent[e, E_PREV], ent[e, E_NEXT]
    if prev >= 0:
        ent[prev, E_NEXT] = nxt
    else:
        meta[k, M_HEAD] = nxt
        if nxt >= 0:
            meta[k, M_CUR] = ent[nxt, E_HI] - 1
    if nxt >= 0:
        ent[nxt, E_PREV] = prev
    else:
        meta[k, M_TAIL] = prev
    ent[e, E_NEXT] = pool[P_FREE_ENTRY]
    pool[P_FREE_ENTRY] = e


@numba.njit(cache=True, nogil=True)
def revive(state, ent, meta, pool, off, run_off, run_end, run_base, r, count, k):
    """Request ``r`` takes its ``count`` hit blocks: each gains a user, a free one leaving its entry (a hole; an
    entry left with none leaves the queue)."""
    i, j = run_off[r], 0
    while j < count:
        i, base, stop = block_span(run_end, run_base, i, j, count, off)
        while j < stop:
            s = state[base + j]
            if s < 0:
                e = -1 - s
                ent[e, E_LIVE] -= 1
                if ent[e, E_LIVE] == 0:
                    _unlink(e, ent, meta, pool, k)
                state[base + j] = 1
            else:
                state[base + j] = s + 1
            j += 1


@numba.njit(cache=True, nogil=True)
def _promote(g, state, duphead, ent, dups, meta, pool, k):
    """The first block cached under ``g`` was evicted: the oldest duplicate becomes the one lookups find, in its
    state (used by its request, which releases it as such; or free, its entry now an ordinary one)."""
    d = duphead[g] - 1
    duphead[g] = dups[d, D_NEXT_KEY] + 1
    meta[k, M_DUPS] -= 1
    s = dups[d, D_STATE]
    state[g] = s
    if s < 0:
        ent[-1 - s, E_DUP] = -1
        _free_duplicate(d, dups, pool)
    else:
        dups[d, D_PROMOTED] = 1


@numba.njit(cache=True, nogil=True)
def _free_duplicate(d, dups, pool):
    dups[d, D_NEXT_KEY] = pool[P_FREE_DUP]
    pool[P_FREE_DUP] = d


@numba.njit(cache=True, nogil=True)
def _drop_duplicate(d, duphead, dups, meta, pool, k):
    """Duplicate ``d`` was evicted: unlink it from its key's list."""
    g = dups[d, D_G]
    c = duphead[g] - 1
    if c == d:
        duphead[g] = dups[d, D_NEXT_KEY] + 1
    else:
        while dups[c, D_NEXT_KEY] != d:
            c = dups[c, D_NEXT_KEY]
        dups[c, D_NEXT_KEY] = dups[d, D_NEXT_KEY]
    meta[k, M_DUPS] -= 1
    _free_duplicate(d, dups, pool)


@numba.njit(cache=True, nogil=True, inline="always")
def allocate(count, state, duphead, ent, dups, meta, pool, k, n_keys):
    """``count`` blocks from the head of replica ``k``'s free queue: keyless ones first, then the least recently
    released cached ones, whose keys are evicted (the caller checked that many are free)."""
    take = min(count, meta[k, M_KEYLESS])
    meta[k, M_KEYLESS] -= take
    count -= take
    off = k * n_keys
    while count > 0:
        e, c = meta[k, M_HEAD], meta[k, M_CUR]
        d = ent[e, E_DUP]
        if d >= 0:                              # a duplicate's entry: that one block
            _drop_duplicate(d, duphead, dups, meta, pool, k)
            count -= 1
            _unlink(e, ent, meta, pool, k)
            continue
        lo, mark, live = ent[e, E_LO], -1 - e, ent[e, E_LIVE]
        if meta[k, M_DUPS] == 0:        # the common case: no duplicate anywhere in this pool
            while c >= lo and count > 0 and live > 0:
                g = off + c
                if state[g] == mark:    # still free in this entry: evict it
                    state[g] = 0
                    live -= 1
                    count -= 1
                c -= 1
        else:
            while c >= lo and count > 0 and live > 0:
                g = off + c
                if state[g] == mark:
                    state[g] = 0
                    live -= 1
                    count -= 1
                    if duphead[g] != 0:
                        _promote(g, state, duphead, ent, dups, meta, pool, k)
                c -= 1
        ent[e, E_LIVE] = live
        meta[k, M_CUR] = c
        if live == 0:
            _unlink(e, ent, meta, pool, k)


@numba.njit(cache=True, nogil=True, inline="always")
def publish(lo, hi, state, duphead, dups, meta, pool, rdup, run_off, run_end, run_base, r, k, n_keys):
    """Cache request ``r``'s blocks ``lo … hi − 1`` under their keys; a key already cached gets the block as a
    duplicate after the others."""
    off = k * n_keys
    i, j = run_off[r], lo
    while j < hi:
        i, base, stop = block_span(run_end, run_base, i, j, hi, off)
        while j < stop:
            g = base + j
            if state[g] == 0:
                state[g] = 1
            else:
                _add_duplicate(g, r, j, duphead, dups, meta, pool, rdup, k)
            j += 1


@numba.njit(cache=True, nogil=True)
def _add_duplicate(g, r, j, duphead, dups, meta, pool, rdup, k):
    d = _take(pool, P_FREE_DUP, P_HIGH_DUP, dups, D_NEXT_KEY)
    dups[d, D_G], dups[d, D_J], dups[d, D_STATE] = g, j, 1
    dups[d, D_NEXT_KEY], dups[d, D_PROMOTED], dups[d, D_NEXT_REQ] = -1, 0, rdup[r] - 1
    rdup[r] = d + 1
    meta[k, M_DUPS] += 1
    c = duphead[g] - 1
    if c < 0:
        duphead[g] = d + 1
    else:
        while dups[c, D_NEXT_KEY] >= 0:
            c = dups[c, D_NEXT_KEY]
        dups[c, D_NEXT_KEY] = d


@numba.njit(cache=True, nogil=True)
def _new_entry(lo, dup, ent, meta, pool, k):
    """Append an entry for key ``lo`` (a range grown downwards while the run's keys follow) to replica ``k``'s
    queue; returns it."""
    e = _take(pool, P_FREE_ENTRY, P_HIGH_ENTRY, ent, E_NEXT)
    tail = meta[k, M_TAIL]
    ent[e, E_LO], ent[e, E_HI], ent[e, E_DUP], ent[e, E_NEXT], ent[e, E_PREV], ent[e, E_LIVE] = \
        lo, lo + 1, dup, -1, tail, 1
    if tail >= 0:
        ent[tail, E_NEXT] = e
    else:
        meta[k, M_HEAD], meta[k, M_CUR] = e, lo
    meta[k, M_TAIL] = e
    return e


@numba.njit(cache=True, nogil=True)
def release(blocks, published, state, duphead, ent, dups, meta, pool, rdup, run_off, run_end, run_base, r, k,
            n_keys):
    """Drop request ``r``'s hold on its ``blocks`` blocks, of which the first ``published`` are cached, last block
    first; returns how many became free (no other request holds them)."""
    meta[k, M_KEYLESS] += blocks - published        # its keyless tail: to the head, reused first
    freed = blocks - published
    if published == 0:
        return freed
    off = k * n_keys
    own = np.empty(0, np.int64)
    if rdup[r] != 0:            # its duplicates, by block; a promoted one is the first of its key now
        own = np.full(published, -1, np.int64)
        d = rdup[r] - 1
        while d >= 0:
            after = dups[d, D_NEXT_REQ]
            if dups[d, D_PROMOTED] == 1:
                _free_duplicate(d, dups, pool)
            else:
                own[dups[d, D_J]] = d
            d = after
        rdup[r] = 0
    i = run_off[r]
    while run_end[i] < published:
        i += 1
    j = published - 1
    first = run_off[r]
    while j >= 0:
        # an entry spans a run's keys released together, blocks other requests still hold included: the walk
        # passes those (they are not free in it); its lowest key and count are kept here until it closes
        start, open_entry, lo, live = run_end[i - 1] if i > first else 0, -1, 0, 0
        base = off + run_base[i]
        if own.shape[0] == 0:           # no duplicates: the common, tight case
            while j >= start:
                s = state[base + j] - 1
                if s == 0:
                    if open_entry < 0:
                        open_entry = _new_entry(base + j - off, -1, ent, meta, pool, k)
                    lo = base + j - off
                    live += 1
                    state[base + j] = -1 - open_entry
                else:
                    state[base + j] = s
                j -= 1
        else:
            while j >= start:
                g = base + j
                if own[j] >= 0:
                    if open_entry >= 0:
                        ent[open_entry, E_LO], ent[open_entry, E_LIVE] = lo, live
                        freed += live
                    d = own[j]
                    dups[d, D_STATE] = -1 - _new_entry(g - off, d, ent, meta, pool, k)
                    open_entry, live = -1, 0
                    freed += 1
                else:
                    s = state[g] - 1
                    if s == 0:
                        if open_entry < 0:
                            open_entry = _new_entry(g - off, -1, ent, meta, pool, k)
                        lo = g - off
                        live += 1
                        state[g] = -1 - open_entry
                    else:
                        state[g] = s
                j -= 1
        if open_entry >= 0:
            ent[open_entry, E_LO], ent[open_entry, E_LIVE] = lo, live
            freed += live
        i -= 1
    return freed
