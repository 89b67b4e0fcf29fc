"""Arrival processes: inter-arrival fits, burstiness at every time scale, and a Poisson verdict backed by a test.

Raw inter-arrival statistics are meaningless when timestamps are coarse or quantized (many ties, as in Mooncake's
3-second buckets); such traces are flagged and judged by the dispersion of counts per bin instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import stats

from planner.workload.fitting.lengths import MAX_DISTINCT, QUANTILES, LengthFit, counts_of, fit_lengths
from planner.workload.rates import request_rate_rps

INTERARRIVAL_FAMILIES = ("exponential", "gamma", "weibull", "lognormal")
DISPERSION_WIDTHS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
_TIE_FRACTION_QUANTIZED = 0.05
_GRID_RATIO = 0.3          # p5 / median of positive gaps: ~0.07 for Poisson, ~1 for a clock ticking every 3 s
_POISSON_ALPHA = 0.01
_TARGET_COUNT_PER_BIN = 10.0


@dataclass(frozen=True)
class PoissonTest:
    """Index-of-dispersion test of counts per bin: (bins - 1) * VMR ~ chi-square(bins - 1) for a Poisson process."""

    bin_s: float
    bins: int
    vmr: float
    p_value: float
    consistent: bool


@dataclass(frozen=True)
class ArrivalFit:
    """Inter-arrival fits plus the statistics that stay valid when they do not."""

    n: int
    cv: float | None
    tie_fraction: float
    quantized: bool
    quantum_s: float | None
    poisson: PoissonTest | None
    fit: LengthFit | None
    gap_quantiles: dict[str, float] | None = None   # exact p50/p90/p99 of all gaps, ties included


# counts per bin go through a dense array (5x faster than sorting the arrivals) up to this many bins per arrival
_DENSE_BINS_PER_ARRIVAL = 16


class BinCounts(NamedTuple):
    """Requests per bin of one width from the first arrival to the last, kept for the non-empty bins only: every
    statistic of the counts follows without an array as long as the span (one stray timestamp years away from the
    rest makes billions of one-second bins)."""

    index: np.ndarray       # each non-empty bin's position (0: the first arrival's), ascending
    counts: np.ndarray      # its requests
    bins: int               # bins from the first arrival's to the last's, empty ones included


def counts_per_bin(arrivals_s: np.ndarray, width_s: float, whole: bool = False) -> BinCounts:
    """The arrivals' :class:`BinCounts` at a bin width of ``width_s``; ``whole``: the bins the span covers whole
    only, the last arrival's partial bin left out (it saw a fraction of ``width_s``: counted as a whole bin, it
    made regular arrivals read overdispersed and Poisson ones fail the test too often)."""
    t = np.asarray(arrivals_s, dtype=float)
    t = t - t.min()
    which = np.floor(t / width_s).astype(np.int64)
    bins = whole_bins(float(t.max()), width_s) if whole else int(which.max()) + 1
    which = which[which < bins]
    if bins > _DENSE_BINS_PER_ARRIVAL * t.size:        # mostly empty: sort the arrivals' bins, not the span's
        index, counts = np.unique(which, return_counts=True)
        return BinCounts(index, counts, bins)
    dense = np.bincount(which, minlength=bins)
    index = np.flatnonzero(dense)
    return BinCounts(index, dense[index], bins)


def whole_bins(span_s: float, width_s: float) -> int:
    """How many bins of ``width_s`` from the first arrival the span fills whole: what dispersion statistics count."""
    return int(np.floor(span_s / width_s))


def _vmr(counts: np.ndarray, bins: int) -> float:
    """Variance-to-mean ratio of the counts per bin, the ``bins − len(counts)`` empty bins included."""
    mean = counts.sum() / bins
    return float((float(counts @ counts) / bins - mean * mean) / mean)


def _percentile(counts: np.ndarray, bins: int, q: float) -> float:
    """``np.percentile`` of the counts per bin, empty bins included, at ``q`` (0–100)."""
    ordered = np.sort(counts)
    zeros = bins - ordered.size
    position = q / 100 * (bins - 1)
    lo, hi = int(np.floor(position)), int(np.ceil(position))
    at = [0.0 if i < zeros else float(ordered[i - zeros]) for i in (lo, hi)]
    return at[0] + (at[1] - at[0]) * (position - lo)


def dispersion_curve(arrivals_s: np.ndarray, widths_s=DISPERSION_WIDTHS_S) -> list[dict]:
    """Variance-to-mean ratio of counts per bin for each width that gives at least 10 bins."""
    t = np.asarray(arrivals_s, dtype=float)
    span = float(t.max() - t.min()) if t.size else 0.0
    out = []
    for width in widths_s:
        if span / width < 10:
            continue
        _, counts, bins = counts_per_bin(t, width, whole=True)
        out.append({"bin_s": float(width), "bins": bins, "vmr": _vmr(counts, bins)})
    return out


def poisson_from_counts(width_s: float, bins: int, total: float, sum_sq: float) -> PoissonTest | None:
    """The index-of-dispersion test from the moments of counts per bin: ``bins`` whole bins of ``width_s`` (empty
    ones included, :func:`whole_bins`) holding ``total`` requests, ``sum_sq`` the sum of squared counts (None if
    too few bins)."""
    if bins < 10 or total <= 0:
        return None
    mean = total / bins
    vmr = float((sum_sq - total * total / bins) / (bins - 1) / mean)
    dof = bins - 1
    stat = dof * vmr
    p = float(min(1.0, 2 * min(stats.chi2.sf(stat, dof), stats.chi2.cdf(stat, dof))))
    return PoissonTest(width_s, int(bins), vmr, p, p >= _POISSON_ALPHA)


def poisson_width_s(n: int, span_s: float, min_bin_s: float = 0.0) -> float | None:
    """The test's bin width: about ten requests per bin, never below ``min_bin_s`` (None without a span)."""
    return max(_TARGET_COUNT_PER_BIN * span_s / n, min_bin_s) if span_s > 0 else None


