"""vLLM V1's KV block pool with prefix caching, as compiled helpers over flat arrays (one pool per replica).

The rules are vLLM V1's ``BlockPool`` and ``KVCacheManager`` (``../shared/reference/prefix-cache-and-routing.md``
§1.2–1.7, vLLM ``block_pool.py`` @c59cb794): one free queue per replica holding every block no running request
uses, cached or not, popped at the head; a block's key (its chained prefix hash) is set when a step that fills it is
scheduled and stays findable while the block waits in the free queue, until the block is popped for reuse (lazy
eviction); a hit on a free block takes it out of the queue and counts against the free blocks; a request's blocks
are released last block first, blocks without a key prepended to the head (reused first) and keyed ones appended to
the tail (vLLM PR #42656), so a chain's tail is evicted before the prefix it extends; duplicates of a key are kept
(block tables are append-only) and a lookup returns the first one cached (``get_cached_block``).

Since keyed blocks only ever join the tail and keyless ones only the head, vLLM's queue is always every free
keyless block followed by the free keyed blocks in the order they were released. The pool keeps it as exactly that:

- a stack of keyless free blocks (they carry nothing, so which of them is reused first is unobservable; the
  initial blocks come out in block-id order, as vLLM's initial queue);
- a ring of keyed free blocks in release order; a hit on one (``touch``) leaves a hole the head skips, and a full
  ring is compacted. Appends and pops walk memory in order, which a linked list of blocks does not;
- ``first[h]``: the first block cached under key ``h`` in any replica (keys are dense: the runs number them, so
  this is direct addressing, four bytes per key), −1 for none; ``dup[b]``: the next block cached under the same key,
  in the order they were cached. A replica's lookup walks that chain to its own first block (a short chain: one
  entry per replica holding the key, plus duplicates). A request's keys are consecutive, so its lookups and
  publications walk ``first`` in order; an open-addressing table measured five times slower here.

Block ids are ``replica × blocks + b``. :mod:`planner.sim.reference` keeps the same rules with a Python
``OrderedDict`` as the queue; the tests hold the two to identical results.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def new_pool(replicas, blocks, n_keys):
    """Empty pools of ``blocks`` usable blocks per replica, for keys below ``n_keys``: ``(key, ref, dup, qpos, ring,
    heads, tails, stack, depth, first)``."""
    total = replicas * blocks
    key = np.full(total, -1, np.int64)
    ref = np.zeros(total, np.int32)
    dup = np.full(total, -1, np.int32)
    qpos = np.zeros(total, np.int64)
    cap = 4
    while cap < 2 * blocks + 2:     # room for every block and as many holes; a power of two: masks, not divisions
        cap *= 2
    ring = np.full((replicas, cap), -1, np.int32)
    heads = np.zeros(replicas, np.int64)
    tails = np.zeros(replicas, np.int64)
    stack = np.empty((replicas, max(blocks, 1)), np.int32)
    depth = np.full(replicas, blocks, np.int64)
    for k in range(replicas):
        for i in range(blocks):
            stack[k, i] = k * blocks + blocks - 1 - i      # popped from the top: block-id order
    first = np.full(n_keys, -1, np.int32)
    return key, ref, dup, qpos, ring, heads, tails, stack, depth, first


# Each helper below does a whole operation (a lookup, an allocation, a release) in one call: a call passing a
# dozen arrays costs about a hundred nanoseconds in reference counting, which per block would cost more than the
# work itself.

@numba.njit(cache=True, nogil=True)
def longest_hit(first, dup, run_off, run_end, run_base, r, cap, k, blocks, out):
    """vLLM's ``find_longest_cache_hit``: request ``r``'s blocks cached on replica ``k`` from block 0 up to the
    first miss, at most ``cap`` of them, written to ``out``; returns their number."""
    low = k * blocks
    i = run_off[r]
    for j in range(cap):
        while run_end[i] <= j:
            i += 1
        b = first[run_base[i] + j]
        while b >= 0 and not low <= b < low + blocks:
            b = dup[b]
        if b < 0:
            return j
        out[j] = b
    return cap


@numba.njit(cache=True, nogil=True)
def revive(hits, count, table, start, ref, ring, qpos, blocks):
    """A request's ``count`` hit blocks join its table; a free one leaves its queue (a hole the head skips)."""
    mask = ring.shape[1] - 1
    for j in range(count):
        b = hits[j]
        if ref[b] == 0:
            ring[b // blocks, qpos[b] & mask] = -1
        ref[b] += 1
        table[start + j] = b


@numba.njit(cache=True, nogil=True)
def allocate(count, table, start, key, ref, dup, ring, heads, stack, depth, first, k):
    """``count`` blocks from the head of replica ``k``'s free queue into ``table[start:]``: keyless ones first,
    then the least recently released cached ones, whose keys are evicted (the caller checked they are free)."""
    mask = ring.shape[1] - 1
    spare, head = depth[k], heads[k]
    for n in range(count):
        if spare > 0:
            spare -= 1
            b = stack[k, spare]
        else:
            while ring[k, head & mask] < 0:
                head += 1
            b = ring[k, head & mask]
            head += 1
            h = key[b]
            if h >= 0:          # lazy eviction: the key goes only now
                key[b] = -1
                c = first[h]
                if c == b:
                    first[h] = dup[b]
                else:
                    while dup[c] != b:
                        c = dup[c]
                    dup[c] = dup[b]
        ref[b] = 1
        table[start + n] = b
    depth[k], heads[k] = spare, head


@numba.njit(cache=True, nogil=True)
def publish(table, start, lo, hi, run_off, run_end, run_base, r, key, dup, first):
    """Cache request ``r``'s blocks ``lo … hi − 1`` (``table[start + j]``) under their keys, each after any block
    already cached under the same key (in any replica)."""
    i = run_off[r]
    for j in range(lo, hi):
        while run_end[i] <= j:
            i += 1
        h = run_base[i] + j
        b = table[start + j]
        key[b] = h
        dup[b] = -1
        c = first[h]
        if c < 0:
            first[h] = b
        else:
            while dup[c] >= 0:
                c = dup[c]
            dup[c] = b


@numba.njit(cache=True, nogil=True)
def _compact(ring, qpos, heads, tails, k):
    """Close the holes of replica ``k``'s ring (it filled up with them), keeping the order."""
    mask = ring.shape[1] - 1
    live = np.empty(ring.shape[1], np.int32)
    n = 0
    for p in range(heads[k], tails[k]):
        b = ring[k, p & mask]
        if b >= 0:
            live[n] = b
            n += 1
    ring[k, :] = -1
    for i in range(n):
        ring[k, i] = live[i]
        qpos[live[i]] = i
    heads[k] = 0
    tails[k] = n


@numba.njit(cache=True, nogil=True)
def release(table, start, count, key, ref, qpos, ring, heads, tails, stack, depth, k):
    """Drop a request's hold on its ``count`` blocks ``table[start:start+count]``, last block first; returns how
    many became free (no other request holds them)."""
    cap = ring.shape[1]
    mask = cap - 1
    freed = 0
    for j in range(count - 1, -1, -1):
        b = table[start + j]
        ref[b] -= 1
        if ref[b] == 0:
            if key[b] >= 0:         # keyed: to the tail, evicted after everything released before
                if tails[k] - heads[k] == cap:
                    _compact(ring, qpos, heads, tails, k)
                tail = tails[k]
                ring[k, tail & mask] = b
                qpos[b] = tail
                tails[k] = tail + 1
            else:                   # keyless: to the head, reused first
                stack[k, depth[k]] = b
                depth[k] += 1
            freed += 1
    return freed
