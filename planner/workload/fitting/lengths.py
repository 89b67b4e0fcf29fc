"""Censored maximum-likelihood fits of length distributions, ranked by AIC/BIC with KS distance.

Data arrive as distinct values with counts (DuckDB's ``GROUP BY``), which is exact and makes a 10M-request trace
as cheap to fit as its few thousand distinct token counts. A ``max_tokens`` or context cap is censoring: capped
requests contribute the survival function at the cap, so the cap does not bend the fitted tail.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats
from threadpoolctl import threadpool_limits

from planner.workload.fitting.families import CLOCK_PHASES, FAMILIES

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
MAX_DISTINCT = 100_000       # above this many distinct values, fit on a seeded subsample of requests
SUBSAMPLE = 200_000          # requests drawn for that subsample
_EXACT_BELOW = 256           # whole-token values below this keep an interval each
_BIN_RATIO = 0.002           # above it, intervals merge into bins at most 0.2% wide
_SPIKE_FACTOR = 10.0          # a capped value holds this many times the density just below it
_MIN_SPIKE = 5                # and at least this many requests
# Bounds on the optimiser's (transformed) parameters; log-t beyond 1,000 degrees of freedom is lognormal.
# A Pareto tail index near 0 puts the tail's mass beyond any cap: a degenerate optimum that only soaks up the
# censored fraction, so the index is kept where token-length tails live.
_BOUNDS = {("logt", "df"): (math.log(0.3), math.log(1000.0)),
           ("lognormal_pareto", "alpha"): (math.log(0.3), math.log(50.0))}


@dataclass(frozen=True)
class Candidate:
    """One fitted family (or the failure to fit it)."""

    family: str
    params: dict[str, float]
    aic: float | None
    bic: float | None
    ks: float | None
    quantiles: dict[str, float]
    dist: object = field(default=None, repr=False, compare=False)   # the frozen scipy distribution
    error: str | None = None

    def as_dict(self) -> dict:
        out = {"family": self.family, "params": self.params, "aic": self.aic, "bic": self.bic, "ks": self.ks,
               "quantiles": self.quantiles}
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class LengthFit:
    """Ranked candidates for one length field, with the censoring that was applied."""

    n: int
    censored_at: float | None
    censored_fraction: float
    candidates: list[Candidate]          # converged families best first, then the empirical, then failures
    empirical_quantiles: dict[str, float]
    dropped_nonpositive: int = 0

    @property
    def best(self) -> str:
        return self.candidates[0].family

    @property
    def point_mass(self) -> bool:
        """No family was fitted, for the lengths take one value (below any cap): they are drawn as they are."""
        return self.candidates[0].family == "empirical" and self.candidates[0].dist is not None

    def ranking_rows(self) -> list[dict]:
        """The ranking table: one row per candidate with ΔAIC from the best, KS and fitted quantiles."""
        best_aic = min((c.aic for c in self.candidates if c.aic is not None), default=None)
        rows = []
        for c in self.candidates:
            rows.append({"family": c.family, "params": ", ".join(f"{k}={v:.4g}" for k, v in c.params.items()),
                         "aic": c.aic, "delta_aic": None if c.aic is None else c.aic - best_aic, "bic": c.bic,
                         "ks": c.ks, **{k: c.quantiles.get(k) for k in QUANTILES}, "error": c.error or ""})
        return rows


def counts_of(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and their counts."""
    x, w = np.unique(np.asarray(values, dtype=float), return_counts=True)
    return x, w.astype(float)


def exact_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """numpy's linear-interpolation quantile of the data that ``(x, w)`` summarise (x sorted, w counts)."""
    n = w.sum()
    h = (n - 1) * q
    cum = np.cumsum(w)
    lo = x[np.searchsorted(cum, math.floor(h) + 1)]
    hi = x[np.searchsorted(cum, math.ceil(h) + 1)]
    return float(lo + (h - math.floor(h)) * (hi - lo))


