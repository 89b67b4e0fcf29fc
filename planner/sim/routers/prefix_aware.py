"""Prefix-aware: llm-d's default profile, its prefix, queue and KV-utilization scorers weighed 3, 2 and 2.

A replica scores the share of the request's prompt it holds (the longest prefix it shares with a request routed
there recently: :func:`planner.sim.routers.rule.prefix_scored`), its queue (min-max inverted) and its free KV; the
highest sum wins (reference/prefix-cache-and-routing.md §3). A prefix every replica holds (a system prompt) scores
alike everywhere and load decides; a conversation's earlier turns keep it home until the queues differ widely.
Following only the last request holding a prefix had chained every request sharing a system prompt onto one
replica (3,000 requests on four H100s at 15 req/s: TTFT p99 1,270 ms against least-loaded's 187 ms, at the same
hit rate). A session turn that extends no earlier one goes back to its replica unless that one holds more than
twice the least-loaded replica's outstanding tokens plus a quarter of its KV pool (our rule). Requests with no
identity are routed least-loaded. The affinity pays once replicas cache prefixes (vLLM V1's prefix cache).
"""

from planner.sim.routers.base import PREFIX_AWARE, Router

ROUTER = Router("prefix-aware", PREFIX_AWARE, "Each request goes to the replica with the highest llm-d score: 3 × the "
                "share of its prompt the replica holds (from the requests recently routed there), 2 × its queue "
                "score and 2 × its free KV. A session turn that extends no earlier request goes back to the "
                "session's replica unless it holds more than twice the least-loaded replica's outstanding tokens "
                "plus a quarter of its KV pool. Requests without an identity go least-loaded.")
