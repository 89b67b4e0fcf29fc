"""Least-loaded: the replica with the fewest outstanding tokens, queued prefill included."""

from planner.sim.routers.base import LEAST_LOADED, Router

ROUTER = Router("least-loaded", LEAST_LOADED, "Each request goes to the replica with the fewest outstanding tokens "
                "(prompt tokens still to compute, queued or running, plus output tokens still to generate): the "
                "load signal llm-d's load-aware scorers approximate, read fresh at every arrival (no metrics "
                "staleness). Ties go to the next replica in rotation.")