def detect_cap(x: np.ndarray, w: np.ndarray) -> float | None:
    """The cap, if requests pile up at (or just below) the maximum value; else None.

    A cap shows as distinct values near the maximum holding far more requests than the density just below them
    would give (``max_tokens`` spikes at exactly the maximum; context truncation leaves a cluster a few tokens
    wide).
    """
    if len(x) < 20:
        return None
    xmax = x[-1]
    width = max(3.0, 0.001 * abs(xmax))
    base_lo, base_hi = xmax - 11 * width, xmax - width
    in_base = (x >= base_lo) & (x < base_hi)
    per_unit = w[in_base].sum() / (base_hi - base_lo)
    spacing = float(np.median(np.diff(x))) if len(x) > 1 else 1.0
    expected = max(per_unit * max(spacing, 1.0), 1e-9)
    spiky = (x >= xmax - width) & (w >= _MIN_SPIKE) & (w >= _SPIKE_FACTOR * expected)
    if not spiky[-1] and not spiky.any():
        return None
    return float(x[spiky].min())


@dataclass(frozen=True)
class _Sample:
    """What the likelihood sees: values with counts (for whole tokens, binned into intervals ``lo``-``hi``),
    the counts censored above ``cap`` and below ``floor``, all divided by ``scale`` when a subsample stands in
    for the data; ``ks_x``/``ks_w`` keep the unbinned values for the KS distance."""

    x: np.ndarray
    w: np.ndarray
    ks_x: np.ndarray
    ks_w: np.ndarray
    cap: float | None = None
    above: float = 0.0
    floor: float | None = None
    below: float = 0.0
    scale: float = 1.0
    intervals: tuple[np.ndarray, np.ndarray] | None = None
    clock_s: float | None = None        # gaps read off a clock of this tick (its ties included as 0 ticks)

    @property
    def start_x(self) -> np.ndarray:
        """Values to start the optimiser from: a clock's ties at half a tick (no family starts from 0)."""
        return np.maximum(self.x, 0.5 * self.clock_s) if self.clock_s else self.x

    @property
    def total(self) -> float:
        return float(self.w.sum()) + self.above + self.below


