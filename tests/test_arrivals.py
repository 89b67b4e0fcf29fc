"""Arrival processes: Poisson told from bursty gamma, coarse clocks, dispersion and peak rates."""

import numpy as np
import pytest

from planner.workload.fitting.arrivals import (
    _percentile,
    _vmr,
    counts_per_bin,
    dispersion_curve,
    fit_arrivals,
    peak_summary,
    poisson_test,
)

RATE = 5.0
N = 50_000


def renewal(cv: float, seed: int, n: int = N) -> np.ndarray:
    """Arrival times of a gamma renewal process with mean rate RATE and inter-arrival CV ``cv``."""
    shape = 1.0 / cv**2
    return np.cumsum(np.random.default_rng(seed).gamma(shape, 1.0 / (RATE * shape), size=n))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_arrivals_pass_the_test_and_fit_exponential(seed):
    fit = fit_arrivals(renewal(1.0, seed), resolution_s=1e-6)
    assert fit.poisson.consistent
    assert fit.cv == pytest.approx(1.0, abs=0.03)
    assert not fit.quantized
    # exponential is gamma/Weibull with shape 1: the extra parameter buys no likelihood, so AIC prefers it or ties
    by_family = {c.family: c for c in fit.fit.candidates}
    assert by_family["gamma"].params["shape"] == pytest.approx(1.0, abs=0.03)
    assert by_family["exponential"].params["scale"] == pytest.approx(1 / RATE, rel=0.02)
    assert by_family["exponential"].aic <= by_family["lognormal"].aic


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bursty_gamma_arrivals_fail_the_test_and_fit_gamma(seed):
    fit = fit_arrivals(renewal(2.0, seed), resolution_s=1e-6)
    assert not fit.poisson.consistent
    assert fit.poisson.vmr > 2
    assert fit.cv == pytest.approx(2.0, rel=0.06)
    assert fit.fit.best == "gamma"
    assert fit.fit.candidates[0].params["shape"] == pytest.approx(0.25, rel=0.04)


def test_millisecond_ties_of_a_bursty_process_are_censored_not_called_coarse():
    t = np.floor(renewal(2.0, 4) * 1000) / 1000
    fit = fit_arrivals(t, resolution_s=0.001)
    assert fit.tie_fraction > 0.05          # many ties ...
    assert not fit.quantized                # ... but the clock is fine relative to the gaps
    assert fit.fit.candidates[0].params["shape"] == pytest.approx(0.25, rel=0.05)


def test_a_three_second_clock_is_flagged_and_judged_by_counts():
    t = np.floor(renewal(1.0, 5) / 3.0) * 3.0   # Mooncake-like: arrivals land on 3 s ticks
    fit = fit_arrivals(t, resolution_s=1.0)
    assert fit.quantized and fit.quantum_s == pytest.approx(3.0)
    assert fit.tie_fraction > 0.5
    assert fit.poisson.bin_s >= 30          # bins of at least ten ticks
    assert fit.poisson.consistent           # the underlying process is Poisson, and the count test still sees it
    assert fit.fit is None                  # every positive gap is one tick: nothing a gap family can learn


def test_poisson_test_is_calibrated():
    # at alpha 0.01, Poisson processes are rejected rarely
    rejected = sum(not poisson_test(renewal(1.0, seed, 5_000)).consistent for seed in range(100))
    assert rejected <= 5


def test_dispersion_curve_is_one_for_poisson_and_grows_for_a_modulated_rate():
    curve = dispersion_curve(renewal(1.0, 6))
    assert all(abs(point["vmr"] - 1) < 0.25 for point in curve if point["bins"] >= 100)
    # a rate that switches between 1 and 9 req/s every 10 minutes: near-Poisson at 1 s, very dispersed at minutes
    rng = np.random.default_rng(7)
    chunks = [600 * i + np.sort(rng.uniform(0, 600, rng.poisson(600 * (1 if i % 2 else 9)))) for i in range(12)]
    curve = {p["bin_s"]: p["vmr"] for p in dispersion_curve(np.concatenate(chunks))}
    # counts in a bin of width b: variance b * 5 + b^2 * 16 (Poisson noise plus the rate's variance 4^2), mean b * 5
    assert curve[1.0] == pytest.approx(1 + 16 / 5, rel=0.1)
    assert curve[60.0] == pytest.approx(1 + 60 * 16 / 5, rel=0.25)
    assert list(curve.values()) == sorted(curve.values())


