"""What a trace's prompt reuse is worth before any simulation: prefix-cache hit rates, ideal and under LRU.

The requests run one after another in arrival order, with no concurrency, under vLLM V1's prefix-cache rules
(``../shared/reference/prefix-cache-and-routing.md`` §1): a request of prompt ``P`` and output ``O`` at ``B``-token
blocks

- looks up the longest run of its leading block keys (:meth:`planner.sim.prefix.PrefixIdentity.runs`) already
  cached, at most ``⌊(P − 1)/B⌋`` blocks: vLLM recomputes at least the last prompt token to get its logits, so a
  prompt cached whole still recomputes its last block;
- computes, and publishes to the cache, the blocks ``j < ⌊(P + O − 1)/B⌋``: the last sampled token is never fed
  back, so a block it would complete is never computed.

The *ideal* cache never evicts; its hit rate bounds every real one and the blocks it ends up holding are the
trace's working set. The LRU cache of ``C`` blocks keeps a request's blocks out of the eviction order while it runs
(the hits it touched and the blocks it computes), then frees them last block first to the most recently used end
(vLLM's ``free`` reverses a request's blocks so a chain's tail is evicted before its prefix) and evicts from the
least recently used end down to ``C`` blocks. A block already cached is moved, never held twice.

No concurrency means no request ever waits for another's blocks or finds them mid-flight: this is the reuse the
order of the trace offers, not what a loaded engine realizes (the simulator's business).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import NamedTuple

import numba
import numpy as np

from planner.errors import PlannerError
from planner.jsonable import clean
from planner.sim.prefix import BlockRuns, PrefixIdentity

DEFAULT_BLOCK_SIZE = 16         # tokens per KV block (vLLM's default)
CURVE_POINTS = 16               # log-spaced cache sizes of the default curve
CURVE_SPAN = 512                # the default curve starts at the working set / 512
MAX_WORKERS = 4                 # LRU passes run at once (each holds ~17 bytes per key)
NO_IDENTITY = "none"

Progress = Callable[[float, str], None]


class CurvePoint(NamedTuple):
    """One cache size of the LRU curve."""

    cache_blocks: int
    cache_tokens: int
    hit_rate: float             # LRU hit tokens / prompt tokens


@dataclass(frozen=True)
class _ReuseTrace:
    """What an exact LRU pass at any size needs: each request's published block keys (CSR) and lookup cap."""

    key_off: np.ndarray         # int64, n + 1: request r's published keys are keys[key_off[r]:key_off[r+1]]
    keys: np.ndarray            # int64, dense block keys < n_keys
    cap_blocks: np.ndarray      # int64 per request: ⌊(P − 1)/B⌋, the most blocks a lookup may hit
    n_keys: int
    ideal_hit_tokens: np.ndarray    # int64 per request, the ideal pass's hits


