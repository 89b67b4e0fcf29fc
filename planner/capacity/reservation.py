"""KV reservation policies: each simulated engine's own admission rule, and, as labelled alternatives no engine
here runs, SGLang's and the seed article's page formula.

Each policy says how many KV tokens a request holds at its peak, given its prompt, its actual output and the
``max_new_tokens`` it was sent with (engines.md §7). The engines' policies are derived from the engines
(:meth:`planner.sim.engines.base.Engine.peak_tokens`, the rule their loops admit by): vLLM reserves nothing ahead,
it allocates blocks as tokens are computed and preempts when they run out, so its peak is the request's final
length less the last token sampled, which is never fed back. A new engine brings its policy with it; a new
alternative is one ``Policy`` entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from planner.sim.engines import ENGINES
from planner.sim.engines.base import kv_tokens_held
from planner.sim.kernel import LAZY


@dataclass(frozen=True)
class Policy:
    """``peak_tokens(prompt, output, max_new, block_size) -> tokens held at the request's peak`` (arrays
    broadcast)."""

    name: str
    label: str
    peak_tokens: Callable[[np.ndarray, np.ndarray, float, int], np.ndarray]
    help: str
    preempts: bool        # lazy growth that can run out (True) or a reservation that guarantees completion
    simulated: bool = True    # an engine of the simulator (False: an alternative shown for comparison)


def _engine_policies() -> list[Policy]:
    """One policy per distinct admission rule among the engines (vLLM V1 and V0 share the lazy one)."""
    groups: dict[tuple, list] = {}
    for engine in ENGINES.values():
        if engine.reservation is not None:
            groups.setdefault((engine.reservation, engine.block_tokens), []).append(engine)
    out = []
    for engines in groups.values():
        first = engines[0]
        out.append(Policy(first.name, " / ".join(e.label for e in engines), first.peak_tokens, first.help,
                          preempts=first.reservation == LAZY))
    return out


def _sglang(ratio: float):
    """SGLang admits against input + min(max_new, 4096) but then counts a running request's remaining tokens times
    ``new_token_ratio``; with a ratio below 1 the hold peaks at the end: everything generated plus ratio × what
    ``max_new_tokens`` still allows."""
    def held(prompt, output, max_new, block_size):
        generated = np.minimum(output, max_new)
        return prompt + generated + ratio * np.minimum(np.maximum(max_new - generated, 0.0), 4096)
    return held


def _seed(prompt, output, max_new, block_size):
    pages = np.ceil(np.asarray(max_new, dtype=float) / block_size) * block_size
    return np.broadcast_to(pages, np.shape(prompt)).astype(float)


POLICIES: dict[str, Policy] = {p.name: p for p in (*_engine_policies(),
    Policy("sglang", "SGLang, new_token_ratio 0.7 (after a reset)", _sglang(0.7),
           "Admits against input + min(max_new_tokens, 4096); running requests count remaining × new_token_ratio, "
           "which starts at 0.7 after an idle period or a retraction ...", True, simulated=False),
    Policy("sglang-decayed", "SGLang, new_token_ratio 0.098 (decayed)", _sglang(0.098),
           "... and decays linearly to 0.098 over 600 decode steps; when decode runs out it retracts requests and "
           "raises the ratio again.", True, simulated=False),
    Policy("seed", "Seed article's page formula (not a real engine)", _seed,
           "ceil(max_new_tokens / block) pages per request, prompt ignored: the arithmetic of seed 002, which claims "
           "vLLM works this way. vLLM does not reserve for max_new_tokens.", False, simulated=False),
)}


def seed_concurrency(pool_pages: int, max_new_tokens: int, block_size: int = 16) -> int:
    """The seed's ceiling: ``pool_pages // ceil(max_new_tokens / block_size)`` (1,000 pages, 128 → 125)."""
    return int(pool_pages // -(-max_new_tokens // block_size))


def concurrency_ceiling(policy: Policy, pool_tokens: int, prompt: np.ndarray, output: np.ndarray,
                        max_new: float, block_size: int = 16) -> float:
    """How many of this trace's requests fit at once: the pool over the mean peak a request holds."""
    peak = float(np.mean(policy.peak_tokens(np.asarray(prompt, float), np.asarray(output, float), max_new,
                                            block_size)))
    return pool_tokens / peak if peak > 0 else float("inf")


def exceed_share(output: np.ndarray, max_new: float) -> float:
    """Share of requests whose output is longer than ``max_new_tokens`` (truncated, or preempted under a
    reservation sized to it)."""
    return float(np.mean(np.asarray(output) > max_new))


def tradeoff_table(pool_tokens: int, prompt: np.ndarray, output: np.ndarray, block_size: int = 16,
                   max_new_grid: np.ndarray | None = None) -> list[dict]:
    """For each policy and ``max_new_tokens``: concurrency ceiling, reserved over used KV, share exceeding.

    ``used`` is what a request really holds at its end (prompt + output within ``max_new_tokens``, less the last
    token sampled): the over-reservation factor is mean peak held over mean used.
    """
    prompt, output = np.asarray(prompt, float), np.asarray(output, float)
    if max_new_grid is None:
        top = max(2048.0, float(np.max(output)) * 1.5)
        max_new_grid = np.unique(np.round(np.geomspace(16, top, 24)))
    rows = []
    for value in max_new_grid:
        used = float(np.mean(kv_tokens_held(prompt, np.minimum(output, value))))
        share = exceed_share(output, value)
        for policy in POLICIES.values():
            peak = float(np.mean(policy.peak_tokens(prompt, output, value, block_size)))
            rows.append({"policy": policy.name, "label": policy.label, "max_new_tokens": float(value),
                         "concurrency": pool_tokens / peak if peak else None, "reserved_tokens": peak,
                         "used_tokens": used, "over_reservation": peak / used if used else None,
                         "exceed_share": share})
    return rows


def percentile_settings(output: np.ndarray, percentiles=(90, 95, 99)) -> list[dict]:
    """The seed's procedure: ``max_new_tokens`` at the p90/p95/p99 of measured outputs, and what each cuts."""
    output = np.asarray(output, float)
    rows = []
    for p in percentiles:
        value = float(np.ceil(np.percentile(output, p)))
        rows.append({"percentile": p, "max_new_tokens": value, "exceed_share": exceed_share(output, value)})
    return rows
