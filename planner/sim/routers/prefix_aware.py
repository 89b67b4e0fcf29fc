"""Prefix-aware: a session (or shared prefix) sticks to the replica that served it, unless that one is much busier.

"Much busier" is our rule, not a copied one: the home replica's outstanding tokens exceed twice the least-loaded
replica's plus a quarter of one replica's KV pool. It follows llm-d's default weights in spirit (prefix-cache
scorer 3 against queue 2 and KV-utilization 2: a full prefix match outweighs a KV-usage gap unless the queues differ
too; reference/prefix-cache-and-routing.md §3); inference-sim warns that prefix affinity without a load term piles
cold starts onto one replica, and this bound is that load term. Requests with no identity are routed least-loaded.
The affinity pays once replicas cache prefixes (vLLM V1's prefix cache).
"""

from planner.sim.routers.base import PREFIX_AWARE, Router

STICK_POOL_FRACTION = 4      # the margin: 1/4 of a replica's KV pool, in tokens

ROUTER = Router("prefix-aware", PREFIX_AWARE, "Requests of one session (or shared prefix) go back to the replica "
                "that served the session, unless it holds more than twice the least-loaded replica's outstanding "
                "tokens plus a quarter of its KV pool; then to the least-loaded one, which becomes the session's "
                "home. Requests without an identity go least-loaded.")
