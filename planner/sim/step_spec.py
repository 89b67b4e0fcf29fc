"""One engine step as the ``step`` command and ``calibrate --points`` name it: prefill chunks ``(new tokens,
earlier context)`` and decode groups ``(count, context)``, parsed from ``--prefill`` / ``--decode`` specs, and the
aggregates the cost model prices (:func:`planner.sim.cost_model.step_seconds`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.capacity.memory import blocks_per_request
from planner.errors import PlannerError
from planner.limits import MAX_COUNT

if TYPE_CHECKING:
    from planner.scenario import Scenario


def batch_aggregates(prefills: list[tuple[int, int]], decodes: list[tuple[int, int]]) -> tuple[float, ...]:
    """``(prefill_tokens, attn_pairs, decode_count, context_tokens, seqs)`` of prefill chunks ``(new, context)``
    and decode groups ``(count, context)``."""
    prefill_tokens = float(sum(n for n, _ in prefills))
    pairs = float(sum(n * k + n * (n + 1) / 2 for n, k in prefills) + sum(m * (k + 1) for m, k in decodes))
    decode_count = float(sum(m for m, _ in decodes))
    context = float(sum(k for _, k in prefills) + sum(m * k for m, k in decodes))
    return prefill_tokens, pairs, decode_count, context, float(len(prefills)) + decode_count


def beyond_limits(scenario: Scenario, prefills: list[tuple[int, int]], decodes: list[tuple[int, int]]) -> list[str]:
    """Why the scenario's server never runs this step, one clause each (empty when it could): more sequences than
    ``max_num_seqs``, or more KV than its block pool holds (each sequence's context and new tokens, in whole
    blocks). A step past them is extrapolated: no measurement or prediction of it is one of this server's."""
    sequences = len(prefills) + sum(m for m, _ in decodes)
    out = [f"{sequences:,} sequences, more than max_num_seqs {scenario.max_num_seqs:,}"] \
        if sequences > scenario.max_num_seqs else []
    plan = scenario.memory

    def held(tokens: int) -> float:     # a sliding-window layer holds only its window
        return blocks_per_request(scenario.model, tokens, scenario.block_size, scenario.max_num_batched_tokens)

    blocks = math.ceil(sum(held(n + k) for n, k in prefills) + sum(m * held(k + 1) for m, k in decodes))
    if plan.num_blocks > 0 and blocks > plan.num_blocks:
        out.append(f"{blocks:,} KV blocks, more than the {plan.num_blocks:,} of the pool")
    return out


# sequences one step spec may name: past any engine's max_num_seqs (vLLM's default is 256 to 1,024)
MAX_STEP_SEQUENCES = 65_536


def _whole(text: str, low: int, high: int) -> int:
    value = int(text)
    if not low <= value <= high:
        raise ValueError(text)
    return value


def parse_prefill(spec: str) -> list[tuple[int, int]]:
    """``512`` (one chunk, no context), ``512x4`` (four), ``512@1024`` (after 1,024 computed tokens)."""
    try:
        head, _, context = spec.partition("@")
        tokens, _, count = head.partition("x")
        chunk = (_whole(tokens, 1, MAX_COUNT), _whole(context or "0", 0, MAX_COUNT))
        return [chunk] * _whole(count or "1", 1, MAX_STEP_SEQUENCES)
    except ValueError:
        raise PlannerError(f"--prefill {spec!r}: expected TOKENS, TOKENSxCOUNT or TOKENS@CONTEXT (TOKENS and COUNT "
                           f"at least 1, COUNT at most {MAX_STEP_SEQUENCES:,}, CONTEXT at least 0)") from None


def parse_decode(spec: str) -> tuple[int, int]:
    """``16x640``: 16 decoding sequences with 640 tokens of context each."""
    try:
        count, _, context = spec.partition("x")
        return _whole(count, 1, MAX_STEP_SEQUENCES), _whole(context, 1, MAX_COUNT)
    except ValueError:
        raise PlannerError(f"--decode {spec!r}: expected COUNTxCONTEXT such as 16x640 (COUNT from 1 to "
                           f"{MAX_STEP_SEQUENCES:,}, CONTEXT at least 1)") from None

