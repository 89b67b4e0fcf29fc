"""What a simulation replays: arrival times and lengths, from the contract's synthetic spec or drawn from fitted
distributions (a stored trace's own requests come through :mod:`planner.workload.replay`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from planner.errors import PlannerError
from planner.limits import MAX_COUNT, MAX_REQUESTS
from planner.sim.prefix import PrefixIdentity, declared, from_hash_ids, from_sessions, parse_shared_prefix

# request rates (and rate factors) a replay takes: one request a million seconds apart to a million a second;
# past either end the simulated clock runs to 1e300 s, or every request arrives within one step anyway
RATE_RANGE = (1e-6, 1e6)
MAX_ARRIVAL_CV = 100.0      # burstier gaps than this underflow the gamma draw's shape


@dataclass(frozen=True)
class SimWorkload:
    """Requests sorted by arrival: seconds, prompt tokens and output tokens (≥ 1); ``group`` is each request's
    session (or shared-prefix) id, 0 … groups − 1 and −1 for none, where the trace carries one (a prefix-aware
    router keeps a group on one replica); ``prefix`` which prompt tokens repeat earlier requests' tokens
    (:mod:`planner.sim.prefix`), None where nothing says."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str
    group: np.ndarray | None = None
    prefix: PrefixIdentity | None = None

    @property
    def n(self) -> int:
        return int(self.arrival_s.size)

    def subset(self, keep: np.ndarray) -> SimWorkload:
        """The requests ``keep`` selects (a boolean mask), at their own times, with their groups and the identity
        among them (:meth:`planner.sim.prefix.PrefixIdentity.subset`)."""
        return replace(self, arrival_s=self.arrival_s[keep], input_tokens=self.input_tokens[keep],
                       output_tokens=self.output_tokens[keep],
                       group=None if self.group is None else self.group[keep],
                       prefix=None if self.prefix is None else self.prefix.subset(keep))

    def truncated(self, max_new_tokens: int | None) -> SimWorkload:
        """Outputs cut at ``max_new_tokens`` (the engine stops generating there)."""
        if not max_new_tokens:
            return self
        return replace(self, output_tokens=np.minimum(self.output_tokens, int(max_new_tokens)))

    def with_shared_prefix(self, spec: str | None) -> SimWorkload:
        """The workload with a declared shared prefix (``TOKENS[:SHARE]``, :func:`planner.sim.prefix.declared`)
        where it carries no identity of its own; None or an empty spec: unchanged.

        Raises
        ------
        PlannerError
            For a malformed spec, or a trace whose own identity (hash ids, sessions) would be overridden.
        """
        if not spec:
            return self
        tokens, share = parse_shared_prefix(spec)
        if self.prefix is not None:
            raise PlannerError(f"--shared-prefix {spec}: the workload already carries a prefix identity "
                               f"({self.prefix.describe()}); a declared prefix is for traces with none")
        return replace(self, prefix=declared(self.n, self.input_tokens, tokens, share))


def sorted_workload(arrival, inputs, outputs, source: str, group=None, hash_ids=None) -> SimWorkload:
    """Requests in arrival order (stable), times from the first arrival, lengths at least one token; ``group``
    (any hashable ids, None/NaN for none) becomes codes 0 … k − 1 in order of first appearance, −1 for none.

    The prefix identity comes from ``hash_ids`` (a list of id lists, Mooncake-style) where given, else is derived
    from the groups as sessions (:mod:`planner.sim.prefix`)."""
    order = np.argsort(arrival, kind="stable")
    inputs = np.maximum(np.asarray(inputs, dtype=np.int64)[order], 1)
    outputs = np.maximum(np.asarray(outputs, dtype=np.int64)[order], 1)
    arrival = np.asarray(arrival, dtype=float)[order]
    codes = None
    if group is not None:
        codes, seen = np.full(arrival.size, -1, np.int64), {}
        for i, g in enumerate(np.asarray(group, dtype=object)[order]):
            if g is not None and g == g:         # NaN is not an id
                codes[i] = seen.setdefault(g, len(seen))
        codes = codes if len(seen) else None
    prefix = None
    if hash_ids is not None:
        prefix = from_hash_ids([hash_ids[i] for i in order], inputs)
    elif codes is not None:
        prefix = from_sessions(codes, inputs, outputs)
    return SimWorkload(arrival - (arrival[0] if arrival.size else 0.0), inputs, outputs, source, codes, prefix)


