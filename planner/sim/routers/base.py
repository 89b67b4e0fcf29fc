"""What a router module provides."""

from dataclasses import dataclass

import numba

ROUND_ROBIN, LEAST_LOADED, PREFIX_AWARE = 0, 1, 2     # codes the compiled fleet loop branches on


@dataclass(frozen=True)
class Router:
    """A routing policy: its CLI name, its code in the compiled fleet loop, and a sentence on what it does."""

    name: str
    code: int
    help: str
    uses_state: bool = True     # False: the choice ignores the replicas' state (round-robin)


@numba.njit(cache=True, nogil=True)
def route(router, r, replicas, waiting, load, group, home, stick_tokens, turn, parent, replica):
    """The replica request ``r`` goes to: round-robin by arrival order (of the requests that fit
    ``max_model_len``); least-loaded by the fewest requests waiting for a batch slot, then the fewest outstanding
    tokens (the rotation from ``turn`` breaks ties); prefix-aware sends a request to the replica of the request it
    shares its prefix with (``parent``: that replica cached the prefix), else a group (session) back to its
    replica, unless that one holds more than twice the least load plus ``stick_tokens``. ``waiting`` and ``load``
    are each replica's as they stand at the arrival (no metrics staleness): its queue (a step takes requests from
    it when it begins), and its tokens as they were when its step began plus what was routed to it since."""
    if router == ROUND_ROBIN or replicas == 1:
        return r % replicas
    best = turn % replicas
    for step in range(1, replicas):
        j = (turn + step) % replicas
        if waiting[j] < waiting[best] or (waiting[j] == waiting[best] and load[j] < load[best]):
            best = j
    if router == PREFIX_AWARE and 0 <= parent[r] < r:
        there = replica[parent[r]]
        if load[there] <= 2 * load[best] + stick_tokens:
            if group[r] >= 0:
                home[group[r]] = there
            return there
    if router == PREFIX_AWARE and group[r] >= 0:
        g = group[r]
        if home[g] >= 0 and load[home[g]] <= 2 * load[best] + stick_tokens:
            return home[g]
        home[g] = best
    return best
