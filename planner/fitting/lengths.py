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
from scipy import optimize

from planner.fitting.families import FAMILIES

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
MAX_DISTINCT = 100_000       # above this many distinct values, fit on a seeded subsample of the counts
_SPIKE_FACTOR = 10.0          # a capped value holds this many times the density just below it
_MIN_SPIKE = 5                # and at least this many requests
# Bounds on the optimiser's (transformed) parameters; log-t beyond 1,000 degrees of freedom is lognormal.
_BOUNDS = {("logt", "df"): (math.log(0.3), math.log(1000.0))}


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


def _ks(dist, x: np.ndarray, w: np.ndarray, total: float, integer: bool) -> float:
    femp = np.cumsum(w) / total
    before = np.concatenate([[0.0], femp[:-1]])
    half = 0.5 if integer else 0.0
    upper = dist.cdf(x + half)
    lower = dist.cdf(x - half)
    return float(max(np.max(np.abs(femp - upper)), np.max(np.abs(before - lower))))


def _fit_family(name: str, x: np.ndarray, w: np.ndarray, cap: float | None, censored: float,
                scale: float) -> tuple[dict, float]:
    fam = FAMILIES[name]
    start = fam.start(x, w)
    fixed = {p: start[p] for p in fam.fixed}

    def nll(vec: np.ndarray) -> float:
        try:
            dist = fam.build(fam.from_vector(vec, fixed))
            with np.errstate(all="ignore"):
                ll = float(np.dot(w, dist.logpdf(x)))
                if censored:
                    ll += censored * float(dist.logsf(cap))
        except (ValueError, OverflowError, FloatingPointError):
            return math.inf
        return -ll * scale if math.isfinite(ll) else math.inf

    x0 = fam.to_vector(start)
    bounds = [_BOUNDS.get((name, p), (-40.0, 40.0)) for p in fam.free]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = optimize.minimize(nll, x0, method="L-BFGS-B", bounds=bounds)
        if not (best.success and math.isfinite(best.fun)):  # rough start or surface: the simplex is sturdier
            simplex = optimize.minimize(nll, x0, method="Nelder-Mead", bounds=bounds,
                                        options={"maxiter": 3000, "xatol": 1e-7, "fatol": 1e-9, "adaptive": True})
            if simplex.fun < best.fun:
                best = simplex
    if not math.isfinite(best.fun):
        raise RuntimeError("the likelihood is not finite anywhere near the starting point")
    return fam.from_vector(best.x, fixed), float(best.fun)


def fit_lengths(x: np.ndarray, w: np.ndarray | None = None, *, cap: float | None = None, detect: bool = True,
                families: tuple[str, ...] | None = None, seed: int = 0) -> LengthFit:
    """Fit every length family by (censored) maximum likelihood and rank them.

    Parameters
    ----------
    x, w : ndarray
        Values and their counts (``w`` None: ``x`` holds raw values). Non-positive values cannot be fitted by
        the families and are dropped (counted in ``dropped_nonpositive``).
    cap : float, optional
        A known cap (``max_tokens``, context length): values at or above it are censored there.
    detect : bool
        Look for a cap in the data when none is given.
    families : tuple of str, optional
        Subset of :data:`planner.fitting.families.FAMILIES`; all by default.
    seed : int
        Seed of the subsample taken when there are more than :data:`MAX_DISTINCT` distinct values.

    Returns
    -------
    LengthFit
        Candidates sorted by AIC (converged families), then the empirical distribution, then families that
        failed, each with its error; one failing family never stops the others.
    """
    if w is None:
        x, w = counts_of(x)
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    order = np.argsort(x)
    x, w = x[order], w[order]
    dropped = int(w[x <= 0].sum())
    x, w = x[x > 0], w[x > 0]
    if w.sum() < 2:
        raise ValueError("need at least two positive values to fit a length distribution")
    n = float(w.sum())
    empirical = {k: exact_quantile(x, w, q) for k, q in QUANTILES.items()}
    if cap is None and detect:
        cap = detect_cap(x, w)
    censored = float(w[x >= cap].sum()) if cap is not None else 0.0
    fx, fw = (x[x < cap], w[x < cap]) if cap is not None else (x, w)
    scale = 1.0
    if len(fx) > MAX_DISTINCT:
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(fx), size=MAX_DISTINCT, replace=False, p=fw / fw.sum())
        keep_total = fw.sum()
        fx, fw = fx[np.sort(pick)], fw[np.sort(pick)]
        scale = keep_total / fw.sum()
    integer = bool(np.all(np.mod(x, 1.0) == 0))

    fitted, failed = [], []
    for name in families or tuple(FAMILIES):
        try:
            params, nll = _fit_family(name, fx, fw, cap, censored / scale, scale)
            dist = FAMILIES[name].build(params)
            k = len(FAMILIES[name].free)
            ks = _ks(dist, fx, fw, fw.sum() + censored / scale, integer)
            quantiles = {key: float(dist.ppf(q)) for key, q in QUANTILES.items()}
            fitted.append(Candidate(name, params, 2 * k + 2 * nll, k * math.log(n) + 2 * nll, ks, quantiles, dist))
        except Exception as exc:  # noqa: BLE001 - a family that fails is reported, never fatal
            failed.append(Candidate(name, {}, None, None, None, {}, error=f"{type(exc).__name__}: {exc}"))
    fitted.sort(key=lambda c: c.aic)
    empirical_candidate = Candidate("empirical", {}, None, None, 0.0, empirical)
    return LengthFit(int(n + dropped), cap, censored / n, fitted + [empirical_candidate] + failed, empirical,
                     dropped)