def poisson_or_gamma(n: int, qps: float, rng: np.random.Generator, cv: float = 1.0) -> np.ndarray:
    """Arrival times of a renewal process at ``qps`` with inter-arrival CV ``cv`` (1: Poisson); ``inf``: all at 0."""
    low, high = RATE_RANGE
    if np.isinf(qps) and qps > 0:
        return np.zeros(n)
    if not low <= qps <= high:             # NaN too
        raise PlannerError(f"qps {qps}: expected a rate from {low:g} to {high:g} requests/s (or inf: every request "
                           "at once)")
    if not (math.isfinite(cv) and 0 < cv <= MAX_ARRIVAL_CV):
        raise PlannerError(f"arrival CV {cv}: expected a positive coefficient of variation up to {MAX_ARRIVAL_CV:g} "
                           "(1: Poisson)")
    shape = 1.0 / cv**2
    gaps = rng.gamma(shape, 1.0 / (qps * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def _lengths(spec: str, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    parts = spec.split(":")
    try:
        if len(parts) == 1 and 1 <= int(parts[0]) <= MAX_COUNT:
            return np.full(n, int(parts[0]), dtype=np.int64)
        if parts[0] == "uniform" and len(parts) == 3 and 1 <= int(parts[1]) <= int(parts[2]) <= MAX_COUNT:
            return rng.integers(int(parts[1]), int(parts[2]) + 1, size=n)
        if parts[0] == "lognormal" and len(parts) == 3:
            mu, sigma = float(parts[1]), float(parts[2])
            if math.isfinite(mu) and math.isfinite(sigma) and sigma >= 0:
                # clipped before the cast: a draw past int64 would wrap to a negative length
                return np.clip(np.rint(rng.lognormal(mu, sigma, size=n)), 1, MAX_COUNT).astype(np.int64)
    except ValueError:
        pass
    raise PlannerError(f"{what}={spec!r}: expected a positive integer, uniform:A:B (1 <= A <= B) up to "
                       f"{MAX_COUNT:,} tokens, or lognormal:MU:SIGMA (finite, SIGMA >= 0)")


def synthetic(spec: str) -> SimWorkload:
    """The contract's ``--synthetic`` spec: ``requests=N,input=LEN,output=LEN,qps=Q[,arrival=poisson|gamma:CV]
    [,seed=N][,prefix=TOKENS:SHARE]`` (``prefix``: a declared shared prefix, e.g. a system prompt)."""
    fields = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise PlannerError(f"--synthetic item {item!r}: expected key=value")
        if ";" in value:
            raise PlannerError(f"--synthetic item {item!r}: items are separated by commas; expected "
                               "requests=N,input=LEN,output=LEN,qps=Q")
        if key.strip() in fields:
            raise PlannerError(f"--synthetic gives {key.strip()} twice; expected each key once")
        fields[key.strip()] = value.strip()
    missing = [k for k in ("requests", "input", "output", "qps") if k not in fields]
    if missing:
        raise PlannerError(f"--synthetic lacks {', '.join(missing)}: expected requests=N,input=LEN,output=LEN,qps=Q")
    unknown = set(fields) - {"requests", "input", "output", "qps", "arrival", "seed", "prefix"}
    if unknown:
        raise PlannerError(f"--synthetic has unknown keys {', '.join(sorted(unknown))}")
    try:
        n, qps, seed = int(fields["requests"]), float(fields["qps"]), int(fields.get("seed", 0))
        arrival = fields.get("arrival", "poisson")
        cv = 1.0 if arrival == "poisson" else float(arrival.split(":", 1)[1]) if arrival.startswith("gamma:") \
            else None
    except ValueError as exc:
        raise PlannerError(f"--synthetic {spec!r}: requests and seed must be integers, qps and the gamma CV "
                           "numbers") from exc
    if not 1 <= n <= MAX_REQUESTS:
        raise PlannerError(f"--synthetic requests={n}: expected from 1 to {MAX_REQUESTS:,} requests")
    if not 0 <= seed < 2**63:
        raise PlannerError(f"--synthetic seed={seed}: expected a non-negative whole number")
    if cv is None:
        raise PlannerError(f"arrival={arrival!r}: expected poisson or gamma:CV")
    rng = np.random.default_rng(seed)
    times = poisson_or_gamma(n, qps, rng, cv)
    work = sorted_workload(times, _lengths(fields["input"], n, rng, "input"),
                           _lengths(fields["output"], n, rng, "output"), f"synthetic {spec}")
    return work.with_shared_prefix(fields.get("prefix"))


def from_fits(input_fit, output_fit, n: int, qps: float | None, cv: float = 1.0, seed: int = 0,
              arrival_s: np.ndarray | None = None, label: str | None = None) -> SimWorkload:
    """``n`` requests drawn from fitted length distributions (each fit's best family; a cap the fit censored at
    becomes the point mass it was in the trace), arriving as a Poisson (``cv`` 1) or gamma renewal process at
    ``qps``, or at the ``n`` given ``arrival_s``."""
    rng = np.random.default_rng(seed)

    def draw(fit) -> np.ndarray:
        dist = next((c.dist for c in fit.candidates if c.dist is not None), None)
        if dist is None:
            raise PlannerError("no fitted family converged: cannot draw lengths from the fit")
        values = np.rint(dist.rvs(size=n, random_state=rng))
        if fit.censored_at is not None:
            values = np.minimum(values, fit.censored_at)
        return np.maximum(values, 1).astype(np.int64)
    inputs, outputs = draw(input_fit), draw(output_fit)
    arrivals = poisson_or_gamma(n, qps, rng, cv) if arrival_s is None else arrival_s
    return sorted_workload(arrivals, inputs, outputs, label or
                           f"fitted lengths ({input_fit.best} / {output_fit.best}) at {qps:g} req/s")
