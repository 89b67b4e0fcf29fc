"""Replicas found by simulating the fleet: N holds and N − 1 does not, the confidence is what the resamples say,
block-bootstrap resamples keep bursts, and GPU options compare fleets by cost."""

import math
from dataclasses import replace

import numpy as np
import pytest

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.errors import PlannerError
from planner.recommend.costs import compare_gpus, parse_gpu_options
from planner.recommend.fleet import CONFIDENCE, block_bootstrap, block_seconds, size_fleet
from planner.recommend.plan import RecommendOptions, plan_recommendation
from planner.recommend.slo import SLOClass, meets
from planner.scenario import Scenario
from planner.sim.fleet import Fleet
from planner.sim.run import simulate
from planner.sim.workload import SimWorkload, synthetic

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
SCENARIO = Scenario(MODEL, GPU, max_num_seqs=64, max_num_batched_tokens=1024, max_model_len=8192)
TPOT = SLOClass("tpot", "tpot", 99, 40.0)


@pytest.fixture(scope="module")
def busy():
    # ~25 minutes of bursty traffic, several replicas' worth
    return synthetic("requests=6000,input=lognormal:6.4:0.9,output=lognormal:5:0.8,qps=4,arrival=gamma:1.5,"
                     "seed=21")


@pytest.fixture(scope="module")
def sized(busy):
    return size_fleet(busy, SCENARIO, TPOT, 1.0, router="least-loaded", headroom=2.0, max_queue_s=5.0,
                      resamples=10)


def _holds(work, replicas):
    return meets(simulate(work, SCENARIO, fleet=Fleet(replicas, "least-loaded")), TPOT, 5.0)


def test_the_point_estimate_holds_and_one_replica_fewer_does_not(busy, sized):
    n = sized.replicas
    assert n is not None and n >= 2
    at_rate = SimWorkload(busy.arrival_s / 2.0, busy.input_tokens, busy.output_tokens, "x2")
    assert _holds(at_rate, n) and not _holds(at_rate, n - 1)
    curve = {p.replicas: p for p in sized.curve}
    assert curve[n].holds and not curve[n - 1].holds and curve[n - 1].why
    assert curve[n + 1].holds and curve[n].verdict == "stable"
    # the curve's metric falls as replicas are added
    assert curve[n - 1].metric_ms >= curve[n].metric_ms >= curve[n + 1].metric_ms


def test_the_confident_count_is_the_90th_percentile_of_what_each_resample_needs(busy, sized):
    at_rate = SimWorkload(busy.arrival_s / 2.0, busy.input_tokens, busy.output_tokens, "x2")
    # blocks of whole minutes of the trace's own clock, halved on the replay's (headroom 2)
    assert sized.block_s == block_seconds(busy)
    samples = [block_bootstrap(at_rate, seed, sized.block_s / 2.0) for seed in range(10)]
    k = sized.confident_replicas
    share = np.mean([_holds(s, k) for s in samples])
    assert share >= CONFIDENCE and k >= sized.replicas       # it holds on the trace too
    if k > sized.replicas:
        assert np.mean([_holds(s, k - 1) for s in samples]) < CONFIDENCE
    assert sized.held_share == np.mean([_holds(s, sized.replicas) for s in samples])


def test_the_confident_count_never_falls_below_what_the_trace_itself_needs():
    from planner.recommend.fleet import confident_count

    needs = [3, 3, 3, 3, 3, 3, 3, 3, 4, 5]          # resamples that broke up the trace's surge need fewer
    assert confident_count(needs, 0.9, point=2) == 4 and confident_count(needs, 0.9, point=5) == 5
    assert confident_count([3] * 9 + [None], 0.9, point=2) == 3
    assert confident_count([3] * 8 + [None] * 2, 0.9, point=2) is None     # 10% of resamples no count holds


def test_growth_needs_at_least_as_many_and_the_schedule_covers_the_trace(busy, sized):
    assert sized.growth_replicas >= sized.replicas
    windows = sized.schedule
    assert windows[0]["start_s"] == 0 and len(windows) == 6
    assert sum(w["requests"] for w in windows) == 6000
    # on the trace's own clock, the rates × the headroom of 2
    span = float(np.ptp(busy.arrival_s))
    assert windows[-1]["end_s"] == pytest.approx(span)
    assert windows[0]["rate_rps"] == pytest.approx(windows[0]["requests"] / (span / 6) * 2)
    assert all(1 <= w["replicas"] for w in windows)
    hours = windows[-1]["end_s"] / 3600
    assert sized.gpu_hours_peak == pytest.approx(sized.replicas * hours)
    assert sized.gpu_hours_saved == pytest.approx(sized.gpu_hours_peak - sum(
        w["replicas"] * (w["end_s"] - w["start_s"]) / 3600 for w in windows))
    # a schedule that never scales down saves nothing, exactly: the windows' widths sum to the span only up to
    # rounding (it read -1.4e-17, "saves -0.0 GPU-hours" on the page)
    flat = replace(sized, gpu_hours_scheduled=0.1 + 0.2, gpu_hours_peak=0.3)
    assert 0.3 - (0.1 + 0.2) != 0 and flat.gpu_hours_saved == 0 and str(flat.gpu_hours_saved) == "0.0"