def _token_intervals(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Whole-token values as intervals ``[x - 0.5, x + 0.5)``, merged above :data:`_EXACT_BELOW` tokens into bins
    at most :data:`_BIN_RATIO` wide (relative): exact likelihood of the binned data, 10-20x fewer terms."""
    ids = np.where(x < _EXACT_BELOW, x, _EXACT_BELOW + np.floor(np.log(np.maximum(x, 1) / _EXACT_BELOW)
                                                                 / np.log1p(_BIN_RATIO)))
    starts = np.flatnonzero(np.concatenate([[True], np.diff(ids) != 0]))
    counts = np.add.reduceat(w, starts)
    ends = np.concatenate([starts[1:], [x.size]]) - 1
    mean = np.add.reduceat(w * x, starts) / counts
    return mean, counts, (x[starts] - 0.5, x[ends] + 0.5)


def _ks(dist, s: _Sample) -> float:
    total = (s.ks_w.sum() + s.above + s.below)
    femp = (s.below + np.cumsum(s.ks_w)) / total
    before = np.concatenate([[s.below / total], femp[:-1]])
    if s.clock_s:
        # what the clock reads: P(reading <= k ticks) = mean over the phase u of F((k + 1 - u) tick)
        phase = (np.arange(CLOCK_PHASES) + 0.5) / CLOCK_PHASES
        ticks = np.rint(s.ks_x / s.clock_s)[:, None]
        upper = dist.cdf((ticks + 1 - phase) * s.clock_s).mean(axis=1)
        lower = dist.cdf(np.maximum(ticks - phase, 0) * s.clock_s).mean(axis=1)
    else:
        half = 0.5 if s.intervals is not None else 0.0
        upper = dist.cdf(s.ks_x + half)
        lower = dist.cdf(s.ks_x - half)
    return float(max(np.max(np.abs(femp - upper)), np.max(np.abs(before - lower))))


def _fit_free(name: str, s: _Sample, fixed: dict, x0: np.ndarray) -> tuple[dict, float]:
    """Minimise the censored negative log-likelihood over a family's free parameters (``fixed`` held)."""
    fam = FAMILIES[name]
    per_request = 1.0 / s.total   # O(1) gradients keep the line search from leaping to the bounds

    def nll(vec: np.ndarray) -> float:
        try:
            with np.errstate(all="ignore"):
                ll = fam.log_likelihood(fam.from_vector(vec, fixed), s.x, s.w, s.cap, s.above, s.floor, s.below,
                                        s.intervals, s.clock_s)
        except (ValueError, OverflowError, FloatingPointError):
            return math.inf
        return -ll * per_request if math.isfinite(ll) else math.inf

    bounds = [_BOUNDS.get((name, p), (-40.0, 40.0)) for p in fam.free]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = optimize.minimize(nll, x0, method="L-BFGS-B", bounds=bounds)
        if not (best.success and math.isfinite(best.fun)):  # rough start or surface: the simplex is sturdier
            simplex = optimize.minimize(nll, x0, method="Nelder-Mead", bounds=bounds,
                                        options={"maxiter": 3000, "xatol": 1e-7, "fatol": 1e-9, "adaptive": True})
            if simplex.fun < best.fun:
                best = simplex
    return fam.from_vector(best.x, fixed), float(best.fun) / per_request * s.scale


def _fit_family(name: str, s: _Sample) -> tuple[dict, float]:
    fam = FAMILIES[name]
    start = fam.start(s.start_x, s.w)
    if fam.profile_grid is None:
        params, nll = _fit_free(name, s, {p: start[p] for p in fam.fixed}, fam.to_vector(start))
    else:
        # profile likelihood over the one threshold parameter: a grid, then Brent between the best's neighbours
        (key,) = fam.fixed
        grid = fam.profile_grid(s.start_x, s.w)
        if s.cap is not None:
            grid = grid[grid < s.cap]
        results = {}

        def profile(value: float) -> float:
            start_at = fam.to_vector(fam.start(s.start_x, s.w, **{key: float(value)}))
            results[float(value)] = _fit_free(name, s, {key: float(value)}, start_at)
            return results[float(value)][1]
        values = [profile(v) for v in grid]
        i = int(np.nanargmin(values))
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        if hi > lo:
            optimize.minimize_scalar(profile, bounds=(lo, hi), method="bounded",
                                     options={"xatol": 0.002 * grid[i], "maxiter": 12})
        params, nll = min(results.values(), key=lambda r: r[1])
    if not math.isfinite(nll):
        raise RuntimeError("the likelihood is not finite anywhere near the starting point")
    return params, nll


def _candidate(name: str, s: _Sample, n: float) -> Candidate:
    try:
        params, nll = _fit_family(name, s)
        dist = FAMILIES[name].build(params)
        k = len(FAMILIES[name].params)   # a profiled threshold is a parameter too
        with np.errstate(all="ignore"):         # an absurd fit's quantiles overflow to inf: shown, not warned of
            quantiles = {key: float(dist.ppf(q)) for key, q in QUANTILES.items()}
        return Candidate(name, params, 2 * k + 2 * nll, k * math.log(n) + 2 * nll, _ks(dist, s),
                         quantiles, dist)
    except Exception as exc:  # noqa: BLE001 - a family that fails is reported, never fatal
        return Candidate(name, {}, None, None, None, {}, error=f"{type(exc).__name__}: {exc}")


def fit_lengths(x: np.ndarray, w: np.ndarray | None = None, *, cap: float | None = None, detect: bool = True,
                floor: float | None = None, clock_s: float | None = None, families: tuple[str, ...] | None = None,
                seed: int = 0) -> LengthFit:
    """Fit every length family by (censored) maximum likelihood and rank them.

    Parameters
    ----------
    x, w : ndarray
        Values and their counts (``w`` None: ``x`` holds raw values). Non-positive values cannot be fitted by
        the families and are dropped (counted in ``dropped_nonpositive``) unless ``floor`` is given.
    cap : float, optional
        A known cap (``max_tokens``, context length): values at or above it are censored there.
    detect : bool
        Look for a cap in the data when none is given.
    floor : float, optional
        Values at or below it are censored from below (known only to be at most ``floor``): the ties of a clock
        whose resolution is ``floor``.
    clock_s : float, optional
        The values are gaps read off a clock of this tick that floors timestamps (every value a whole number of
        ticks, ties 0): each is fitted by the probability the clock reads it
        (:func:`planner.workload.fitting.families.clock_log_probs`), none dropped.
    families : tuple of str, optional
        Subset of :data:`planner.workload.fitting.families.FAMILIES`; all by default.
    seed : int
        Seed of the subsample taken when there are more than :data:`MAX_DISTINCT` distinct values.

    Returns
    -------
    LengthFit
        Candidates sorted by AIC (converged families), then the empirical distribution, then families that
        failed, each with its error; one failing family never stops the others.
    """
    given_cap = cap
    if w is None:
        x, w = counts_of(x)
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    order = np.argsort(x)
    x, w = x[order], w[order]
    low = x <= (floor if floor is not None else 0.0) if clock_s is None else x < 0
    below = float(w[low].sum()) if floor is not None else 0.0
    dropped = 0 if floor is not None else int(w[low].sum())
    if floor is None:
        x, w = x[~low], w[~low]
    if w.sum() < 2:
        raise ValueError("need at least two positive values to fit a length distribution")
    n = float(w.sum())
    empirical = {k: exact_quantile(x, w, q) for k, q in QUANTILES.items()}
    if clock_s is None:
        x, w = x[x > (floor or 0.0)], w[x > (floor or 0.0)]
    if cap is None and detect:
        cap = detect_cap(x, w)
    above = float(w[x >= cap].sum()) if cap is not None else 0.0
    fx, fw = (x[x < cap], w[x < cap]) if cap is not None else (x, w)
    scale = 1.0
    if len(fx) > MAX_DISTINCT:
        # a seeded draw of requests (not of distinct values, which would favour common values twice)
        rng = np.random.default_rng(seed)
        drawn = np.bincount(rng.choice(len(fx), size=SUBSAMPLE, p=fw / fw.sum()), minlength=len(fx))
        scale = fw.sum() / SUBSAMPLE
        fx, fw = fx[drawn > 0], drawn[drawn > 0].astype(float)
    if len(fx) < 2 and (clock_s is not None or floor is not None):
        # gaps of one tick: nothing a gap family can learn (the arrivals' counts are judged instead)
        raise ValueError("need at least two distinct uncensored values to fit a distribution")
    if len(fx) < 2:
        # one distinct value (a benchmark's fixed lengths), or none below a cap: no family has a shape to fit, and
        # the lengths are the point masses they are, drawn as such (refused, they had stopped `simulate --fitted`)
        point = Candidate("empirical", {}, None, None, 0.0, empirical, stats.rv_discrete(values=(x, w / w.sum())))
        return LengthFit(int(n + dropped), given_cap, above / n if given_cap is not None else 0.0, [point],
                         empirical, dropped)
    if clock_s is not None:
        sample = _Sample(fx, fw, fx, fw, scale=scale, clock_s=clock_s)
    elif np.all(np.mod(x, 1.0) == 0) and floor is None:
        bx, bw, intervals = _token_intervals(fx, fw)
        # whole tokens at or above a cap of 512.5 are those from 513: censored from 512.5, where token 512's own
        # interval ends (censoring from cap - 0.5 = 512 counted [512, 512.5) twice)
        sample = _Sample(bx, bw, fx, fw, None if cap is None else math.ceil(cap) - 0.5, above / scale, None, 0.0,
                         scale, intervals)
    else:
        sample = _Sample(fx, fw, fx, fw, cap, above / scale, floor, below / scale, scale)

    with threadpool_limits(limits=1, user_api="blas"):
        # OpenBLAS threads spinning between the optimiser's tiny vector ops cost 5-10x on a 2-core machine
        results = [_candidate(name, sample, n) for name in families or tuple(FAMILIES)]
    fitted = sorted((c for c in results if c.error is None), key=lambda c: c.aic)
    failed = [c for c in results if c.error is not None]
    empirical_candidate = Candidate("empirical", {}, None, None, 0.0, empirical)
    return LengthFit(int(n + dropped), cap, above / n, fitted + [empirical_candidate] + failed, empirical,
                     dropped)
