"""What a simulation replays: arrival times and lengths, from a stored trace (time-scaled or at a target rate),
from the contract's synthetic spec, or drawn from fitted distributions."""

from __future__ import annotations

from dataclasses import dataclass, replace

import duckdb
import numpy as np

from planner import store
from planner.errors import PlannerError


@dataclass(frozen=True)
class SimWorkload:
    """Requests sorted by arrival: seconds, prompt tokens and output tokens (≥ 1)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str

    @property
    def n(self) -> int:
        return int(self.arrival_s.size)

    def truncated(self, max_new_tokens: int | None) -> SimWorkload:
        """Outputs cut at ``max_new_tokens`` (the engine stops generating there)."""
        if not max_new_tokens:
            return self
        return replace(self, output_tokens=np.minimum(self.output_tokens, int(max_new_tokens)))


def _sorted(arrival, inputs, outputs, source: str) -> SimWorkload:
    order = np.argsort(arrival, kind="stable")
    inputs = np.maximum(np.asarray(inputs, dtype=np.int64)[order], 1)
    outputs = np.maximum(np.asarray(outputs, dtype=np.int64)[order], 1)
    arrival = np.asarray(arrival, dtype=float)[order]
    return SimWorkload(arrival - (arrival[0] if arrival.size else 0.0), inputs, outputs, source)


def poisson_or_gamma(n: int, qps: float, rng: np.random.Generator, cv: float = 1.0) -> np.ndarray:
    """Arrival times of a renewal process at ``qps`` with inter-arrival CV ``cv`` (1: Poisson); ``inf``: all at 0."""
    if np.isinf(qps):
        return np.zeros(n)
    if qps <= 0:
        raise PlannerError(f"qps {qps}: expected a positive rate (or inf)")
    shape = 1.0 / cv**2
    gaps = rng.gamma(shape, 1.0 / (qps * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def _lengths(spec: str, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    parts = spec.split(":")
    try:
        if len(parts) == 1:
            return np.full(n, int(parts[0]), dtype=np.int64)
        if parts[0] == "uniform" and len(parts) == 3:
            return rng.integers(int(parts[1]), int(parts[2]) + 1, size=n)
        if parts[0] == "lognormal" and len(parts) == 3:
            return np.maximum(np.rint(rng.lognormal(float(parts[1]), float(parts[2]), size=n)), 1).astype(np.int64)
    except ValueError:
        pass
    raise PlannerError(f"{what}={spec!r}: expected an integer, uniform:A:B or lognormal:MU:SIGMA")


def synthetic(spec: str) -> SimWorkload:
    """The contract's ``--synthetic`` spec: ``requests=N,input=LEN,output=LEN,qps=Q[,arrival=poisson|gamma:CV]
    [,seed=N]``."""
    fields = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise PlannerError(f"--synthetic item {item!r}: expected key=value")
        fields[key.strip()] = value.strip()
    missing = [k for k in ("requests", "input", "output", "qps") if k not in fields]
    if missing:
        raise PlannerError(f"--synthetic lacks {', '.join(missing)}: expected requests=N,input=LEN,output=LEN,qps=Q")
    unknown = set(fields) - {"requests", "input", "output", "qps", "arrival", "seed"}
    if unknown:
        raise PlannerError(f"--synthetic has unknown keys {', '.join(sorted(unknown))}")
    try:
        n, qps, seed = int(fields["requests"]), float(fields["qps"]), int(fields.get("seed", 0))
    except ValueError as exc:
        raise PlannerError(f"--synthetic {spec!r}: requests and seed must be integers, qps a number") from exc
    arrival = fields.get("arrival", "poisson")
    if arrival == "poisson":
        cv = 1.0
    elif arrival.startswith("gamma:"):
        cv = float(arrival.split(":", 1)[1])
    else:
        raise PlannerError(f"arrival={arrival!r}: expected poisson or gamma:CV")
    rng = np.random.default_rng(seed)
    times = poisson_or_gamma(n, qps, rng, cv)
    return _sorted(times, _lengths(fields["input"], n, rng, "input"), _lengths(fields["output"], n, rng, "output"),
                   f"synthetic {spec}")


def from_trace(con: duckdb.DuckDBPyConnection, trace_ref: str, *, rate_scale: float | None = None,
               qps: float | None = None, seed: int = 0) -> SimWorkload:
    """A stored trace's non-failed requests: its own arrivals, sped up ``rate_scale`` times or rescaled to ``qps``
    (a trace without timestamps needs ``qps``: Poisson arrivals at that rate)."""
    info = store.get_trace(con, trace_ref)
    frame = con.cursor().sql(f"SELECT arrival, input_tokens, output_tokens FROM {store.requests_view(info.trace_id)} "
                             f"WHERE NOT failed AND output_tokens > 0 ORDER BY arrival NULLS LAST, \"row\"").pl()
    if frame.height == 0:
        raise PlannerError(f"trace {info.name!r} has no completed requests to replay")
    inputs, outputs = frame["input_tokens"].to_numpy(), frame["output_tokens"].to_numpy()
    if rate_scale is not None and rate_scale <= 0:
        raise PlannerError(f"--rate-scale {rate_scale}: expected a positive factor")
    if info.has_timestamps and frame["arrival"].null_count() == 0:
        arrival = frame["arrival"].to_numpy().astype(float)
        span = float(arrival.max() - arrival.min())
        if qps is not None:
            if span <= 0:
                raise PlannerError("--qps on a trace whose requests all arrive at once: use --rate-scale")
            arrival = arrival * ((arrival.size - 1) / span) / qps
        elif rate_scale is not None:
            arrival = arrival / rate_scale
    elif qps is not None:
        arrival = poisson_or_gamma(frame.height, qps, np.random.default_rng(seed))
    else:
        raise PlannerError(f"trace {info.name!r} has no timestamps: give --qps for Poisson arrivals")
    label = f"trace {info.name}" + (f" at {qps:g} req/s" if qps else f" ×{rate_scale:g}" if rate_scale else "")
    return _sorted(arrival, inputs, outputs, label)


def measured_latencies(con: duckdb.DuckDBPyConnection, trace_ref: str) -> tuple[SimWorkload, np.ndarray, np.ndarray]:
    """A trace's replay workload (its own arrivals) with each request's measured TTFT and TPOT in seconds (NaN
    where absent), in the workload's order."""
    info = store.get_trace(con, trace_ref)
    if not info.has_timestamps:
        raise PlannerError(f"trace {info.name!r} has no timestamps: calibrating from latencies needs its arrivals")
    frame = con.cursor().sql(
        f"SELECT arrival, input_tokens, output_tokens, ttft_ms, tpot_ms FROM {store.requests_view(info.trace_id)} "
        f"WHERE NOT failed AND output_tokens > 0 AND arrival IS NOT NULL ORDER BY arrival, \"row\"").pl()
    if frame["ttft_ms"].null_count() == frame.height and frame["tpot_ms"].null_count() == frame.height:
        raise PlannerError(f"trace {info.name!r} has no TTFT or TPOT column: expected measured latencies")
    workload = _sorted(frame["arrival"].to_numpy(), frame["input_tokens"].to_numpy(),
                       frame["output_tokens"].to_numpy(), f"trace {info.name}")
    as_s = [frame[c].cast(float).fill_null(float("nan")).to_numpy() / 1e3 for c in ("ttft_ms", "tpot_ms")]
    return workload, as_s[0], as_s[1]


def from_fits(input_fit, output_fit, n: int, qps: float, cv: float = 1.0, seed: int = 0) -> SimWorkload:
    """``n`` requests drawn from fitted length distributions (each fit's best family; a cap the fit censored at
    becomes the point mass it was in the trace), arriving as a Poisson (``cv`` 1) or gamma renewal process."""
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
    return _sorted(poisson_or_gamma(n, qps, rng, cv), inputs, outputs,
                   f"fitted lengths ({input_fit.best} / {output_fit.best}) at {qps:g} req/s")