def test_counts_per_bin_are_the_dense_counts_without_their_empty_bins():
    t = renewal(2.0, 8, 10_000)
    for width in (0.5, 1.0, 60.0, 0.01):        # 0.01: 16+ bins per arrival, counted without the empty ones
        index, counts, bins = counts_per_bin(t, width)
        dense = np.bincount(np.floor((t - t.min()) / width).astype(np.int64))
        assert bins == dense.size == int(np.floor((t.max() - t.min()) / width)) + 1
        assert counts.sum() == t.size and list(counts) == list(dense[dense > 0])
        assert list(index) == list(np.flatnonzero(dense))
        # the statistics read off them are the dense array's, its empty bins included
        assert _vmr(counts, bins) == pytest.approx(dense.var() / dense.mean(), rel=1e-12)
        for q in (0, 1, 50, 90, 99, 100):
            assert _percentile(counts, bins, q) == pytest.approx(np.percentile(dense, q), rel=1e-12, abs=1e-12)


def test_a_stray_timestamp_years_away_costs_no_array_as_long_as_the_span():
    # one arrival 54 years after the rest (an epoch 0 among epoch seconds) made 1.7e9 one-second bins: 13 GiB
    t = np.concatenate([np.arange(600.0), [1.7e9]])
    summary = peak_summary(t)
    assert summary["peak_to_mean"]["1s"] == pytest.approx(1.0 / (600 / 1.7e9))
    assert summary["peak_rate_rps"] == 0.0          # 28 million minutes, 11 of them with a request
    assert dispersion_curve(t)[0]["bins"] == int(1.7e9 / 0.1)          # whole bins: the last arrival's left out


def test_peak_summary_worked_example():
    # 10 minutes at 1 req/s, then 1 minute at 31 req/s (evenly spaced): mean 41/11 per s over 660 s
    t = np.concatenate([np.arange(600.0), 600 + np.arange(31 * 60) / 31.0])
    summary = peak_summary(t)
    span = t.max() - t.min()
    # the mean rate is the one definition: n arrivals have n - 1 gaps over the span
    assert summary["mean_rate_rps"] == pytest.approx((t.size - 1) / span)
    assert summary["peak_to_mean"]["60s"] == pytest.approx(31.0 / ((t.size - 1) / span), rel=1e-9)
    assert summary["peak_rate_rps"] == pytest.approx(np.percentile([1.0] * 10 + [31.0], 99))


