"""What a router module provides: its name, its code in the compiled fleet loop (:mod:`planner.sim.routers.rule`)
and what it does. Nothing here is compiled, so the registry loads without numba (the CLI builds its parser from it)."""

from dataclasses import dataclass

ROUND_ROBIN, LEAST_LOADED, PREFIX_AWARE = 0, 1, 2     # codes the compiled fleet loop branches on


@dataclass(frozen=True)
class Router:
    """A routing policy: its CLI name, its code in the compiled fleet loop, and a sentence on what it does."""

    name: str
    code: int
    help: str
    uses_state: bool = True     # False: the choice ignores the replicas' state (round-robin)