def poisson_test(arrivals_s: np.ndarray, min_bin_s: float = 0.0) -> PoissonTest | None:
    """Two-sided index-of-dispersion test with bins holding about ten requests each (None if too few bins)."""
    t = np.asarray(arrivals_s, dtype=float)
    width = poisson_width_s(t.size, float(t.max() - t.min()) if t.size else 0.0, min_bin_s)
    if width is None:
        return None
    _, counts, bins = counts_per_bin(t, width, whole=True)
    return poisson_from_counts(width, bins, float(counts.sum()), float(counts @ counts))


@dataclass(frozen=True)
class GapSummary:
    """What the inter-arrival fit reads of a trace's gaps (between consecutive arrivals, sorted): from an array
    (:func:`gap_summary`) or computed by DuckDB over a stored trace of any size
    (:func:`planner.traces.queries.gap_summary_of_trace`).

    Attributes
    ----------
    arrivals : int
        Arrivals (gaps + 1).
    span_s : float
        Last arrival minus first.
    mean_s, sd_s : float
        Mean and population standard deviation of the gaps.
    tie_fraction : float
        Share of gaps at or below the tie threshold (half the clock's resolution).
    positive_p5_s, positive_median_s : float or None
        p5 and median of the gaps above it (None when there are none).
    quantiles : dict
        Exact p50/p90/p99 of all gaps.
    x, w : ndarray
        Every gap as distinct values and counts, or, past :data:`MAX_DISTINCT` gaps, a seeded sample of that many
        with its counts scaled to the number of gaps.
    """

    arrivals: int
    span_s: float
    mean_s: float
    sd_s: float
    tie_fraction: float
    positive_p5_s: float | None
    positive_median_s: float | None
    quantiles: dict[str, float]
    x: np.ndarray
    w: np.ndarray


def tie_threshold_s(resolution_s: float | None) -> float:
    """Gaps at or below half the clock's resolution are ties."""
    return max(resolution_s or 0.0, 1e-12) * 0.5


def gap_summary(arrivals_s: np.ndarray, resolution_s: float | None = None) -> GapSummary | None:
    """:class:`GapSummary` of arrival times in any order (None with fewer than two gaps)."""
    t = np.asarray(arrivals_s, dtype=float)
    gaps = np.diff(t)
    if np.any(gaps < 0):
        t = np.sort(t)
        gaps = np.diff(t)
    if gaps.size < 2:
        return None
    tie = tie_threshold_s(resolution_s)
    positive = gaps[gaps > tie]
    # gaps are continuous (nearly all distinct): a seeded draw stands in for them, weighted back to the full count
    x, w = counts_of(gaps) if gaps.size <= MAX_DISTINCT else counts_of(
        np.random.default_rng(0).choice(gaps, size=MAX_DISTINCT))
    return GapSummary(int(t.size), float(t[-1] - t[0]), float(gaps.mean()), float(gaps.std()),
                      float(np.mean(gaps <= tie)),
                      float(np.percentile(positive, 5)) if positive.size else None,
                      float(np.median(positive)) if positive.size else None,
                      dict(zip(QUANTILES, map(float, np.quantile(gaps, list(QUANTILES.values()))), strict=True)),
                      x, w * (gaps.size / w.sum()))


