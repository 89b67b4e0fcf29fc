"""The routing rule the compiled fleet loop (:mod:`planner.sim.kernel`) runs, branching on the router's code."""

import numba
import numpy as np

from planner.sim.routers.base import PREFIX_AWARE, ROUND_ROBIN

# llm-d's default scheduling profile (reference/prefix-cache-and-routing.md §3: loader/defaults.go): the prefix
# scorer weighs 3, the queue and KV-utilization scorers 2 each; the replica with the highest weighted sum wins
PREFIX_WEIGHT, QUEUE_WEIGHT, KV_WEIGHT = 3.0, 2.0, 2.0
# how far up the prefix tree the router looks for replicas that hold a request's prefix: the requests routed most
# recently with it (llm-d's router-side index keeps ~31,000 blocks per replica; a tree of recent holders is its
# stand-in here)
MATCH_ANCESTORS = 64
# a session turn that extends no earlier request goes back to its replica unless that one holds more than twice
# the least-loaded replica's outstanding tokens plus this share of a replica's KV pool (our rule)
STICK_POOL_FRACTION = 4


@numba.njit(cache=True, nogil=True)
def route(router, r, replicas, waiting, load, group, home, pool_tokens, turn, lineage, replica):
    """The replica request ``r`` goes to: round-robin by arrival order (of the requests that fit
    ``max_model_len``); least-loaded by the fewest requests waiting for a batch slot, then the fewest outstanding
    tokens (the rotation from ``turn`` breaks ties); prefix-aware by :func:`prefix_scored` where ``r`` shares a
    prefix with an earlier request (``lineage[r]``: its parent, the tokens they share, its prompt), else a group
    (session) back to its replica unless that one is much busier (:data:`STICK_POOL_FRACTION`). ``waiting`` and
    ``load`` are each replica's as they stand at the arrival (no metrics staleness): its queue (a step takes
    requests from it when it begins), and its tokens as they were when its step began plus what was routed to it
    since; ``pool_tokens`` is one replica's KV pool."""
    if router == ROUND_ROBIN or replicas == 1:
        return r % replicas
    if router == PREFIX_AWARE and 0 <= lineage[r, 0] < r:     # scored on its own: the least-loaded scan is not read
        chosen = prefix_scored(r, replicas, waiting, load, pool_tokens, turn, lineage, replica)
        if group[r] >= 0:
            home[group[r]] = chosen
        return chosen
    best = turn % replicas
    for step in range(1, replicas):
        j = (turn + step) % replicas
        if waiting[j] < waiting[best] or (waiting[j] == waiting[best] and load[j] < load[best]):
            best = j
    if router == PREFIX_AWARE and group[r] >= 0:
        g = group[r]
        if home[g] >= 0 and load[home[g]] <= 2 * load[best] + pool_tokens // STICK_POOL_FRACTION:
            return home[g]
        home[g] = best
    return best


@numba.njit(cache=True, nogil=True)
def prefix_scored(r, replicas, waiting, load, pool_tokens, turn, lineage, replica):
    """The replica with the highest llm-d score for request ``r``: :data:`PREFIX_WEIGHT` × the share of its prompt
    a replica holds (the longest prefix it shares with a request routed there, up :data:`MATCH_ANCESTORS` links of
    the prefix tree, each link keeping the fewest tokens shared along it), :data:`QUEUE_WEIGHT` × the queue score
    (``(most − waiting) / (most − fewest)``, 1 where all wait alike) and :data:`KV_WEIGHT` × (1 − KV usage, its
    outstanding tokens over ``pool_tokens``); ties go to the next replica in rotation from ``turn``. A system
    prompt every replica holds scores alike everywhere, so load decides; a replica holding a share ``s`` of the
    prompt (a conversation's earlier turns) outweighs queue and KV gaps worth up to ``3 · s``."""
    held = np.zeros(replicas)
    ancestor, tokens = lineage[r, 0], lineage[r, 1]
    for _ in range(MATCH_ANCESTORS):
        if ancestor < 0 or ancestor >= r or tokens <= 0:      # none, or a virtual sequence (a declared prefix)
            break
        j = replica[ancestor]
        if j >= 0 and tokens > held[j]:
            held[j] = tokens
        tokens = min(tokens, lineage[ancestor, 1])
        ancestor = lineage[ancestor, 0]
    fewest, most = waiting.min(), waiting.max()
    best, top = turn % replicas, -1.0
    for step in range(replicas):
        j = (turn + step) % replicas
        queue = 1.0 if most == fewest else (most - waiting[j]) / (most - fewest)
        usage = min(load[j] / pool_tokens, 1.0) if pool_tokens > 0 else 0.0
        score = (PREFIX_WEIGHT * min(held[j] / max(lineage[r, 2], 1), 1.0) + QUEUE_WEIGHT * queue
                 + KV_WEIGHT * (1.0 - usage))
        if score > top:
            best, top = j, score
    return best