@pytest.mark.parametrize("n, resolution", [(3_000, 0.001), (150_000, 1e-6)])
def test_duckdbs_gap_summary_of_a_stored_trace_is_the_arrays(con, tmp_path, n, resolution):
    """The inter-arrival fit of a stored trace reads a gap summary DuckDB computes out of core; on a trace whose
    gaps all fit in memory it is the array's summary (the sample of gaps aside, past MAX_DISTINCT), and its
    Poisson test is the array's."""
    from planner.traces import store
    from planner.traces.ingest import ingest_file
    from planner.traces.queries import arrival_times, gap_summary_of_trace, poisson_test_of_trace
    from planner.workload.fitting.arrivals import gap_summary
    from planner.workload.fitting.lengths import MAX_DISTINCT, exact_quantile

    rng = np.random.default_rng(5)
    t = np.round(np.cumsum(rng.gamma(0.5, 0.02, n)), int(round(-np.log10(resolution))))
    path = tmp_path / "t.csv"
    path.write_text("arrival,input_tokens,output_tokens\n" + "".join(f"{float(x)!r},10,5\n" for x in t))
    info = store.get_trace(con, ingest_file(con, path).trace_id)
    arrays = gap_summary(arrival_times(con, info.trace_id), info.timestamp_resolution_s)
    sql = gap_summary_of_trace(con, info.trace_id, info.timestamp_resolution_s)
    for name in ("arrivals", "span_s", "mean_s", "sd_s", "tie_fraction", "positive_p5_s", "positive_median_s"):
        assert getattr(sql, name) == pytest.approx(getattr(arrays, name), rel=1e-9, abs=1e-12), name
    assert sql.quantiles == pytest.approx(arrays.quantiles, rel=1e-9)
    assert sql.w.sum() == pytest.approx(n - 1)
    # every gap, counted on the clock's grid: the array's gaps, which floating point splits around each tick
    assert sql.x.size <= MAX_DISTINCT and np.allclose(np.diff(sql.x) / resolution, np.rint(np.diff(sql.x) / resolution))
    for q in (0.05, 0.5, 0.9, 0.999):
        assert exact_quantile(sql.x, sql.w, q) == pytest.approx(np.quantile(np.diff(t), q), rel=1e-6)
    for min_bin in (0.0, 0.5):
        ours, theirs = poisson_test_of_trace(con, info.trace_id, sql.arrivals, sql.span_s, min_bin), \
            poisson_test(t, min_bin)
        assert (ours.bins, ours.consistent) == (theirs.bins, theirs.consistent)
        assert ours.vmr == pytest.approx(theirs.vmr, rel=1e-9) and ours.bin_s == pytest.approx(theirs.bin_s)


def test_the_poisson_test_rejects_poisson_arrivals_at_its_level():
    # 400 Poisson traces of 120 requests: at alpha 0.01 about 4 are rejected. Counting the last arrival's partial
    # bin as a whole one rejected 4.45% of them
    rng = np.random.default_rng(7)
    rejected = sum(not poisson_test(rng.exponential(1.0, 120).cumsum()).consistent for _ in range(400))
    assert rejected <= 9


def test_gaps_read_off_a_one_second_clock_fit_the_process_behind_them():
    # Poisson arrivals at about 1 req/s, stamped in whole seconds: a gap of g reads k ticks over a triangle from
    # k - 1 to k + 1 ticks. Read as points above one censored tick, they fit gamma shape 0.38 and beat the
    # exponential by 284 AIC
    poisson = np.floor(renewal(1.0, 3, 3000) * 5.0)                # RATE 5: stretched to 1 req/s
    fit = fit_arrivals(poisson, resolution_s=1.0)
    by = {c.family: c for c in fit.fit.candidates}
    assert fit.fit.best == "exponential" or by["exponential"].aic - fit.fit.candidates[0].aic < 2
    assert by["gamma"].params["shape"] == pytest.approx(1.0, abs=0.06)
    assert by["exponential"].params["scale"] == pytest.approx(np.diff(poisson).mean(), rel=0.02)
    bursty = np.floor(renewal(2.0, 4, 5000) * 5.0)                 # CV 2: gamma shape 0.25
    assert fit_arrivals(bursty, resolution_s=1.0).fit.candidates[0].params["shape"] == pytest.approx(0.25, rel=0.06)


def test_the_clocks_read_off_probabilities_are_exact_for_the_exponential():
    # P(a gap reads 0 ticks) = 1 - (scale / tick)(1 - exp(-tick / scale)); the readings' probabilities sum to 1
    from planner.workload.fitting.families import _FAST, clock_log_probs

    logpdf, logsf = _FAST["exponential"]
    probs = np.exp(clock_log_probs(logpdf, logsf, {"scale": 0.7}, np.arange(400.0), 1.0))
    assert probs[0] == pytest.approx(1 - 0.7 * (1 - np.exp(-1 / 0.7)), rel=1e-3)
    assert probs.sum() == pytest.approx(1.0, abs=2e-3)
