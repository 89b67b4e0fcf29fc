"""Least-loaded: the replica with the fewest outstanding tokens (context held), queued prefill included."""

from planner.sim.routers.base import LEAST_LOADED, Router

ROUTER = Router("least-loaded", LEAST_LOADED, "Each request goes to the replica with the fewest outstanding tokens: "
                "the context of every request it holds and has not finished (waiting prompts, queued prefill, the KV "
                "of running requests), what its queue-depth and KV-utilization metrics tell llm-d's scorers, read "
                "fresh at every arrival (no metrics staleness) and blind to the outputs still to come. Ties go to "
                "the next replica in rotation.")
