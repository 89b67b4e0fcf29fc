"""Length-distribution families, each a frozen scipy distribution built from named parameters.

Every family knows its parameter names (as the CLI contract spells them), how to start an optimisation from the
data, and how to map an unconstrained vector to valid parameters, so one censored maximum-likelihood routine fits
them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special, stats


class _LogT(stats.rv_continuous):
    """X with ln X ~ Student t(df, mu, sigma): heavy-tailed on the log scale (proposed for output lengths)."""

    def _argcheck(self, df, s):
        return (df > 0) & (s > 0)

    def _logpdf(self, x, df, s):
        return stats.t.logpdf(np.log(x) / s, df) - np.log(s * x)

    def _pdf(self, x, df, s):
        return np.exp(self._logpdf(x, df, s))

    def _cdf(self, x, df, s):
        return stats.t.cdf(np.log(x) / s, df)

    def _sf(self, x, df, s):
        return stats.t.sf(np.log(x) / s, df)

    def _logsf(self, x, df, s):
        return stats.t.logsf(np.log(x) / s, df)

    def _ppf(self, q, df, s):
        return np.exp(s * stats.t.ppf(q, df))


logt = _LogT(a=0.0, name="logt", shapes="df, s")


class _LognormalPareto(stats.rv_continuous):
    """A lognormal body mixed with a Pareto tail starting at ``xm`` (ServeGen's shape for input lengths)."""

    def _argcheck(self, w, mu, sigma, alpha, xm):
        return (w > 0) & (w < 1) & (sigma > 0) & (alpha > 0) & (xm > 0) & np.isfinite(mu)

    def _logpdf(self, x, w, mu, sigma, alpha, xm):
        return _mixture_logpdf(x, w, mu, sigma, alpha, xm)

    def _pdf(self, x, w, mu, sigma, alpha, xm):
        return np.exp(self._logpdf(x, w, mu, sigma, alpha, xm))

    def _cdf(self, x, w, mu, sigma, alpha, xm):
        tail = np.where(x >= xm, 1 - (xm / np.maximum(x, xm)) ** alpha, 0.0)
        return (1 - w) * stats.lognorm.cdf(x, sigma, scale=np.exp(mu)) + w * tail

    def _sf(self, x, w, mu, sigma, alpha, xm):
        tail = np.where(x >= xm, (xm / np.maximum(x, xm)) ** alpha, 1.0)
        return (1 - w) * stats.lognorm.sf(x, sigma, scale=np.exp(mu)) + w * tail

    def _logsf(self, x, w, mu, sigma, alpha, xm):
        return np.log(np.maximum(self._sf(x, w, mu, sigma, alpha, xm), 1e-300))


    def _rvs(self, w, mu, sigma, alpha, xm, size=None, random_state=None):
        tail = random_state.random(size) < w
        body = random_state.lognormal(mu, sigma, size)
        pareto = xm * (1.0 - random_state.random(size)) ** (-1.0 / alpha)
        return np.where(tail, pareto, body)


lognormal_pareto = _LognormalPareto(a=0.0, name="lognormal_pareto", shapes="w, mu, sigma, alpha, xm")


# Log-density and log-survival of each family as plain numpy: the optimiser calls them thousands of times, and
# scipy's generic rv_continuous dispatch costs more than the arithmetic. A test holds them equal to the dists.
_LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def _lognormal_logpdf(x, mu, sigma):
    lx = np.log(x)
    return -0.5 * ((lx - mu) / sigma) ** 2 - np.log(sigma) - _LOG_SQRT_2PI - lx


def _lognormal_logsf(x, mu, sigma):
    return special.log_ndtr(-(np.log(x) - mu) / sigma)


def _logt_logpdf(x, mu, sigma, df):
    lx = np.log(x)
    z = (lx - mu) / sigma
    norm = special.gammaln((df + 1) / 2) - special.gammaln(df / 2) - 0.5 * np.log(df * np.pi)
    return norm - (df + 1) / 2 * np.log1p(z * z / df) - np.log(sigma) - lx


def _logt_logsf(x, mu, sigma, df):
    return np.log(special.stdtr(df, -(np.log(x) - mu) / sigma))


def _mixture_logpdf(x, w, mu, sigma, alpha, xm):
    body = np.log1p(-w) + _lognormal_logpdf(x, mu, sigma)
    lx = np.log(np.maximum(x, xm))
    tail = np.where(x >= xm, np.log(w) + np.log(alpha) + alpha * (np.log(xm) - lx) - lx, -np.inf)
    return np.logaddexp(body, tail)


def _mixture_logsf(x, w, mu, sigma, alpha, xm):
    tail = np.where(x >= xm, np.exp(alpha * (np.log(xm) - np.log(np.maximum(x, xm)))), 1.0)
    return np.log((1 - w) * special.ndtr(-(np.log(x) - mu) / sigma) + w * tail)


_FAST = {
    "lognormal": (_lognormal_logpdf, _lognormal_logsf),
    "gamma": (lambda x, shape, scale: (shape - 1) * np.log(x) - x / scale - special.gammaln(shape)
              - shape * np.log(scale),
              lambda x, shape, scale: np.log(special.gammaincc(shape, x / scale))),
    "weibull": (lambda x, shape, scale: np.log(shape / scale) + (shape - 1) * np.log(x / scale) - (x / scale) ** shape,
                lambda x, shape, scale: -((x / scale) ** shape)),
    "exponential": (lambda x, scale: -x / scale - np.log(scale), lambda x, scale: -x / scale),
    "lomax": (lambda x, shape, scale: np.log(shape / scale) - (shape + 1) * np.log1p(x / scale),
              lambda x, shape, scale: -shape * np.log1p(x / scale)),
    "logt": (_logt_logpdf, _logt_logsf),
    "lognormal_pareto": (_mixture_logpdf, _mixture_logsf),
}
# a gap read off a clock that floors timestamps: below this many ticks its probability is integrated over the
# first arrival's phase (CLOCK_PHASES midpoints; the density is off by O(1/ticks^2) there, 10% at one tick)
CLOCK_EXACT_BELOW = 16
CLOCK_PHASES = 32


def clock_log_probs(logpdf, logsf, params: dict, ticks: np.ndarray, tick_s: float) -> np.ndarray:
    """log P(a gap reads ``ticks`` ticks) on a clock of ``tick_s`` that floors timestamps, for a gap distribution
    given by its fast ``logpdf``/``logsf``. The first arrival falls at a uniform phase u of its tick, so a gap g
    reads k ticks when (k - u) tick <= g < (k + 1 - u) tick: P = mean over u of S((k - u) tick) - S((k + 1 - u)
    tick), a triangle kernel (k - 1 to k + 1 ticks) over the density, not the point k tick; from
    :data:`CLOCK_EXACT_BELOW` ticks on, tick * f(k tick). Censoring every tie below one tick and reading the rest
    as points made Poisson arrivals on a one-second clock fit gamma shape 0.38 (exponential scale 8% low)."""
    out = np.empty(ticks.size)
    small = ticks < CLOCK_EXACT_BELOW
    if small.any():
        phase = (np.arange(CLOCK_PHASES) + 0.5) / CLOCK_PHASES
        lo = (ticks[small, None] - phase) * tick_s
        above_lo = np.ones(lo.shape)
        inside = lo > 0
        above_lo[inside] = np.exp(logsf(lo[inside], **params))
        above_hi = np.exp(logsf((ticks[small, None] + 1 - phase) * tick_s, **params))
        out[small] = np.log(np.mean(above_lo - above_hi, axis=1))
    out[~small] = math.log(tick_s) + logpdf(ticks[~small] * tick_s, **params)
    return out


# log F(x), for values censored from below (ties of a clock coarser than the gaps it measures)
_FAST_LOGCDF = {
    "lognormal": lambda x, mu, sigma: special.log_ndtr((np.log(x) - mu) / sigma),
    "gamma": lambda x, shape, scale: np.log(special.gammainc(shape, x / scale)),
    "weibull": lambda x, shape, scale: np.log(-np.expm1(-((x / scale) ** shape))),
    "exponential": lambda x, scale: np.log(-np.expm1(-x / scale)),
}


@dataclass(frozen=True)
class Family:
    """A family: parameter names, a builder of the frozen distribution, a start point and a link."""

    name: str
    params: tuple[str, ...]
    build: Callable[[dict], stats.rv_continuous]
    start: Callable[[np.ndarray, np.ndarray], dict]   # (values, weights) -> starting parameters
    help: str
    fixed: tuple[str, ...] = ()                        # parameters profiled over, not optimised by gradient
    profile_grid: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None   # candidates for the fixed one

    def to_vector(self, params: dict) -> np.ndarray:
        return np.array([_LINKS[self.name][p][0](params[p]) for p in self.free])

    def from_vector(self, vec: np.ndarray, fixed: dict) -> dict:
        out = {p: float(_LINKS[self.name][p][1](v)) for p, v in zip(self.free, vec, strict=True)}
        out.update(fixed)
        return out

    def log_likelihood(self, params: dict, x: np.ndarray, w: np.ndarray, cap: float | None, censored: float,
                       floor: float | None = None, below_floor: float = 0.0,
                       intervals: tuple[np.ndarray, np.ndarray] | None = None, clock_s: float | None = None) -> float:
        """Censored log-likelihood: ``sum w log f(x) + censored log S(cap) + below_floor log F(floor)``.

        With ``intervals = (lo, hi)`` the data are whole tokens binned into intervals: ``log (S(lo) - S(hi))``
        replaces ``log f(x)`` (``cap`` is then the lower edge of the capped value's interval). On millions of
        requests the density-at-a-point error alone is worth hundreds of log-likelihood units, enough to crown
        a wrong family. With ``clock_s`` the data are gaps read off a clock of that tick
        (:func:`clock_log_probs`).
        """
        logpdf, logsf = _FAST[self.name]
        if clock_s is not None:
            ll = float(np.dot(w, clock_log_probs(logpdf, logsf, params, np.rint(x / clock_s), clock_s)))
        elif intervals is not None:
            ll = float(np.dot(w, interval_log_mass(logpdf, logsf, params, *intervals)))
        else:
            ll = float(np.dot(w, logpdf(x, **params)))
        if censored:
            ll += censored * float(logsf(cap, **params))
        if below_floor:
            logcdf = _FAST_LOGCDF.get(self.name) or (lambda v, **p: self.build(p).logcdf(v))
            ll += below_floor * float(logcdf(floor, **params))
        return ll

    @property
    def free(self) -> tuple[str, ...]:
        return tuple(p for p in self.params if p not in self.fixed)


def interval_log_mass(logpdf, logsf, params: dict, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``log (S(lo) − S(hi))`` of each interval: from the two survival logs where they differ in more than their
    last digits, else the density at the midpoint times the width. Far out in a tail (one request of 10^15 tokens)
    the two logs agree to every digit, and their difference read the interval as holding no mass: ``-inf``, which
    made every heavy-tailed family fail and the light ones fit a shape of 5e-4."""
    upper = logsf(lo, **params)
    diff = logsf(hi, **params) - upper
    resolved = diff < -1e-8 * np.maximum(1.0, np.abs(upper))
    out = np.empty_like(upper)
    out[resolved] = upper[resolved] + np.log(-np.expm1(diff[resolved]))
    if not resolved.all():
        a, b = lo[~resolved], hi[~resolved]
        out[~resolved] = logpdf((a + b) / 2, **params) + np.log(b - a)
    return out


def _log_moments(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    lx = np.log(x)
    mu = float(np.average(lx, weights=w))
    sd = float(np.sqrt(np.average((lx - mu) ** 2, weights=w)))
    return mu, max(sd, 1e-3)


def _moments(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    mean = float(np.average(x, weights=w))
    var = float(np.average((x - mean) ** 2, weights=w))
    return mean, max(var, 1e-12)


def _weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    order = np.argsort(x)
    cum = np.cumsum(w[order])
    return float(x[order][np.searchsorted(cum, q * cum[-1])])


def _start_gamma(x, w):
    mean, var = _moments(x, w)
    return {"shape": mean**2 / var, "scale": var / mean}


def _start_weibull(x, w):
    mu, sd = _log_moments(x, w)
    shape = 1.2825 / sd  # pi / sqrt(6) / sd of ln X
    return {"shape": shape, "scale": float(np.exp(mu + 0.5772 / shape))}


def _start_lomax(x, w):
    mean, var = _moments(x, w)
    ratio = var / mean**2
    shape = 2 * ratio / (ratio - 1) if ratio > 1.05 else 10.0
    return {"shape": shape, "scale": mean * (shape - 1) if shape > 1 else mean}


def _start_mixture(x, w, xm=None):
    # body moments from below the threshold, tail index by Hill's estimator above it: a start near the right
    # basin (a blind start drifts to alpha -> 0, a tail that only soaks up the censored mass)
    xm = _weighted_quantile(x, w, 0.9) if xm is None else xm
    below, above = x < xm, x >= xm
    mu, sd = _log_moments(x[below], w[below]) if w[below].sum() > 1 else _log_moments(x, w)
    tail_n = w[above].sum()
    hill = tail_n / max(float(np.dot(w[above], np.log(x[above] / xm))), 1e-9) if tail_n else 1.5
    frac = tail_n / w.sum()
    return {"w": float(np.clip(0.5 * frac, 0.005, 0.5)), "mu": mu, "sigma": sd,
            "alpha": float(np.clip(hill, 0.2, 20.0)), "xm": float(xm)}


def _xm_grid(x, w):
    # the tail's start is a threshold: its likelihood jumps at data points, so it is profiled, not differentiated
    return np.unique([_weighted_quantile(x, w, q) for q in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98)])


_POS = (np.log, np.exp)
_REAL = (lambda v: v, lambda v: v)
_UNIT = (special.logit, special.expit)
_LINKS = {
    "lognormal": {"mu": _REAL, "sigma": _POS},
    "gamma": {"shape": _POS, "scale": _POS},
    "weibull": {"shape": _POS, "scale": _POS},
    "exponential": {"scale": _POS},
    "lomax": {"shape": _POS, "scale": _POS},
    "logt": {"mu": _REAL, "sigma": _POS, "df": _POS},
    "lognormal_pareto": {"w": _UNIT, "mu": _REAL, "sigma": _POS, "alpha": _POS},
}

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("lognormal", ("mu", "sigma"), lambda p: stats.lognorm(p["sigma"], scale=np.exp(p["mu"])),
           lambda x, w: dict(zip(("mu", "sigma"), _log_moments(x, w), strict=True)),
           "ln X is normal(mu, sigma): the usual default for prompt lengths"),
    Family("gamma", ("shape", "scale"), lambda p: stats.gamma(p["shape"], scale=p["scale"]), _start_gamma,
           "gamma(shape, scale): exponential when shape = 1"),
    Family("weibull", ("shape", "scale"), lambda p: stats.weibull_min(p["shape"], scale=p["scale"]),
           _start_weibull, "Weibull(shape, scale): stretched (shape < 1) or compressed exponential"),
    Family("exponential", ("scale",), lambda p: stats.expon(scale=p["scale"]),
           lambda x, w: {"scale": float(np.average(x, weights=w))},
           "exponential(scale): ServeGen's finding for output lengths"),
    Family("lomax", ("shape", "scale"), lambda p: stats.lomax(p["shape"], scale=p["scale"]), _start_lomax,
           "Lomax / Pareto II (shape, scale): power-law tail with index shape"),
    Family("logt", ("mu", "sigma", "df"), lambda p: logt(p["df"], p["sigma"], scale=np.exp(p["mu"])),
           lambda x, w: {**dict(zip(("mu", "sigma"), _log_moments(x, w), strict=True)), "df": 5.0},
           "ln X is Student t(df, mu, sigma): the output-length family of seed article 002"),
    Family("lognormal_pareto", ("w", "mu", "sigma", "alpha", "xm"),
           lambda p: lognormal_pareto(p["w"], p["mu"], p["sigma"], p["alpha"], p["xm"]), _start_mixture,
           "lognormal body plus a weight-w Pareto(alpha) tail from xm (profiled): ServeGen's inputs",
           fixed=("xm",), profile_grid=_xm_grid),
)}
