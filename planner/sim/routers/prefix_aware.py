"""Prefix-aware: a session (or shared prefix) sticks to the replica that served it, unless that one is much busier.

"Much busier" is our rule, not a copied one: the home replica's outstanding tokens exceed twice the least-loaded
replica's plus ``stick_tokens`` (one step's token budget, ``max_num_batched_tokens``). inference-sim warns that
prefix affinity without a load term piles cold starts onto one replica; this bound is that load term. Requests with
no identity are routed least-loaded. The affinity pays once replicas cache prefixes (vLLM V1's prefix cache).
"""

from planner.sim.routers.base import PREFIX_AWARE, Router

ROUTER = Router("prefix-aware", PREFIX_AWARE, "Requests of one session (or shared prefix) go back to the replica "
                "that served the session, unless it holds more than twice the least-loaded replica's outstanding "
                "tokens plus one step's budget; then to the least-loaded one, which becomes the session's home. "
                "Requests without an identity go least-loaded.")