@dataclass(frozen=True)
class ReuseAnalysis:
    """A trace's prompt reuse at one block size: the ideal (never-evicting) cache and an LRU curve.

    Rates are hit tokens over prompt tokens. ``curve`` holds ``(cache_blocks, cache_tokens, hit_rate)`` per LRU
    cache size, ascending; at the working set the LRU never evicts and equals the ideal. ``groups`` summarizes
    reuse within sessions (or prefix trees): ``by``, ``groups``, ``grouped_requests``, ``multi_request_groups``
    (two requests or more), ``mean_requests_per_group`` and the ``hit_rate_p50`` / ``hit_rate_p90`` of the
    per-group ideal hit rate over the multi-request groups (None without any).
    """

    source: str                 # the identity's source (a key of planner.sim.prefix.SOURCES), or "none"
    describe: str
    block_size: int
    requests: int
    prompt_tokens: int
    ideal_hit_tokens: int
    ideal_hit_rate: float
    working_set_blocks: int     # distinct blocks ever cached
    working_set_tokens: int
    curve: tuple[CurvePoint, ...]
    groups: dict
    _trace: _ReuseTrace | None = field(default=None, repr=False, compare=False)

    @property
    def request_ideal_hit_tokens(self) -> np.ndarray:
        """Each request's hit tokens in the ideal pass (int64, arrival order), for charts."""
        if self._trace is None:
            return np.zeros(self.requests, np.int64)
        return self._trace.ideal_hit_tokens

    def hit_rate_at(self, tokens: int) -> float:
        """The LRU hit rate of a cache of ``tokens`` tokens (its whole blocks), from an exact pass over the trace."""
        if not (isinstance(tokens, (int, np.integer)) and tokens >= 0):
            raise PlannerError(f"cache of {tokens!r} tokens: expected a whole number of tokens ≥ 0")
        if self._trace is None or self.prompt_tokens == 0:
            return 0.0
        return _lru_hit_tokens(self._trace, int(tokens) // self.block_size, self.block_size) / self.prompt_tokens

    def tokens_for(self, share_of_ideal: float) -> int | None:
        """The smallest cache (tokens, whole blocks) whose LRU hit rate reaches ``share_of_ideal`` of the ideal
        one: bracketed by the curve, then bisected with exact passes (None without reuse)."""
        if self._trace is None or not self.ideal_hit_tokens:
            return None
        target = share_of_ideal * self.ideal_hit_rate
        lo = 0
        hi = next((p.cache_blocks for p in self.curve if p.hit_rate >= target), self.working_set_blocks)
        lo = max((p.cache_blocks for p in self.curve if p.cache_blocks < hi and p.hit_rate < target), default=0)
        while hi - lo > max(1, hi // 64):       # to within 1.6%: each pass costs a sweep of the trace
            mid = (lo + hi) // 2
            if self.hit_rate_at(mid * self.block_size) >= target:
                hi = mid
            else:
                lo = mid
        return hi * self.block_size

    def to_dict(self, kv_bytes_per_token: int | None = None) -> dict:
        """Plain JSON: every field but the private pass data, the curve as ``{cache_tokens, cache_blocks,
        hit_rate}`` objects, with ``cache_gib`` (and ``working_set_gib``) given the KV bytes of one token."""
        gib = (lambda tokens: tokens * kv_bytes_per_token / 2**30) if kv_bytes_per_token else None
        curve = [{"cache_tokens": p.cache_tokens, "cache_blocks": p.cache_blocks, "hit_rate": p.hit_rate,
                  **({"cache_gib": gib(p.cache_tokens)} if gib else {})} for p in self.curve]
        return clean({"source": self.source, "describe": self.describe, "block_size": self.block_size,
                      "requests": self.requests, "prompt_tokens": self.prompt_tokens,
                      "ideal_hit_tokens": self.ideal_hit_tokens, "ideal_hit_rate": self.ideal_hit_rate,
                      "working_set_blocks": self.working_set_blocks, "working_set_tokens": self.working_set_tokens,
                      **({"working_set_gib": gib(self.working_set_tokens), "kv_bytes_per_token": kv_bytes_per_token}
                         if gib else {}),
                      "curve": curve, "groups": self.groups})


def analyse_reuse(identity: PrefixIdentity, input_tokens, output_tokens, block_size: int = DEFAULT_BLOCK_SIZE,
                  group=None, cache_blocks: Sequence[int] | None = None, progress: Progress | None = None
                  ) -> ReuseAnalysis:
    """The prompt reuse of a trace whose prefix identity is known (module docstring for the rules).

    Parameters
    ----------
    identity
        The trace's prefix tree, in the same (arrival) order as the lengths.
    input_tokens, output_tokens
        Prompt and output lengths per request.
    block_size
        Tokens per KV block.
    group
        Session code per request (−1 none) for the per-group summary; None groups requests by the root of their
        prefix tree (virtual sequences such as a declared system prompt do not join trees).
    cache_blocks
        LRU cache sizes in blocks; None gives :data:`CURVE_POINTS` sizes log-spaced from the working set / 512 to
        the working set.
    progress
        Called with ``(fraction done, message)`` after the ideal pass and each LRU size.

    Returns
    -------
    ReuseAnalysis
    """
    if identity is None:
        raise PlannerError("reuse analysis needs a prefix identity (hash_ids, sessions or a declared prefix); "
                           "no_identity() stands in for a trace without one")
    if not (isinstance(block_size, (int, np.integer)) and block_size >= 1):
        raise PlannerError(f"block size {block_size!r}: expected a whole number of tokens ≥ 1")
    block_size = int(block_size)
    prompt, output = _lengths(input_tokens, output_tokens, identity.n)
    trace, working_set = _prepare(identity, prompt, output, block_size)
    prompt_total = int(prompt.sum())
    ideal_hits = int(trace.ideal_hit_tokens.sum())
    if progress is not None:
        progress(0.0, "ideal cache done")

    sizes = _grid(working_set) if cache_blocks is None else _given_sizes(cache_blocks)
    rates: dict[int, float] = {}
    workers = max(1, min(len(sizes), MAX_WORKERS, os.cpu_count() or 1))
    # the kernel releases the GIL: sizes run side by side, each pass bound by memory latency rather than a core
    with ThreadPoolExecutor(max_workers=workers) as pool:
        jobs = {pool.submit(_lru_hit_tokens, trace, c, block_size): c for c in sizes}
        for done, job in enumerate(as_completed(jobs), start=1):
            c = jobs[job]
            rates[c] = _rate(job.result(), prompt_total)
            if progress is not None:
                progress(done / len(sizes), f"LRU cache of {c * block_size:,} tokens: {rates[c]:.1%} hit")
    curve = tuple(CurvePoint(c, c * block_size, rates[c]) for c in sizes)
    return ReuseAnalysis(identity.source, identity.describe(), block_size, identity.n, prompt_total, ideal_hits,
                         _rate(ideal_hits, prompt_total), working_set, working_set * block_size, curve,
                         _group_summary(identity, prompt, trace.ideal_hit_tokens, group), trace)


def workload_reuse(work, block_size: int = DEFAULT_BLOCK_SIZE, progress: Progress | None = None) -> ReuseAnalysis:
    """The reuse of a :class:`planner.sim.workload.SimWorkload` (its prefix identity and sessions), or the
    stand-in where it carries no identity."""
    if work.prefix is None:
        return no_identity(work.input_tokens, block_size)
    return analyse_reuse(work.prefix, work.input_tokens, work.output_tokens, block_size, work.group,
                         progress=progress)


def no_identity(input_tokens, block_size: int = DEFAULT_BLOCK_SIZE) -> ReuseAnalysis:
    """The stand-in for a trace without a prefix identity: its prompt tokens, no hit known, an empty curve (zero
    reuse here means none is known, not none exists)."""
    prompt = np.asarray(input_tokens, np.int64)
    return ReuseAnalysis(NO_IDENTITY, "no prefix identity: the trace has no hash_ids or sessions and no shared "
                         "prefix was declared, so its reuse is unknown", int(block_size), int(prompt.size),
                         int(prompt.sum()), 0, 0.0, 0, 0, (),
                         {"by": None, "groups": 0, "grouped_requests": 0, "multi_request_groups": 0,
                          "mean_requests_per_group": None, "hit_rate_p50": None, "hit_rate_p90": None})


def _lengths(input_tokens, output_tokens, n: int) -> tuple[np.ndarray, np.ndarray]:
    prompt = np.asarray(input_tokens, np.int64)
    output = np.asarray(output_tokens, np.int64)
    if prompt.shape != (n,) or output.shape != (n,):
        raise PlannerError(f"prefix identity of {n:,} requests for {prompt.size:,} prompt and {output.size:,} "
                           "output lengths")
    if n and (prompt.min() < 0 or output.min() < 0):
        raise PlannerError("negative token counts: expected prompt and output lengths ≥ 0")
    return prompt, output


def _rate(hit_tokens: int, prompt_tokens: int) -> float:
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


def _prepare(identity: PrefixIdentity, prompt: np.ndarray, output: np.ndarray, block_size: int
             ) -> tuple[_ReuseTrace, int]:
    """Flatten the published keys once and run the ideal pass; returns the pass data and the working set."""
    runs: BlockRuns = identity.runs(prompt + output, block_size)
    # np.maximum: an empty prompt looks nothing up, and an empty request publishes nothing
    cap = np.maximum((prompt - 1) // block_size, 0)
    publish = np.maximum((prompt + output - 1) // block_size, 0)
    if prompt.size and (runs.run_end[runs.run_off[1:] - 1] < publish).any():
        raise PlannerError("prefix identity runs cover fewer blocks than the requests publish")
    key_off = np.zeros(prompt.size + 1, np.int64)
    np.cumsum(publish, out=key_off[1:])
    keys = _flatten(runs.run_off, runs.run_end, runs.run_base, key_off)
    hit_blocks, working_set = _ideal_pass(key_off, keys, cap, runs.n_keys)
    return _ReuseTrace(key_off, keys, cap, runs.n_keys, hit_blocks * block_size), int(working_set)


def _lru_hit_tokens(trace: _ReuseTrace, capacity_blocks: int, block_size: int) -> int:
    return int(_lru_pass(trace.key_off, trace.keys, trace.cap_blocks, trace.n_keys, capacity_blocks)) * block_size


def _grid(working_set: int) -> list[int]:
    """Log-spaced sizes from the working set / 512 (at least one block) to the working set, which closes it."""
    if working_set == 0:
        return [0]
    low = max(1.0, working_set / CURVE_SPAN)
    sizes = {int(x) for x in np.rint(np.geomspace(low, working_set, CURVE_POINTS))}
    return sorted(sizes | {working_set})


def _given_sizes(cache_blocks: Sequence[int]) -> list[int]:
    sizes = set()
    for c in cache_blocks:
        if not (isinstance(c, (int, np.integer)) and c >= 0):
            raise PlannerError(f"cache of {c!r} blocks: expected whole numbers of blocks ≥ 0")
        sizes.add(int(c))
    return sorted(sizes)


def _roots(parent: np.ndarray) -> np.ndarray:
    """Each request's topmost ancestor among real requests (itself without one), by pointer doubling: parents
    come earlier, so the chains are acyclic and ⌈log₂ depth⌉ rounds settle them."""
    n = parent.size
    real = (parent >= 0) & (parent < n)
    root = np.where(real, parent, np.arange(n, dtype=np.int64))
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt


def _group_summary(identity: PrefixIdentity, prompt: np.ndarray, hit_tokens: np.ndarray, group) -> dict:
    if group is None:
        by, codes = "prefix tree", _roots(identity.parent)
    else:
        by, codes = "session", np.asarray(group, np.int64)
        if codes.shape != prompt.shape:
            raise PlannerError(f"{codes.size:,} session codes for {prompt.size:,} requests")
    member = codes >= 0
    _, index = np.unique(codes[member], return_inverse=True)
    requests = np.bincount(index)
    tokens = np.bincount(index, prompt[member]).astype(np.int64)
    hits = np.bincount(index, hit_tokens[member]).astype(np.int64)
    multi = requests >= 2
    rate = hits[multi] / np.maximum(tokens[multi], 1)
    return {"by": by, "groups": int(requests.size), "grouped_requests": int(member.sum()),
            "multi_request_groups": int(multi.sum()),
            "mean_requests_per_group": float(requests.mean()) if requests.size else None,
            "hit_rate_p50": float(np.percentile(rate, 50)) if rate.size else None,
            "hit_rate_p90": float(np.percentile(rate, 90)) if rate.size else None}


@numba.njit(cache=True, nogil=True)
def _flatten(run_off, run_end, run_base, key_off):
    """Each request's first ``key_off[r+1] − key_off[r]`` block keys, concatenated (runs in
    :class:`planner.sim.prefix.BlockRuns` form)."""
    keys = np.empty(key_off[-1], np.int64)
    for r in range(key_off.size - 1):
        pos, stop, start = key_off[r], key_off[r + 1], 0
        for i in range(run_off[r], run_off[r + 1]):
            end = min(run_end[i], start + stop - pos)
            for j in range(start, end):
                keys[pos] = run_base[i] + j
                pos += 1
            start = end
            if pos == stop:
                break
    return keys


@numba.njit(cache=True, nogil=True)
def _ideal_pass(key_off, keys, cap_blocks, n_keys):
    """Per-request hit blocks of a cache that never evicts, and how many distinct blocks it ends up holding."""
    n = key_off.size - 1
    cached = np.zeros(n_keys, np.bool_)
    hits = np.zeros(n, np.int64)
    held = 0
    for r in range(n):
        start, stop = key_off[r], key_off[r + 1]
        h = 0
        while h < cap_blocks[r] and cached[keys[start + h]]:
            h += 1
        hits[r] = h
        for p in range(start, stop):
            k = keys[p]
            if not cached[k]:
                cached[k] = True
                held += 1
    return hits, held


@numba.njit(cache=True, nogil=True)
def _lru_pass(key_off, keys, cap_blocks, n_keys, capacity):
    """Total hit blocks of an LRU cache of ``capacity`` blocks: a doubly linked list over the dense keys from the
    least (``nxt[n_keys]``) to the most recently used (``prv[n_keys]``), ``n_keys`` its sentinel."""
    head = n_keys
    prv = np.empty(n_keys + 1, np.int64)
    nxt = np.empty(n_keys + 1, np.int64)
    prv[head] = head
    nxt[head] = head
    cached = np.zeros(n_keys, np.bool_)
    size = 0
    total = 0
    for r in range(key_off.size - 1):
        start, stop = key_off[r], key_off[r + 1]
        h = 0
        while h < cap_blocks[r] and cached[keys[start + h]]:
            h += 1
        total += h
        # released last block first: the prefix ends up most recently used, so the tail goes first
        for p in range(stop - 1, start - 1, -1):
            k = keys[p]
            if cached[k]:
                nxt[prv[k]] = nxt[k]
                prv[nxt[k]] = prv[k]
            else:
                cached[k] = True
                size += 1
            last = prv[head]
            prv[k] = last
            nxt[k] = head
            nxt[last] = k
            prv[head] = k
        while size > capacity:
            k = nxt[head]
            nxt[head] = nxt[k]
            prv[nxt[k]] = head
            cached[k] = False
            size -= 1
    return total
