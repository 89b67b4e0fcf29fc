"""Prefix identity: which tokens of each request are the same tokens as another request's, as a tree.

vLLM V1 keys every full KV block by a chained hash, so a block's key fixes the whole prefix before it
(``../shared/reference/prefix-cache-and-routing.md`` §1.1). Any such chained identity is a tree: each request
shares its first ``shared_tokens`` tokens with one earlier *parent* sequence (the parent's prompt and output) and
the rest is its own. A block's key is then the pair (the sequence that first owned the block, block index), found
by walking up the tree, which the simulator materializes once per block size as *runs*.

Three sources give the tree:

- **hash_ids** (Mooncake): one id per 512-token prefix block; equal ids mean that block and everything before it are
  equal (Mooncake FAST'25 appendix A.2). A request's parent is an earlier request with the longest common id
  prefix. KV block ``j`` (``B`` tokens, ``B`` dividing 512) then has the key of id ``j·B // 512``, sub-block
  ``j mod 512/B``, exactly as reference §2 maps it; the last id of a prompt that is not a multiple of 512 covers
  only its full KV blocks. Prompts that diverge inside a 512-token block share none of it here although vLLM would
  share up to 31 sixteen-token blocks: the trace's reuse is a lower bound.
- **sessions** (derived): turn k of a session extends turn k−1's prompt and answer when its prompt is at least that
  long (a chat resends the conversation). Marked derived: the trace says nothing about the tokens themselves.
- **declared**: a shared prefix of N tokens (a system prompt) on a given share of the requests, ⌊n·share⌋ of them
  scattered by a fixed shuffle (:data:`DECLARED_SEED`), held by one virtual sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from planner.errors import PlannerError
from planner.limits import MOONCAKE_BLOCK_TOKENS

# which requests carry a declared prefix: a fixed shuffle, so the same flags give the same replay
DECLARED_SEED = 0
SOURCES = {"hash_ids": "hash_ids stored with each request (Mooncake: one id per 512-token prefix block)",
           "sessions": "derived from sessions: each turn extends the previous turn's prompt and answer",
           "declared": "a declared shared prefix (e.g. a system prompt)",
           "own": "none shared: each request's own blocks, found again after a preemption"}


@dataclass(frozen=True)
class PrefixIdentity:
    """Each request's parent sequence and the tokens it shares with it, in workload (arrival) order.

    ``parent[r]`` is an earlier request (``0 … n−1``), a virtual sequence (``n + v``, ``virtual_tokens[v]``
    long) or −1; ``shared_tokens[r]`` is how many of ``r``'s first tokens equal the parent's (prompt, then output).
    """

    source: str                  # a key of SOURCES
    parent: np.ndarray           # int64 per request
    shared_tokens: np.ndarray    # int64 per request, 0 where parent is −1
    virtual_tokens: np.ndarray   # int64 per virtual sequence
    detail: str = ""             # what the derivation found (links made, lengths that disagreed)

    @classmethod
    def unshared(cls, n: int) -> PrefixIdentity:
        """No request shares a token with another: each one's blocks are its own, which a prefix cache still finds
        again when the request comes back after a preemption (vLLM V1 frees them into the cache)."""
        return cls("own", np.full(n, -1, np.int64), np.zeros(n, np.int64), np.empty(0, np.int64))

    @property
    def n(self) -> int:
        return int(self.parent.size)

    def describe(self) -> str:
        """One line for pages and reports: the source and what it found."""
        return SOURCES[self.source] + (f" ({self.detail})" if self.detail else "")

    def subset(self, keep: np.ndarray) -> PrefixIdentity:
        """The identity of the requests ``keep`` selects (a boolean mask). A request whose parent is left out
        shares with the nearest kept ancestor instead, as many tokens as every link up to it shares (a tree's
        prefixes nest): a prompt past max_model_len, refused, had cut every later request that extended it off
        the prefix they all began with."""
        indices = np.flatnonzero(keep)
        out = self.take(indices)
        position = np.full(self.n, -1, np.int64)
        position[indices] = np.arange(indices.size)
        old_parent = self.parent[indices]
        rows = np.flatnonzero((old_parent >= 0) & (old_parent < self.n) & (out.parent < 0))
        up, tokens = old_parent[rows], self.shared_tokens[indices[rows]]
        first = indices[0] if indices.size else 0
        # an ancestor before the first kept request cannot be kept: a tree's parents are earlier requests
        while rows.size:
            tokens = np.minimum(tokens, self.shared_tokens[up])
            up = self.parent[up]
            virtual, kept = up >= self.n, (up >= 0) & (up < self.n)
            kept &= position[np.where(kept, up, 0)] >= 0
            found = (virtual | kept) & (tokens > 0)
            out.parent[rows[found]] = np.where(virtual[found], indices.size + up[found] - self.n,
                                               position[np.where(kept[found], up[found], 0)])
            out.shared_tokens[rows[found]] = tokens[found]
            going = ~found & ~virtual & (up >= first) & (tokens > 0)
            rows, up, tokens = rows[going], up[going], tokens[going]
        return out

    def take(self, indices: np.ndarray, copy: np.ndarray | None = None) -> PrefixIdentity:
        """The identity of a workload whose request ``q`` is request ``indices[q]`` of this one (in the new
        arrival order), ``copy[q]`` telling apart copies of one request (a bootstrap resample): a request keeps its
        parent where the same copy of it comes earlier, and shares nothing otherwise; a declared prefix is shared by
        every copy."""
        indices = np.asarray(indices, np.int64)
        copy = np.zeros(indices.size, np.int64) if copy is None else np.asarray(copy, np.int64)
        m = indices.size
        parent = np.full(m, -1, np.int64)
        shared = np.zeros(m, np.int64)
        if m == 0:
            return PrefixIdentity(self.source, parent, shared, self.virtual_tokens, self.detail)
        old_parent = self.parent[indices]
        virtual = old_parent >= self.n
        parent[virtual] = m + old_parent[virtual] - self.n
        shared[virtual] = self.shared_tokens[indices[virtual]]
        # a (copy, request) pair's first position, and the parent's pair looked up among them
        span = int(copy.max()) + 1
        pair = indices * span + copy
        pairs, first = np.unique(pair, return_index=True)
        real = (old_parent >= 0) & ~virtual
        want = old_parent[real] * span + copy[real]
        at = np.minimum(np.searchsorted(pairs, want), pairs.size - 1)
        found = (pairs[at] == want) & (first[at] < np.flatnonzero(real))
        rows = np.flatnonzero(real)[found]
        parent[rows] = first[at[found]]
        shared[rows] = self.shared_tokens[indices[rows]]
        return PrefixIdentity(self.source, parent, shared, self.virtual_tokens, self.detail)

    def runs(self, seq_tokens: np.ndarray, block_size: int) -> BlockRuns:
        """The block keys of every request at ``block_size``-token KV blocks: request ``r``'s block ``j`` (of its
        full blocks, prompt and output: ``seq_tokens[r]`` tokens) has key ``run_base[i] + j`` for the first run
        ``i`` of ``r`` (from ``run_off[r]``) with ``run_end[i] > j``."""
        return block_runs(self, np.asarray(seq_tokens, np.int64), int(block_size))


@dataclass(frozen=True)
class BlockRuns:
    """Block keys as runs (CSR): request ``r``'s runs are ``run_off[r] … run_off[r+1]−1``; each covers blocks up to
    ``run_end`` (exclusive) with key ``run_base + j``. ``n_keys`` bounds every key."""

    run_off: np.ndarray
    run_end: np.ndarray
    run_base: np.ndarray
    n_keys: int

    def keys(self, r: int) -> np.ndarray:
        """Request ``r``'s block keys in order (for tests and the reuse analysis)."""
        out, start = [], 0
        for i in range(self.run_off[r], self.run_off[r + 1]):
            out.append(self.run_base[i] + np.arange(start, self.run_end[i]))
            start = self.run_end[i]
        return np.concatenate(out) if out else np.empty(0, np.int64)