def fit_gaps(gaps: GapSummary | None, resolution_s: float | None,
             poisson: Callable[[float], PoissonTest | None]) -> ArrivalFit:
    """Fit the gaps a :class:`GapSummary` holds, flag a quantized clock and run the Poisson test.

    Parameters
    ----------
    poisson : callable
        The Poisson test at a minimum bin width (:func:`poisson_test` of the arrivals, or its SQL twin).
    """
    if gaps is None:
        return ArrivalFit(0, None, 0.0, False, None, None, None)
    tie = tie_threshold_s(resolution_s)
    ties = gaps.tie_fraction
    # Ties alone do not make a clock coarse: a bursty process read at 1 ms has many. A coarse clock also puts
    # the positive gaps on a grid, so even the short ones are about as long as the typical one.
    quantized = bool(ties > _TIE_FRACTION_QUANTIZED and gaps.positive_median_s is not None
                     and gaps.positive_p5_s >= _GRID_RATIO * gaps.positive_median_s)
    quantum = gaps.positive_median_s if quantized else None
    cv = gaps.sd_s / gaps.mean_s if gaps.mean_s > 0 else None
    test = poisson(10 * quantum if quantum else 0.0)
    tick = _clock_tick(gaps.x, (quantum, resolution_s)) if ties else None
    try:
        # gaps on the clock's grid are what it read (a tie: 0 ticks), fitted as such; ties off a grid are gaps
        # shorter than the resolution, censored below it, not dropped
        fit = (fit_lengths(gaps.x, gaps.w, families=INTERARRIVAL_FAMILIES, detect=False, clock_s=tick) if tick else
               fit_lengths(gaps.x, gaps.w, families=INTERARRIVAL_FAMILIES, detect=False,
                           floor=max(resolution_s or 0.0, tie) if ties else None))
    except ValueError:   # too few distinct gaps above the clock's tick (a coarse clock): counts still judge it
        fit = None
    return ArrivalFit(gaps.arrivals, cv, ties, quantized, quantum, test, fit, gaps.quantiles)


def _clock_tick(gaps_s: np.ndarray, candidates) -> float | None:
    """The first candidate tick (a coarse clock's quantum: a 3 s clock stamps whole seconds too; then the
    resolution) every gap is a whole number of, with at least two distinct readings above zero to fit; else None."""
    for tick in candidates:
        if tick:
            ticks = gaps_s / tick
            if np.all(np.abs(ticks - np.rint(ticks)) < 1e-6) and np.unique(np.rint(ticks[ticks > 0.5])).size >= 2:
                return float(tick)
    return None


def fit_arrivals(arrivals_s: np.ndarray, resolution_s: float | None = None) -> ArrivalFit:
    """Fit inter-arrival gaps, flag quantized timestamps and run the Poisson test.

    Parameters
    ----------
    arrivals_s : ndarray
        Arrival times in seconds (any order).
    resolution_s : float, optional
        The timestamp resolution found at ingest; gaps at or below it count as ties.
    """
    t = np.asarray(arrivals_s, dtype=float)
    summary = gap_summary(t, resolution_s)
    if summary is None:
        return ArrivalFit(int(t.size), None, 0.0, False, None, None, None)
    return fit_gaps(summary, resolution_s, lambda min_bin_s: poisson_test(t, min_bin_s))


def peak_summary(arrivals_s: np.ndarray) -> dict:
    """Mean rate, peak-to-mean ratio per bin width, and the planning peak: p99 of per-minute rates."""
    t = np.asarray(arrivals_s, dtype=float)
    span = float(t.max() - t.min())
    mean = request_rate_rps(t.size, span)
    peaks = {}
    for label, width in (("1s", 1.0), ("10s", 10.0), ("60s", 60.0)):
        if span >= width:
            peaks[label] = float(counts_per_bin(t, width).counts.max() / width / mean) if mean else None
    minutes = counts_per_bin(t, 60.0) if span >= 60 else None
    return {"mean_rate_rps": mean, "peak_to_mean": peaks,
            "peak_rate_rps": _percentile(minutes.counts, minutes.bins, 99) / 60.0 if minutes is not None else None}
