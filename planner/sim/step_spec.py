"""One engine step as the ``step`` command and ``calibrate --points`` name it: prefill chunks ``(new tokens,
earlier context)`` and decode groups ``(count, context)``, parsed from ``--prefill`` / ``--decode`` specs, and the
aggregates the cost model prices (:func:`planner.sim.cost_model.step_seconds`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numba

from planner.capacity.memory import blocks_per_request
from planner.errors import PlannerError
from planner.limits import MAX_COUNT

if TYPE_CHECKING:
    from planner.scenario import Scenario


@numba.njit(cache=True, nogil=True)
def window_skips(new, context, window):
    """``(pairs, context tokens)`` a sliding-window layer skips of what a full-attention one computes and reads for
    ``new`` tokens after ``context``: the query at position ``p`` attends ``min(p, window)`` keys, itself among them
    (vLLM hands FlashAttention ``window_size = (window − 1, 0)``), and the chunk reads ``min(context, window − 1)``
    earlier tokens. Integers, so sums of them are exact in any order; ``window`` 0 skips nothing."""
    end = context + new
    if window <= 0 or end <= window:
        return 0, 0
    low = context if context < window else window       # positions up to the window attend every earlier key
    kept = window * (window + 1) // 2 - low * (low + 1) // 2 + (end - max(context, window)) * window
    return new * context + new * (new + 1) // 2 - kept, max(context - window + 1, 0)


@numba.njit(cache=True, nogil=True)
def tally(batch, new, c, prompt, generated, window):
    """Add ``new`` tokens after ``c`` computed ones of a request (``prompt`` and ``generated`` so far) to a step's
    ``batch``: prefill tokens, (query, key) pairs, decodes, context tokens, and the pairs and context a sliding
    ``window`` skips (:func:`window_skips`). A decode computes the one token sampled last."""
    if new == 1 and generated > 0 and c == prompt + generated - 1:
        batch[2] += 1.0
    else:
        batch[0] += new
    skipped_pairs, skipped_context = window_skips(new, c, window)
    batch[1] += new * c + new * (new + 1) / 2
    batch[3] += c
    batch[4] += skipped_pairs
    batch[5] += skipped_context


@numba.njit(cache=True, nogil=True)
def windowed(pairs, context, skipped_pairs, skipped_context, window_share):
    """A step's ``(attn_pairs, context_tokens)`` averaged over its layers, ``window_share`` of them sliding: every
    layer costs the same per pair and per token read, so the average prices the step (the tallies stay integers,
    and the simulator's loops blend them once per step)."""
    return pairs - window_share * skipped_pairs, context - window_share * skipped_context


def batch_aggregates(prefills: list[tuple[int, int]], decodes: list[tuple[int, int]], window: int = 0,
                     window_share: float = 0.0) -> tuple[float, ...]:
    """``(prefill_tokens, attn_pairs, decode_count, context_tokens, seqs)`` of prefill chunks ``(new, context)``
    and decode groups ``(count, context)``; with a sliding ``window`` on ``window_share`` of the layers, pairs and
    context are averaged over the layers (:func:`window_skips`), as :func:`windowed` gives the simulator's."""
    prefill_tokens = float(sum(n for n, _ in prefills))
    pairs = float(sum(n * k + n * (n + 1) / 2 for n, k in prefills) + sum(m * (k + 1) for m, k in decodes))
    decode_count = float(sum(m for m, _ in decodes))
    context = float(sum(k for _, k in prefills) + sum(m * k for m, k in decodes))
    skips = [window_skips.py_func(n, k, window) for n, k in prefills] + \
        [tuple(m * x for x in window_skips.py_func(1, k, window)) for m, k in decodes]
    pairs, context = windowed.py_func(pairs, context, sum(p for p, _ in skips), sum(c for _, c in skips), window_share)
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


def check_step(scenario: Scenario, prefills: list[tuple[int, int]], decodes: list[tuple[int, int]]) -> None:
    """Raise :class:`PlannerError` for an empty step, or a sequence longer than the scenario's ``max_model_len``
    (no engine runs one)."""
    if sum(n for n, _ in prefills) + sum(m for m, _ in decodes) <= 0:
        raise PlannerError("an empty step: give at least one --prefill or --decode")
    for tokens, context in prefills:
        if tokens + context > scenario.max_model_len:
            raise PlannerError(f"--prefill {tokens}@{context}: {tokens + context:,} tokens of context; expected at "
                               f"most --max-model-len ({scenario.max_model_len:,})")
    for _, context in decodes:      # the decoded token is the sequence's (context + 1)th
        if context >= scenario.max_model_len:
            raise PlannerError(f"--decode context {context:,}: expected at most --max-model-len − 1 "
                               f"({scenario.max_model_len - 1:,}): the decoded token makes {context + 1:,}")


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

