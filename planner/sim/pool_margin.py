"""How far a replay's verdict stands from the KV pool's edge: the smallest pool at which its queue still holds.

Where the pool binds, a verdict can turn on a few percent of blocks: BENCHMARKS.md's held servers include a vLLM V1
replay (Qwen3-14B on an L40S, roleplay prompts at 6 req/s) that is overloaded at 5,112 blocks and stable at 5,294,
because the prefix cache's working set sits between the two. The planner's pool is an estimate of what vLLM's
memory profiling leaves (its error against startup logs: BENCHMARKS.md, "KV capacity"), while a real server prints
its own at startup (``GPU KV cache size: N tokens``). So the edge is a number a serving engineer can hold against
that log line: a verdict whose edge lies within a tenth of the pool (:data:`NEAR`) is not one to size a fleet on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.sim.fleet import ONE, Fleet
from planner.tables import Table

if TYPE_CHECKING:
    from planner.scenario import Scenario
    from planner.sim.results import SimResult
    from planner.sim.workload import SimWorkload

# the pools searched run from 1/SEARCH_FACTOR to SEARCH_FACTOR times the scenario's: beyond 2x the pool is not
# what decides the verdict (the estimate's error on startup logs is a few percent, BENCHMARKS.md)
SEARCH_FACTOR = 2
# the bisection stops when the bracket is 1% of the pool wide: finer than the estimate can be trusted
RESOLUTION = 0.01
# an edge this close is within what the estimate can miss where memory is tight: a GiB vLLM's profile does not
# see (a CUDA graph pool, another process on the GPU) is 8% of the ~12 GiB pool a 14B model leaves on a 48 GB GPU
# at --gpu-memory-utilization 0.9 (a judgment, named as one; nothing is fitted to it)
NEAR = 0.10


@dataclass(frozen=True)
class PoolMargin:
    """Where a replay's queue flips between holding and overloaded as the KV pool (blocks per replica) changes,
    the rest held fixed.

    ``holds`` is whether the queue holds at the scenario's ``blocks`` (:func:`queue_holds`: stable or backlogged,
    every request fitting the pool).
    ``edge_blocks`` is the smallest pool found to hold, to :data:`RESOLUTION` of the pool, within
    ``searched_blocks``; None where the verdict does not flip there: a holding replay that still holds at the low
    end, or an overloaded one still overloaded at the high end (the pool is then not what overloads it). A verdict
    need not be monotone in the pool; the bisection reports the flip it brackets.
    """

    blocks: int
    holds: bool
    edge_blocks: int | None
    searched_blocks: tuple[int, int]
    simulations: int

    @property
    def change(self) -> float | None:
        """``edge_blocks`` relative to the pool (−0.12: it holds down to 12% fewer blocks)."""
        return None if self.edge_blocks is None else self.edge_blocks / self.blocks - 1

    @property
    def near(self) -> bool:
        """Whether the verdict flips within :data:`NEAR` of the pool."""
        return self.change is not None and abs(self.change) <= NEAR

    def sentence(self, subject: str = "The queue") -> str:
        """One line for the page and the CLI: the edge against the pool, or why there is none. "Bounded" is what
        :func:`queue_holds` checks (stable or backlogged), not that latencies are low: a backlogged queue drains,
        late."""
        lo, hi = self.searched_blocks
        if self.edge_blocks is None:
            end = (f"stays bounded at {self.blocks:,} KV blocks and still at {lo:,} (1/{SEARCH_FACTOR} of the pool)"
                   if self.holds else f"is overloaded at {self.blocks:,} KV blocks and still at {hi:,} "
                                      f"({SEARCH_FACTOR}x the pool)")
            return f"{subject} {end}: the verdict does not rest on the pool estimate."
        # what the bisection checked: the edge holds and a pool at most one step (1%) smaller overloads; the
        # verdict need not be monotone in the pool, so nothing is said of the pools in between
        below = f"a pool at most {RESOLUTION:.0%} of it smaller overloads"
        edge = (f"stays bounded at {self.blocks:,} KV blocks and at {self.edge_blocks:,} ({self.change:+.0%}), where "
                f"{below}" if self.holds else
                f"is overloaded at {self.blocks:,} KV blocks and bounded at {self.edge_blocks:,} "
                f"({self.change:+.0%}), where {below}")
        check = (": close enough that the verdict turns on the pool estimate; check the server's startup log"
                 if self.near else "; a server's startup log gives its real pool")
        return f"{subject} {edge}{check} (GPU KV cache size ÷ block size)."

    def table(self) -> Table:
        """The margin as one row (the report's simulation section)."""
        return Table("KV pool margin (blocks per replica)",
                     ["pool", "queue at the pool", "edge (bounded)", "change", "searched", "note"],
                     [[self.blocks, "bounded" if self.holds else "overloaded", self.edge_blocks, self.change,
                       "{:,}–{:,}".format(*self.searched_blocks), self.sentence()]])

    def to_dict(self) -> dict:
        return {"blocks": self.blocks, "holds": self.holds, "edge_blocks": self.edge_blocks,
                "change": self.change, "near": self.near, "searched_blocks": list(self.searched_blocks),
                "simulations": self.simulations}


def queue_holds(result: SimResult) -> bool:
    """Whether a replay's queue holds: not overloaded, and no request refused for needing more KV blocks than the
    pool has (a refused request never queues, so the verdict alone would read a pool too small for it as fine)."""
    return result.verdict != "overloaded" and not result.pool_refused.any()


def pool_margin(workload: SimWorkload, scenario: Scenario, *, fleet: Fleet = ONE, holds: bool | None = None,
                abort_wait_s: float = math.inf, progress: Callable[[float, str], None] | None = None) -> PoolMargin:
    """Replay ``workload`` at other KV pools (``--num-gpu-blocks-override`` on every replica) to find where the
    queue flips between holding (:func:`queue_holds`) and not.

    Parameters
    ----------
    workload, scenario, fleet, abort_wait_s
        The replay, as given to :func:`planner.sim.run.simulate` (a search's early stop reads as overloaded).
    holds : bool, optional
        :func:`queue_holds` of that replay at the scenario's pool, where the caller already simulated it.
    progress : callable, optional
        ``progress(fraction, message)`` after each replay.

    Returns
    -------
    PoolMargin
        One replay at the far end of the search, then a bisection to :data:`RESOLUTION` of the pool where the
        queue flips there (about eight replays in all).
    """
    from planner.sim.run import simulate

    blocks = scenario.settings.num_blocks
    count = 0
    budget = 2 + math.ceil(math.log2(1 / RESOLUTION))

    def held(n: int) -> bool:
        nonlocal count
        count += 1
        pool = scenario if n == blocks else scenario.replace(num_gpu_blocks=n)
        ok = queue_holds(simulate(workload, pool, fleet=fleet, abort_wait_s=abort_wait_s))
        if progress:
            progress(min(count / budget, 1.0), f"KV margin: {n:,} blocks {'hold' if ok else 'overload'}")
        return ok

    here = held(blocks) if holds is None else holds
    searched = (max(1, blocks // SEARCH_FACTOR), blocks * SEARCH_FACTOR)
    far = searched[0] if here else searched[1]
    edge = None
    if held(far) != here:
        fails, passes = (far, blocks) if here else (blocks, far)
        step = max(1, math.ceil(RESOLUTION * blocks))
        while passes - fails > step:
            mid = (fails + passes) // 2
            if held(mid):
                passes = mid
            else:
                fails = mid
        edge = passes
    margin = PoolMargin(blocks, here, edge, searched, count)
    if progress:
        progress(1.0, f"KV margin: {count} replays")
    return margin
