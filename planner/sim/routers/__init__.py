"""Router registry: how a fleet's arrivals are spread over its replicas, one module per policy. The decisions
themselves run inside the compiled fleet loop (:func:`planner.sim.routers.rule.route`); a module names a policy, its
code there and what it does."""

from planner.errors import PlannerError
from planner.sim.routers import least_loaded, prefix_aware, round_robin
from planner.sim.routers.base import Router

ROUTERS: dict[str, Router] = {m.ROUTER.name: m.ROUTER for m in (least_loaded, round_robin, prefix_aware)}
DEFAULT_ROUTER = least_loaded.ROUTER.name


def get_router(name: str) -> Router:
    """The router called ``name``; an unknown name is refused with the list of known ones."""
    if name not in ROUTERS:
        raise PlannerError(f"unknown --router {name!r}: expected one of {', '.join(ROUTERS)}")
    return ROUTERS[name]


__all__ = ["DEFAULT_ROUTER", "ROUTERS", "Router", "get_router"]
