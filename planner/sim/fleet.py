"""A fleet: how many identical replicas of one scenario serve the traffic, and the router in front of them."""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError
from planner.sim.routers import DEFAULT_ROUTER, get_router

MAX_REPLICAS = 4096     # far past any one trace's need; bounds the per-replica arrays


@dataclass(frozen=True)
class Fleet:
    """``replicas`` copies of a scenario behind ``router`` (a name in :data:`planner.sim.routers.ROUTERS`)."""

    replicas: int = 1
    router: str = DEFAULT_ROUTER

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or \
                not 1 <= self.replicas <= MAX_REPLICAS:
            raise PlannerError(f"--replicas {self.replicas!r}: expected a whole number from 1 to {MAX_REPLICAS:,}")
        get_router(self.router)

    def to_dict(self) -> dict:
        return {"replicas": self.replicas, "router": self.router}


ONE = Fleet()