def block_runs(identity: PrefixIdentity, seq_tokens: np.ndarray, block_size: int) -> BlockRuns:
    """Materialize the tree into runs at one KV block size (see :meth:`PrefixIdentity.runs`)."""
    n = identity.n
    if seq_tokens.size != n:
        raise PlannerError(f"prefix identity of {n} requests for a workload of {seq_tokens.size}")
    parent, shared = identity.parent, identity.shared_tokens
    # a sequence's keyed length covers its own tokens and whatever a child shares of it (an answer the engine cut
    # short is still part of the next turn's prompt)
    length = np.concatenate([seq_tokens, identity.virtual_tokens]).astype(np.int64)
    has = parent >= 0
    np.maximum.at(length, parent[has], shared[has])
    blocks = length // block_size
    base = np.concatenate([[0], np.cumsum(blocks)[:-1]]).astype(np.int64)
    run_off, run_end, run_base = _runs(parent, shared, base, seq_tokens // block_size, block_size)
    return BlockRuns(run_off, run_end, run_base, int(blocks.sum()))


@numba.njit(cache=True, nogil=True)
def _runs(parent, shared, base, own_blocks, block_size):
    """The runs of :func:`block_runs`, request by request: a request's first ``shared // block_size`` blocks
    take its parent's runs (clipped there; past them, or for a virtual parent, the parent's own keys), the rest
    its own keys."""
    n = parent.shape[0]
    run_off = np.zeros(n + 1, np.int64)
    cap = 2 * n + 16
    ends = np.empty(cap, np.int64)
    bases = np.empty(cap, np.int64)
    m = 0
    for r in range(n):
        p = parent[r]
        upto = shared[r] // block_size if p >= 0 else 0
        inherited = run_off[p + 1] - run_off[p] if 0 <= p < n and upto > 0 else 0
        if m + inherited + 2 > cap:
            cap = 2 * (m + inherited + 2)
            grown_ends, grown_bases = np.empty(cap, np.int64), np.empty(cap, np.int64)
            grown_ends[:m], grown_bases[:m] = ends[:m], bases[:m]
            ends, bases = grown_ends, grown_bases
        start = m
        for i in range(run_off[p], run_off[p] + inherited):
            ends[m], bases[m] = min(ends[i], upto), bases[i]
            m += 1
            if ends[i] >= upto:
                break
        if upto > 0 and (m == start or ends[m - 1] < upto):
            # past the parent's own runs (a virtual sequence, or tokens of an answer the engine cut short): the
            # parent's keys all the same
            ends[m], bases[m] = upto, base[p]
            m += 1
        if own_blocks[r] > upto or m == start:
            ends[m], bases[m] = own_blocks[r], base[r]
            m += 1
        run_off[r + 1] = m
    return run_off, ends[:m].copy(), bases[:m].copy()


def from_hash_ids(hash_ids: list, input_tokens: np.ndarray, block_tokens: int = MOONCAKE_BLOCK_TOKENS
                  ) -> PrefixIdentity:
    """The tree of chained prefix ids (Mooncake ``hash_ids``, in workload order): each request's parent is the
    latest earlier request holding its longest matching id prefix; they share that many ids' tokens (a matching
    partial last id: the whole prompt). The ids are matched as sequences, from the first: an id seen before at
    another place, or after other ids, matches nothing (per-block content hashes, unchained, had matched wherever
    they had been seen)."""
    n = len(hash_ids)
    parent = np.full(n, -1, np.int64)
    shared = np.zeros(n, np.int64)
    trie: dict[tuple[int, int], int] = {}       # (node, next id) -> node: one node per distinct id prefix
    holder = [-1]                               # node -> latest request holding that prefix (root: none)
    for r, ids in enumerate(hash_ids):
        ids = [] if ids is None else list(ids)
        node, matched = 0, 0
        while matched < len(ids) and (node, ids[matched]) in trie:
            node = trie[node, ids[matched]]
            matched += 1
        if matched:
            p = holder[node]
            parent[r] = p
            shared[r] = min(matched * block_tokens, int(input_tokens[r]), int(input_tokens[p]))
        node = 0
        for h in ids:
            node = trie.setdefault((node, h), len(holder))
            if node == len(holder):
                holder.append(r)
            holder[node] = r
    linked = int((parent >= 0).sum())
    return PrefixIdentity("hash_ids", parent, shared, np.empty(0, np.int64),
                          f"{linked:,} of {n:,} requests share a prefix with an earlier one; ids of {block_tokens} "
                          "tokens, so a lower bound")


def from_sessions(group: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray) -> PrefixIdentity:
    """Turn k of a session (``group`` codes, −1 none, in arrival order) extends turn k−1's prompt and answer when
    its prompt is at least that long."""
    n = group.size
    parent = np.full(n, -1, np.int64)
    shared = np.zeros(n, np.int64)
    last: dict[int, int] = {}
    disagree = 0
    for r in range(n):
        g = int(group[r])
        if g < 0:
            continue
        p = last.get(g)
        if p is not None:
            context = int(input_tokens[p]) + int(output_tokens[p])
            if int(input_tokens[r]) >= context:
                parent[r], shared[r] = p, context
            else:
                disagree += 1
        last[g] = r
    linked = int((parent >= 0).sum())
    return PrefixIdentity("sessions", parent, shared, np.empty(0, np.int64),
                          f"{linked:,} later turns extend the previous one; {disagree:,} turns shorter than the "
                          "previous turn's prompt and answer share nothing")


def declared(n: int, input_tokens: np.ndarray, tokens: int, share: float) -> PrefixIdentity:
    """``tokens`` shared by ``share`` of the requests (⌊n · share⌋ of them, scattered by a fixed shuffle), as one
    virtual sequence. Every 1/share-th request would line up with round-robin: at share 0.5 on two replicas every
    carrier went to one replica (hit rates 0 and 0.74), which made round-robin look like a prefix-aware router."""
    if not (isinstance(tokens, int) and tokens >= 1):
        raise PlannerError(f"shared prefix of {tokens!r} tokens: expected a positive whole number of tokens")
    if not (math.isfinite(share) and 0 < share <= 1):
        raise PlannerError(f"shared prefix share {share!r}: expected a fraction of the requests in (0, 1]")
    carries = np.zeros(n, bool)
    carries[np.random.default_rng(DECLARED_SEED).permutation(n)[:math.floor(n * share)]] = True
    parent = np.where(carries, n, -1).astype(np.int64)
    shared = np.where(carries, np.minimum(tokens, input_tokens), 0).astype(np.int64)
    return PrefixIdentity("declared", parent, shared, np.array([tokens], np.int64),
                          f"{tokens:,} tokens on {int(carries.sum()):,} of {n:,} requests")


def parse_shared_prefix(text: str) -> tuple[int, float]:
    """``TOKENS[:SHARE]`` (share defaults to 1) for ``--shared-prefix``."""
    head, _, tail = text.partition(":")
    try:
        tokens, share = int(head), float(tail) if tail else 1.0
    except ValueError:
        raise PlannerError(f"--shared-prefix {text!r}: expected TOKENS[:SHARE], e.g. 2000:0.8 (2,000 tokens on "
                           "80% of the requests)") from None
    if tokens < 1 or not (math.isfinite(share) and 0 < share <= 1):
        raise PlannerError(f"--shared-prefix {text!r}: expected TOKENS ≥ 1 and SHARE in (0, 1]")
    return tokens, share