def test_block_bootstrap_keeps_whole_minutes():
    # minute k holds k + 1 requests: every resampled minute must hold one of those counts, at the same offsets
    arrival = np.concatenate([k * 60 + np.linspace(0, 59, k + 1) for k in range(12)])
    work = SimWorkload(arrival, np.arange(arrival.size) + 1, np.ones(arrival.size, int), "minutes")
    sample = block_bootstrap(work, 3, 60.0)
    counts = np.bincount((sample.arrival_s // 60).astype(int), minlength=12)
    assert sample.n == counts.sum() and len(counts) == 12
    assert set(counts) <= set(range(1, 13))
    assert np.all(np.diff(sample.arrival_s) >= 0)
    # each request keeps its own length (prompt = its original index + 1) and its offset within the minute
    original = work.arrival_s[sample.input_tokens - 1]
    np.testing.assert_allclose(sample.arrival_s % 60, original % 60, atol=1e-9)
    assert block_bootstrap(work, 3, 60.0).arrival_s.tolist() == sample.arrival_s.tolist()   # seeded


def test_resamples_of_a_short_trace_keep_its_rate():
    # under ten minutes the span is cut into ten equal blocks: no partial or empty block thins the resamples
    work = synthetic("requests=600,input=100,output=10,qps=2.05,seed=3")
    block = block_seconds(work)
    assert block == pytest.approx(np.ptp(work.arrival_s) / 10)
    sizes = [block_bootstrap(work, seed, block).n for seed in range(200)]
    assert np.mean(sizes) == pytest.approx(work.n, rel=0.03)
    assert all(np.ptp(block_bootstrap(work, s, block).arrival_s) <= np.ptp(work.arrival_s) + 1e-9 for s in range(20))


def _ar1(phi: float, n: int, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(n)
    x = np.empty(n)
    x[0] = noise[0]
    for i in range(1, n):
        x[i] = phi * x[i - 1] + noise[i]
    return x


def test_the_block_length_is_politis_and_whites():
    from planner.recommend.block_length import circular_block_length

    # what the arch package's optimal_block_length (8.0.0) gives for these series, to the last digits
    assert circular_block_length(_ar1(0.5, 1000, 7)) == pytest.approx(17.44797037777947, rel=1e-12)
    assert circular_block_length(_ar1(0.9, 1000, 7)) == pytest.approx(48.650325254213826, rel=1e-12)
    # and near the AR(1) series' own optimum, (1.5 (2φ / (1 − φ²))²)^⅓ n^⅓ = 13.9 at φ = 0.5
    assert 10 < circular_block_length(_ar1(0.5, 1000, 7)) < 20
    assert circular_block_length(_ar1(0.0, 1000, 7)) < 2                   # independent values: about a bin a block
    assert circular_block_length(np.full(100, 3.0)) == circular_block_length(np.arange(5.0)) == 1.0
    # a stretch at the mean has no correlation to divide by: counted as none, not as 0/0
    with np.errstate(all="raise"):
        assert circular_block_length(np.r_[np.full(50, 5.0), 0.0, 10.0]) == 1.0


def test_a_surge_keeps_its_minutes_together_in_the_bootstrap():
    # 90 minutes at 1 req/s with a 15-minute surge at 3 req/s more
    rng = np.random.default_rng(3)
    flat = np.sort(rng.uniform(0, 5400, 5400))
    surged = np.sort(np.concatenate([flat, rng.uniform(1800, 2700, 2700)]))
    work, calm = (SimWorkload(t, np.full(t.size, 100), np.full(t.size, 10), "x") for t in (surged, flat))
    assert block_seconds(calm) == pytest.approx(np.ptp(flat) / 90)          # Poisson minutes: a minute a block
    block = block_seconds(work)
    assert 10 * 60 < block < 15 * 60

    def peak_15min(arrival):
        return int((np.searchsorted(arrival, arrival + 900) - np.arange(arrival.size)).max())

    # one-minute blocks scatter the surge: their resamples' busiest quarter hour is half the trace's
    peaks = {b: np.median([peak_15min(block_bootstrap(work, s, b).arrival_s) for s in range(20)])
             for b in (60.0, block)}
    assert peak_15min(surged) == 3574 and peaks[60.0] < 0.55 * 3574 < 0.65 * 3574 < peaks[block]


def test_no_more_than_ten_bootstrap_blocks_per_request():
    # a stray arrival 317 years after 200 others cut the span into 1.7e8 one-minute blocks: 24 GB, then killed
    work = synthetic("requests=200,input=100,output=10,qps=1,seed=3")
    work = replace(work, arrival_s=np.append(work.arrival_s[:-1], 1e10))
    block = block_seconds(work)
    assert block == pytest.approx(np.ptp(work.arrival_s) / 2000)
    # 2,000 blocks: the first holds the 199 requests of the first minutes, the last the stray one
    draws = np.random.default_rng(1).integers(0, 2000, 2000)
    assert block_bootstrap(work, 1, block).n == 199 * np.sum(draws == 0) + np.sum(draws == 1999)
    # a minute-block trace keeps its minutes: 8 requests a minute over an hour
    busy = synthetic("requests=480,input=100,output=10,qps=0.1333,seed=3")
    assert block_seconds(busy) == pytest.approx(np.ptp(busy.arrival_s) / round(np.ptp(busy.arrival_s) / 60))


def test_the_plan_sizes_each_class_by_simulation_not_by_division():
    work = synthetic("requests=3000,input=lognormal:6.4:0.9,output=lognormal:5:0.8,qps=12,arrival=gamma:2,seed=7")
    rec = plan_recommendation(work, SCENARIO, RecommendOptions(slos=("batch:throughput",), resamples=4))
    (row,) = rec.classes
    assert rec.router == row.router == "least-loaded"
    assert row.replicas_for_peak == row.fleet.replicas
    assert row.gpus == row.replicas_for_peak and row.cost_per_hour == row.replicas_for_peak * GPU.price_per_hour
    assert row.to_dict()["fleet"]["confident_replicas"] == row.fleet.confident_replicas
    assert set(row.to_dict()) >= {"router", "queue_ms", "verdict", "replicas_for_peak"}
    # the schedule's rates carry the headroom, and its column says so
    from planner.recommend.table import schedule_tables

    (table,) = schedule_tables(replace(rec, headroom=1.5))
    assert table.columns[3] == "req/s × 1.5 headroom"


def test_gpu_options_compare_fleets_by_cost():
    work = synthetic("requests=1500,input=lognormal:6.4:0.9,output=lognormal:5:0.8,qps=6,seed=9")
    # sized with headroom 2: the fleets hold twice the rate, the tokens they serve are the trace's
    options = RecommendOptions(slos=("batch:throughput",), resamples=0, headroom=2.0)
    comparison = compare_gpus(work, SCENARIO, options, "h100-sxm=0.5")
    rows = {r["gpu"]: r for r in comparison.rows()}
    assert set(rows) == {"a100-80gb-sxm", "h100-sxm"}
    # an H100 at 50 cents an hour is the cheapest way to hold the class
    assert comparison.cheapest() == {"batch": "h100-sxm"}
    h100 = rows["h100-sxm"]
    assert h100["cost_per_hour"] == h100["replicas"] * 0.5
    assert h100["fleet_cost_per_million_output_tokens"] == pytest.approx(
        h100["cost_per_hour"] / (comparison.output_tokens_per_hour / 1e6))
    # the text names each option's fleet and cost, not only the cheapest GPU
    assert h100["replicas"] == 1 and comparison.lines()[1] == (
        f"batch        h100-sxm         1 x TP 1 = 1 GPU, $0.50/hour, "
        f"${h100['fleet_cost_per_million_output_tokens']:,.3g}/M output tokens")
    assert math.isclose(comparison.output_tokens_per_hour, work.output_tokens.mean() * (work.n - 1)
                        / np.ptp(work.arrival_s) * 3600)


def test_gpu_options_are_named_as_the_catalog_names_them():
    # "H100-SXM=3.2" set no price for the scenario's h100-sxm: it was another option, searched a second time
    assert parse_gpu_options("H100-SXM=3.2, a100-80gb-sxm ,h100-sxm") == [("h100-sxm", 3.2), ("a100-80gb-sxm", None)]
    with pytest.raises(PlannerError, match="names a100-80gb-sxm twice, at 1.0 and 5.0"):
        parse_gpu_options("a100-80gb-sxm=1,A100-80GB-SXM=5")


def test_gpu_options_stop_where_the_scenarios_own_gpu_holds_nothing_and_say_what_each_gpu_left_out():
    work = synthetic("requests=300,input=200,output=50,qps=4,seed=9")
    options = RecommendOptions(slos=("batch:throughput",), resamples=0, tp_options=(1, 2))
    seventy = Scenario(get_model("llama-3-70b"), get_gpu("l4"))
    calls = []
    with pytest.raises(PlannerError, match="L4"):      # refused before the H100 is searched
        compare_gpus(work, seventy, options, "h100-sxm", progress=lambda f, m: calls.append(m))
    assert not any(m.startswith("h100-sxm") for m in calls)
    # TP 1 holds a 70B model on neither GPU: each one's comparison says so (the L40S's had gone unreported)
    mixed = compare_gpus(work, Scenario(get_model("llama-3-70b"), get_gpu("h100-sxm"), tp=4),
                         replace(options, tp_options=(1, 4)), "l40s")
    left_out = mixed.skipped_options()
    assert set(left_out) == {"h100-sxm", "l40s"} and all(why[0].startswith("TP 1: ") for why in left_out.values())
    assert mixed.to_dict()["skipped_options"] == left_out and "l40s: not compared: TP 1: " in "\n".join(mixed.lines())


@pytest.mark.parametrize("text, message", [("h100-sxm=cheap", "NAME=PRICE"), ("h100-sxm=-1", "non-negative"),
                                           ("b200", "unknown GPU"), (",", "GPU names")])
def test_bad_gpu_options_are_refused_by_name(text, message):
    with pytest.raises(PlannerError, match=message):
        parse_gpu_options(text)
