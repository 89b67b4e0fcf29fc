"""Checks of single scenario values: each error names the flag that sets the value (as ``vllm serve`` and this CLI
spell it) and what was expected, so :class:`planner.scenario.Scenario` refuses what vLLM would refuse, at once."""

from __future__ import annotations

import math
import numbers

from planner.capacity.memory import Overheads
from planner.errors import PlannerError
from planner.sim.cost_model import PARAM_RANGES, CostParams

# how each field is spelled on the command line (planner.cli.scenario_args registers them; errors name them)
FLAGS = {"model": "--model", "gpu": "--gpu", "tp": "--tp", "weight_dtype": "--weight-dtype",
         "kv_cache_dtype": "--kv-cache-dtype", "gpu_memory_utilization": "--gpu-mem-util",
         "max_model_len": "--max-model-len", "block_size": "--block-size", "num_gpu_blocks": "--num-gpu-blocks",
         "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
         "engine": "--engine", "chunked_prefill": "--no-chunked-prefill", "preemption": "--preemption",
         "max_new_tokens": "--max-new-tokens", "reserve_quantile": "--reserve-predicted", "priority": "--priority",
         "price": "--price", "prefix_caching": "--no-prefix-cache", "async_scheduling": "--no-async-scheduling"}


def flag(name: str) -> str:
    """The flag that sets scenario field ``name`` (the field's name where no flag does)."""
    return FLAGS.get(name, name)


def number(name: str, value) -> float:
    """``value`` as a finite float, else the error naming field ``name``'s flag."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise PlannerError(f"{flag(name)} {value!r}: expected a number") from None
    if not math.isfinite(out):
        raise PlannerError(f"{flag(name)} {value!r}: expected a finite number")
    return out


def integer(name: str, value, low: int) -> int:
    """``value`` as an int of at least ``low`` (a whole float such as 8.0 too; not True), else the error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value != int(value):
        raise PlannerError(f"{flag(name)} {value!r}: expected a whole number of at least {low}")
    if value < low:
        raise PlannerError(f"{flag(name)} {int(value)}: expected a whole number of at least {low}")
    return int(value)


def choice(name: str, value, options) -> None:
    """Refuses a ``value`` not among ``options``, listing them."""
    if value not in options:
        raise PlannerError(f"{flag(name)} {value!r}: expected one of {', '.join(options)}")


def check_overheads(overheads: Overheads) -> None:
    """Refuses a memory overhead that is not a non-negative, finite number of bytes."""
    for name in ("activation_bytes", "non_torch_bytes", "cudagraph_bytes", "weights_bytes"):
        value = getattr(overheads, name)
        if value is not None and (not math.isfinite(value) or value < 0):
            raise PlannerError(f"memory overhead {name} {value!r}: expected a non-negative number of bytes")


def real_number(value) -> bool:
    """A number, not a true/false (``True`` is an int to Python, but 1 s of overhead to nobody)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_cost(cost: CostParams) -> None:
    """The cost model's parameters, as a calibration file or defaults give them, each in its
    :data:`planner.sim.cost_model.PARAM_RANGES`."""
    for name, (lo, hi) in PARAM_RANGES.items():
        value = getattr(cost, name)
        if value is None and name in ("mfu", "mbu", "allreduce_latency_s", "tp_step_overhead_s", "roofline_p",
                                      "link_efficiency"):
            continue            # the GPU's, the engine's
        if not real_number(value) or not math.isfinite(value) or not lo <= value <= hi:
            what = ("seconds" if name.endswith("_s") else "a knee's sharpness" if name == "roofline_p"
                    else "a fraction of the peak")
            raise PlannerError(f"cost model {name} {value!r} ({cost.source}): expected {what} in [{lo:g}, {hi:g}]")
