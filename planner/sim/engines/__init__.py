"""Engine registry: one module per scheduler; a new scheduler is one more module in this list."""

from planner.errors import PlannerError
from planner.sim.engines import orca, static, tgi, trtllm, vllm_v0, vllm_v1
from planner.sim.engines.base import Engine, EngineSettings, RawRun

ENGINES: dict[str, Engine] = {m.ENGINE.name: m.ENGINE for m in (vllm_v1, vllm_v0, orca, static, tgi, trtllm)}


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise PlannerError(f"unknown --engine {name!r}: expected one of {', '.join(ENGINES)}")
    return ENGINES[name]


__all__ = ["ENGINES", "Engine", "EngineSettings", "RawRun", "get_engine"]
