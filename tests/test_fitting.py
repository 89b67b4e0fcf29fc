"""Length fits: parameters recovered from seeded samples (with and without a cap), censoring, ranking, failures."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from planner.workload.fitting import families
from planner.workload.fitting.families import FAMILIES, Family
from planner.workload.fitting.lengths import counts_of, detect_cap, exact_quantile, fit_lengths

N = 200_000
# (family, true parameters, sampler) — scales of hundreds of tokens, as in real traces; samples are rounded to
# whole tokens like a real trace's lengths.
TRUTH = {
    "lognormal": {"mu": 6.0, "sigma": 1.0},
    "gamma": {"shape": 2.0, "scale": 300.0},
    "weibull": {"shape": 1.3, "scale": 500.0},
    "exponential": {"scale": 400.0},
    "lomax": {"shape": 3.0, "scale": 1000.0},
    "logt": {"mu": 5.0, "sigma": 0.8, "df": 5.0},
    "lognormal_pareto": {"w": 0.08, "mu": 6.4, "sigma": 1.0, "alpha": 1.4, "xm": 1800.0},
}


def sample(name: str, seed: int = 7) -> np.ndarray:
    raw = FAMILIES[name].build(TRUTH[name]).rvs(size=N, random_state=np.random.default_rng(seed))
    return np.maximum(np.rint(raw), 1.0)


def assert_recovered(fitted: dict, truth: dict, rel: float) -> None:
    for key, value in truth.items():
        assert fitted[key] == pytest.approx(value, rel=rel), (key, fitted, truth)


@pytest.mark.parametrize("name", list(TRUTH))
def test_parameters_recovered_without_a_cap(name):
    fit = fit_lengths(sample(name), families=(name,), detect=False)
    assert fit.censored_at is None and fit.best == name
    assert_recovered(fit.candidates[0].params, TRUTH[name], rel=0.04)


@pytest.mark.parametrize("name", list(TRUTH))
def test_parameters_recovered_with_a_cap_at_the_97th_percentile(name):
    x = sample(name)
    cap = float(np.quantile(x, 0.97))
    capped = np.minimum(x, cap)
    fit = fit_lengths(capped, families=(name,))          # the cap is found, not given
    assert fit.censored_at == cap
    assert fit.censored_fraction == pytest.approx(np.mean(x >= cap))
    assert_recovered(fit.candidates[0].params, TRUTH[name], rel=0.05)
    # fitting the same data as if uncensored bends the parameters: the censoring is what recovers them
    naive = fit_lengths(capped, families=(name,), detect=False).candidates[0].params

    def worst(params):
        return max(abs(params[k] / v - 1) for k, v in TRUTH[name].items())
    assert worst(naive) > 2 * worst(fit.candidates[0].params)


def test_a_given_cap_censors_like_a_detected_one():
    x = np.minimum(sample("lognormal"), 1024)
    given_cap = fit_lengths(x, families=("lognormal",), cap=1024, detect=False)
    found = fit_lengths(x, families=("lognormal",))
    assert given_cap.censored_at == found.censored_at == 1024
    assert given_cap.candidates[0].params == pytest.approx(found.candidates[0].params)


def test_a_cap_between_whole_tokens_censors_what_the_next_whole_one_does():
    # whole tokens at or above 1023.5 are those from 1024: the fit is the cap-1024 fit (censoring from 1023 had
    # token 1023 counted both as itself and in the censored tail)
    x = np.round(np.minimum(sample("lognormal"), 1024))
    fits = [fit_lengths(x, families=("lognormal",), cap=cap, detect=False).candidates[0] for cap in (1024, 1023.5)]
    assert fits[1].aic == pytest.approx(fits[0].aic, rel=1e-12)
    assert fits[1].params == pytest.approx(fits[0].params, rel=1e-9)


def test_ranking_puts_the_true_family_first_and_sorts_by_aic():
    fit = fit_lengths(sample("gamma"))
    fitted = [c for c in fit.candidates if c.aic is not None]
    assert fit.best == "gamma"
    assert [c.aic for c in fitted] == sorted(c.aic for c in fitted)
    assert len(fitted) == len(FAMILIES)
    assert fit.candidates[len(fitted)].family == "empirical"
    # BIC = AIC + k (ln n - 2): one penalty per parameter
    for c in fitted:
        k = len(FAMILIES[c.family].params)
        assert c.bic - c.aic == pytest.approx(k * (math.log(N) - 2))


def test_fitted_quantiles_track_the_empirical_ones_for_the_true_family():
    x = sample("lognormal")
    fit = fit_lengths(x, families=("lognormal",), detect=False)
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert fit.candidates[0].quantiles[key] == pytest.approx(np.quantile(x, q), rel=0.03)
        assert fit.empirical_quantiles[key] == np.quantile(x, q)


def test_a_family_that_fails_is_reported_and_the_others_still_rank(monkeypatch):
    def no_start(x, w):
        raise FloatingPointError("no usable start")
    monkeypatch.setitem(FAMILIES, "broken", Family("broken", ("a",), lambda p: None, no_start, "always fails"))
    fit = fit_lengths(sample("exponential"), families=("exponential", "broken", "lognormal"))
    by_family = {c.family: c for c in fit.candidates}
    assert by_family["broken"].error.startswith("FloatingPointError")
    assert by_family["broken"].aic is None and fit.candidates[-1].family == "broken"
    assert fit.best == "exponential" and by_family["lognormal"].error is None


def test_fast_log_densities_equal_scipy():
    x = np.array([1.0, 3.0, 50.0, 700.0, 1800.0, 2500.0, 40000.0])
    for name, params in TRUTH.items():
        dist = FAMILIES[name].build(params)
        logpdf, logsf = families._FAST[name]
        np.testing.assert_allclose(logpdf(x, **params), dist.logpdf(x), rtol=1e-9, err_msg=name)
        np.testing.assert_allclose(logsf(x, **params), dist.logsf(x), rtol=1e-7, atol=1e-12, err_msg=name)
        if name in families._FAST_LOGCDF:
            np.testing.assert_allclose(families._FAST_LOGCDF[name](x, **params), dist.logcdf(x), rtol=1e-7,
                                       atol=1e-12, err_msg=name)


def test_mixture_and_log_t_are_proper_distributions():
    for name in ("logt", "lognormal_pareto"):
        dist = FAMILIES[name].build(TRUTH[name])
        grid = np.geomspace(1e-3, 1e7, 4001)
        pdf_mass = np.trapezoid(dist.pdf(grid), grid)
        assert pdf_mass == pytest.approx(dist.cdf(1e7) - dist.cdf(1e-3), abs=2e-3)
        for q in (0.1, 0.5, 0.9, 0.99):
            assert dist.cdf(dist.ppf(q)) == pytest.approx(q, abs=1e-6)


def test_cap_detection_has_no_false_alarm_on_an_uncapped_sample():
    for name in TRUTH:
        assert detect_cap(*counts_of(sample(name))) is None, name


def test_a_truncation_cluster_a_few_tokens_wide_is_detected():
    x = sample("lognormal")
    truncated = np.where(x >= 7434, 7434 + (x % 4), x)   # context truncation lands on 7434-7437
    assert detect_cap(*counts_of(truncated)) == 7434


def test_the_subsample_keeps_many_distinct_values_unbiased():
    x = np.random.default_rng(3).lognormal(3.0, 0.7, size=400_000)   # continuous: 400k distinct values
    fit = fit_lengths(x, families=("lognormal",), detect=False)
    assert fit.n == 400_000
    assert_recovered(fit.candidates[0].params, {"mu": 3.0, "sigma": 0.7}, rel=0.01)


def test_values_at_or_below_a_floor_are_censored_not_dropped():
    arrivals = np.cumsum(np.random.default_rng(5).gamma(0.25, 4.0, size=N))
    clocked = np.diff(np.floor(arrivals * 1000)) / 1000     # a millisecond clock: ~15% of gaps read 0
    assert np.mean(clocked == 0) > 0.1
    fit = fit_lengths(clocked, families=("gamma",), detect=False, floor=0.001)
    assert_recovered(fit.candidates[0].params, {"shape": 0.25, "scale": 4.0}, rel=0.04)
    assert fit.dropped_nonpositive == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=200), st.floats(0, 1))
def test_quantiles_from_counts_equal_numpy(values, q):
    x, w = counts_of(np.array(values))
    assert exact_quantile(x, w, q) == pytest.approx(float(np.quantile(values, q)), abs=1e-9)


def test_log_t_family_approaches_lognormal_at_high_df():
    lt = FAMILIES["logt"].build({"mu": 5.0, "sigma": 0.8, "df": 1e6})
    ln = stats.lognorm(0.8, scale=math.exp(5.0))
    x = np.array([10.0, 150.0, 2000.0])
    np.testing.assert_allclose(lt.logpdf(x), ln.logpdf(x), rtol=1e-5)


def test_one_absurd_length_does_not_break_the_heavy_tailed_fits():
    # 5,000 lognormal(6, 1) lengths and one logged as 10^15 tokens: far out in the tail the survival logs of x ± 0.5
    # agree to every digit, and their difference read the interval as empty (-inf) for every heavy-tailed family
    x = np.rint(np.random.default_rng(3).lognormal(6.0, 1.0, 5000)) + 1
    fit = fit_lengths(np.append(x, 1e15))
    by_name = {c.family: c for c in fit.candidates}
    for name in ("lognormal", "lognormal_pareto", "logt"):
        assert by_name[name].error is None, by_name[name].error
    assert fit.best in ("lognormal_pareto", "logt", "lomax")          # a tail heavy enough to hold it
    assert by_name["lognormal"].params["mu"] == pytest.approx(6.0, abs=0.1)
    # the midpoint density stands in only where the two survival logs cannot tell the interval's mass
    lo, hi = np.array([99.5, 1e15 - 0.5]), np.array([100.5, 1e15 + 0.5])
    logpdf, logsf = families._FAST["lognormal"]
    mass = families.interval_log_mass(logpdf, logsf, {"mu": 6.0, "sigma": 1.0}, lo, hi)
    dist = stats.lognorm(1.0, scale=math.exp(6.0))
    assert mass[0] == pytest.approx(math.log(dist.sf(99.5) - dist.sf(100.5)), rel=1e-9)
    assert mass[1] == pytest.approx(dist.logpdf(1e15), rel=1e-9)


def test_lengths_of_one_value_are_that_point_mass_not_a_failure():
    # a fixed-length benchmark: every prompt 100 tokens. No family has a shape to fit; the lengths are drawn as
    # they are (it had raised, and stopped `simulate --fitted`)
    from planner.sim.workload import from_fits

    fit = fit_lengths(np.full(500, 100.0))
    assert fit.best == "empirical" and [c.family for c in fit.candidates] == ["empirical"]
    assert fit.censored_at is None and fit.empirical_quantiles == {k: 100.0 for k in fit.empirical_quantiles}
    two = fit_lengths(np.array([7.0] * 30 + [900.0] * 10), cap=900.0)     # one value below a cap, the rest at it
    assert two.best == "empirical" and two.censored_at == 900.0 and two.censored_fraction == 0.25
    work = from_fits(fit, two, 4000, qps=1.0)
    assert set(work.input_tokens) == {100} and set(work.output_tokens) == {7, 900}
    assert np.mean(work.output_tokens == 900) == pytest.approx(0.25, abs=0.03)
