"""Fleets on one clock behind a router, and the stability verdict of every replay."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.errors import PlannerError
from planner.scenario import Scenario
from planner.sim.engines import ENGINES, EngineSettings
from planner.sim.engines.base import FleetSpec
from planner.sim.fleet import Fleet
from planner.sim.reference import run_reference
from planner.sim.results import summarize
from planner.sim.routers import ROUTERS
from planner.sim.run import simulate
from planner.sim.stability import verdict
from planner.sim.workload import SimWorkload, sorted_workload, synthetic

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
SCENARIO = Scenario(MODEL, GPU, max_num_seqs=64, max_num_batched_tokens=512, num_gpu_blocks=400, max_model_len=8192)
COEFFS = SCENARIO.coefficients.as_tuple()
FIELDS = ("first_token", "finish", "first_scheduled", "preemptions", "rejected", "generated")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), blocks=st.integers(8, 200), seqs=st.integers(1, 12),
       budget=st.integers(8, 600), router=st.sampled_from(list(ROUTERS)))
def test_a_fleet_of_one_is_the_single_replica_loop_bit_for_bit(seed, n, blocks, seqs, budget, router):
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.exponential(0.05, n).cumsum() * rng.integers(0, 2))
    prompt, output = rng.integers(1, 300, n), rng.integers(1, 200, n)
    cfg = EngineSettings(seqs, budget, True, 16, blocks, 10_000)
    group = rng.integers(-1, 3, n)
    fleet = ENGINES["vllm-v1"].run(arrival, prompt, output, cfg, COEFFS,
                                   1, FleetSpec(1, ROUTERS[router].code, group, 3))
    slow = run_reference(arrival, prompt, output, cfg, COEFFS)
    for name in (*FIELDS, "free_blocks_at_end", "steps"):
        np.testing.assert_array_equal(getattr(fleet, name), getattr(slow, name), err_msg=name)
    assert (fleet.replica == 0).all()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_round_robin_on_one_clock_equals_independent_replicas_of_the_split(engine):
    # round-robin reads no replica state, so the joint loop must equal N replays of requests i::N exactly
    work = synthetic("requests=600,input=uniform:16:900,output=uniform:1:500,qps=60,seed=5")
    scenario = SCENARIO.replace(engine=engine)
    fleet = simulate(work, scenario, fleet=Fleet(3, "round-robin"))
    for k in range(3):
        part = SimWorkload(work.arrival_s[k::3], work.input_tokens[k::3], work.output_tokens[k::3], "part")
        alone = simulate(part, scenario)
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(fleet, name)[k::3], getattr(alone, name), err_msg=name)
    np.testing.assert_array_equal(fleet.replica, np.arange(work.n) % 3)


@pytest.mark.parametrize("router", list(ROUTERS))
def test_every_request_is_served_once_by_one_replica(router):
    work = synthetic("requests=2000,input=lognormal:6.6:1.0,output=lognormal:5:0.9,qps=30,arrival=gamma:2,seed=2")
    result = simulate(work, SCENARIO, fleet=Fleet(4, router))
    summary = summarize(result)
    assert summary.replicas == 4 and summary.router == router
    assert sum(r.requests for r in summary.per_replica) == work.n - int(result.too_long.sum())
    assert result.completed.sum() + result.rejected.sum() == work.n
    assert result.free_blocks_at_end == 4 * (400 - 1)     # every replica's pool freed at the end (less its null block)
    assert set(np.unique(result.replica[~result.too_long])) == {0, 1, 2, 3}
    np.testing.assert_array_equal(result.generated[result.completed], result.workload.output_tokens[result.completed])


def test_least_loaded_balances_what_round_robin_piles_on_one_replica():
    # long and short prompts alternate: round-robin sends every long one to replica 1 of 2
    n = 400
    prompt = np.where(np.arange(n) % 2 == 0, 3000, 50)
    work = sorted_workload(np.arange(n) * 0.08, prompt, np.full(n, 20), "alternating")
    rr = simulate(work, SCENARIO, fleet=Fleet(2, "round-robin"))
    ll = simulate(work, SCENARIO, fleet=Fleet(2, "least-loaded"))
    long_rr = np.bincount(rr.replica[prompt == 3000], minlength=2)
    long_ll = np.bincount(ll.replica[prompt == 3000], minlength=2)
    assert long_rr.tolist() == [200, 0]
    assert abs(long_ll[0] - long_ll[1]) <= 20
    assert ll.metric_ms("ttft", 99) < 0.5 * rr.metric_ms("ttft", 99)


def test_a_router_sees_a_replica_mid_step_as_it_was_when_the_step_began():
    # A (an 8,000-token prompt, one output token) and X (500 tokens, a long decode) arrive together; C arrives 5 ms
    # later, while A's prefill runs for ~0.2 s. The loop computes A's step whole when it starts, and A finishes in
    # it; a router that read that step's end saw replica 0 empty and sent C behind A (244 ms TTFT)
    work = SimWorkload(np.array([0.0, 0.0, 0.005]), np.array([8000, 500, 100]), np.array([1, 2000, 10]), "mid-step")
    scenario = Scenario(MODEL, GPU, max_model_len=8192)
    result = simulate(work, scenario, fleet=Fleet(2, "least-loaded"))
    assert result.replica.tolist() == [0, 1, 1]
    assert result.first_token[2] - 0.005 < 0.1 < result.finish[0]


def test_least_loaded_sends_requests_where_no_queue_waits_for_a_slot():
    # one long request on replica 0, then 30 short ones under max_num_seqs 4: by outstanding tokens alone all 30
    # went to replica 1 (26 of them waiting for its 4 slots, while replica 0 had 3 free) and the last request
    # queued 20 s; waiting requests first, as llm-d's queue scorer ranks them, splits them
    scenario = Scenario(get_model("llama-3-8b"), get_gpu("h100-sxm"), max_num_seqs=4)
    arrival = np.concatenate([[0.0], 0.001 + 0.0001 * np.arange(30), [0.5]])
    prompt = np.concatenate([[7000], np.full(30, 200), [200]])
    output = np.concatenate([[2000], np.full(30, 500), [50]])
    result = simulate(SimWorkload(arrival, prompt, output, "long first"), scenario, fleet=Fleet(2, "least-loaded"))
    assert np.bincount(result.replica).tolist() == [16, 16]
    assert result.queue_s[-1] < 13.0


def test_least_loaded_splits_equal_requests_evenly():
    work = sorted_workload(np.zeros(64), np.full(64, 200), np.full(64, 50), "burst")
    result = simulate(work, SCENARIO, fleet=Fleet(4, "least-loaded"))
    assert np.bincount(result.replica).tolist() == [16, 16, 16, 16]


def test_prefix_aware_keeps_sessions_home_until_their_replica_is_much_busier():
    rng = np.random.default_rng(0)
    n = 600
    sessions = rng.integers(0, 12, n)
    work = sorted_workload(np.sort(rng.uniform(0, 300, n)), rng.integers(100, 800, n), rng.integers(10, 200, n),
                           "sessions", group=sessions)
    scenario = Scenario(MODEL, GPU, max_model_len=8192)       # the real pool: its quarter is the margin
    margin = scenario.settings.num_blocks * scenario.block_size // 4
    sticky = simulate(work, scenario, fleet=Fleet(4, "prefix-aware"))
    homes = [np.unique(sticky.replica[work.group == g]).size for g in range(12)]
    assert homes == [1] * 12                     # light load: every session stays on one replica
    spread = simulate(work, scenario, fleet=Fleet(4, "least-loaded"))
    assert max(np.unique(spread.replica[work.group == g]).size for g in range(12)) > 1
    # one session carrying everything at once: its replica passes the margin and the session moves on, in turn
    burst = sorted_workload(np.zeros(400), np.full(400, 2000), np.full(400, 100), "one session",
                            group=np.zeros(400, int))
    moved = simulate(burst, scenario, fleet=Fleet(4, "prefix-aware"))
    assert np.unique(moved.replica).size == 4
    # the home takes requests until its load (2,000 tokens each) passes the margin over the idle replicas
    assert int(np.argmax(moved.replica != 0)) == margin // 2000 + 1


def test_prefix_aware_weighs_the_prefix_a_replica_holds_against_its_queue_as_llm_d_does():
    from planner.sim.routers.base import PREFIX_AWARE
    from planner.sim.routers.rule import prefix_scored, route

    # request 2 extends request 1 (900 of its 1,000 prompt tokens; replica 0), which shares 100 with request 0
    # (replica 1). Replica 0 has 3 waiting, replica 1 none, both pools empty: 3·0.9 + 2·0 + 2 = 4.7 against
    # 3·0.1 + 2·1 + 2 = 4.3, so the conversation stays home
    lineage = np.array([[-1, 0, 800], [0, 100, 1000], [1, 900, 1000]], np.int64)
    replica, waiting, load = np.array([1, 0, -1]), np.array([3, 0]), np.zeros(2)
    assert prefix_scored(2, 2, waiting, load, 10_000, 0, lineage, replica) == 0
    # sharing half its prompt (1.5 + 0 + 2 = 3.5), it goes where no queue waits
    lineage[2, 1] = 500
    assert prefix_scored(2, 2, waiting, load, 10_000, 0, lineage, replica) == 1
    empty = np.full(1, -1, np.int64)
    assert route(PREFIX_AWARE, 2, 2, waiting, load, np.full(3, -1), empty, 10_000, 0, lineage, replica) == 1


def test_prefix_aware_spreads_a_prompt_prefix_every_replica_holds_by_load():
    # every request opens with the same two 512-token ids (a system prompt), then six of its own: each one's parent
    # is the request before it, so following the parent had chained all of them onto one replica (TTFT p99 1.15 s
    # against 0.18 s least-loaded at 15 req/s on four H100s); every replica soon holds the prompt, and load decides
    from planner.sim.prefix import from_hash_ids

    n = 600
    ids = [[1, 2] + [100 * r + j for j in range(6)] for r in range(n)]
    work = replace(synthetic(f"requests={n},input=4096,output=50,qps=15,seed=1"),
                   prefix=from_hash_ids(ids, np.full(n, 4096)))
    scenario = Scenario(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    spread, loaded = (summarize(simulate(work, scenario, fleet=Fleet(4, router)))
                      for router in ("prefix-aware", "least-loaded"))
    assert min(r.requests for r in spread.per_replica) > 0.15 * n
    assert spread.ttft_ms.p99 < 1.1 * loaded.ttft_ms.p99
    assert spread.prefix_cache["hit_rate"] == loaded.prefix_cache["hit_rate"] > 0.24


def test_engines_without_a_fleet_loop_take_round_robin_only():
    work = synthetic("requests=50,input=100,output=20,qps=5,seed=1")
    with pytest.raises(PlannerError, match="round-robin"):
        simulate(work, SCENARIO.replace(engine="vllm-v0"), fleet=Fleet(2, "least-loaded"))
    assert summarize(simulate(work, SCENARIO.replace(engine="vllm-v0"), fleet=Fleet(2, "round-robin"))).replicas == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 10**6])
def test_a_replica_count_that_makes_no_sense_is_refused(bad):
    with pytest.raises(PlannerError, match="--replicas"):
        Fleet(bad)


def test_an_unknown_router_is_refused_by_name():
    with pytest.raises(PlannerError, match="unknown --router 'random'"):
        Fleet(2, "random")


# --- the verdict ---------------------------------------------------------------------------------------------

def _run(qps: float, n: int = 3000, seed: int = 4, surge: bool = False):
    work = synthetic(f"requests={n},input=uniform:200:600,output=uniform:50:150,qps={qps},seed={seed}")
    if surge:          # a quiet trace with one minute at 20x the rate in the middle
        gaps = np.diff(work.arrival_s, prepend=0.0)
        mid = slice(n // 2 - n // 10, n // 2 + n // 10)
        gaps[mid] /= 20
        work = replace(work, arrival_s=np.cumsum(gaps))
    return simulate(work, Scenario(MODEL, GPU, max_num_seqs=32, max_num_batched_tokens=512, max_model_len=8192))


def test_verdicts_light_load_stable_a_drained_surge_backlogged_overload_overloaded():
    capacity = 3000 / _run(float("inf")).duration_s              # completions per second with everything queued
    assert _run(0.4 * capacity).verdict == "stable"
    assert _run(0.3 * capacity, surge=True).verdict == "backlogged"
    assert _run(1.5 * capacity).verdict == "overloaded"
    # the old test's blind spot: the overloaded replay drains, every request completes ...
    over = _run(1.5 * capacity)
    assert over.completed.all()
    # ... and the verdict is the summary's "saturated"
    assert summarize(over).saturated and not summarize(_run(0.4 * capacity)).saturated


def test_a_replay_shorter_than_its_requests_says_its_verdict_covers_the_burst_only():
    capacity = 3000 / _run(float("inf")).duration_s
    short = _run(1.5 * capacity, n=24)                  # fewer requests than max_num_seqs: none ever waits
    assert short.verdict == "stable" and _run(1.5 * capacity).verdict == "overloaded"
    window_s = float(np.ptp(short.workload.arrival_s))
    median_s = float(np.median(short.e2e_s))
    assert window_s < median_s
    note = summarize(short).window_note
    assert note.startswith(f"The 24 requests arrive over {window_s:,.1f} s, less than their median latency "
                           f"({median_s:,.1f} s)") and '"stable" describes this burst' in note
    assert summarize(short).notes == [note] and summarize(short).to_dict()["window_note"] == note
    assert summarize(_run(0.4 * capacity)).window_note is None              # a long window: the verdict holds
    assert summarize(_run(1.5 * capacity)).window_note is None              # overloaded needs no caveat


def test_a_run_a_search_stops_counts_only_the_requests_it_routed():
    from planner.sim.results import per_replica

    work = synthetic("requests=2000,input=2000,output=300,qps=200,seed=2")
    stopped = simulate(work, SCENARIO, fleet=Fleet(4, "least-loaded"), abort_wait_s=2.0)
    routed = stopped.replica >= 0
    assert 0 < routed.sum() < work.n                     # the arrivals after the stop were never routed
    assert [r.requests for r in per_replica(stopped)] == np.bincount(stopped.replica[routed], minlength=4).tolist()
    assert sum(r.requests for r in per_replica(stopped)) == routed.sum()


def test_a_queue_that_drains_between_whole_second_bursts_is_stable():
    # 60 requests stamped at each whole second for 100 s, each burst started 2 ms apart and gone in 0.12 s: the
    # last sample falls on the last burst, whose requests had no time to wait (counted, they read backlogged)
    arrival = np.repeat(np.arange(100.0), 60)
    started = arrival + np.tile(np.arange(60) * 0.002, 100)
    assert verdict(arrival, started, np.zeros(arrival.size, bool)) == "stable"
    # the same bursts, each served only once the next has arrived: a queue that stands and grows
    assert verdict(arrival, arrival + np.tile(np.arange(60) * 0.03, 100) * np.repeat(np.arange(1.0, 101.0), 60),
                   np.zeros(arrival.size, bool)) == "overloaded"


def test_tiny_and_one_instant_traces_get_sensible_verdicts():
    two = np.array([0.0, 0.05])
    assert verdict(two, two + np.array([0.0, 0.03]), np.zeros(2, bool)) == "stable"     # 2 requests: noise
    burst = np.zeros(3000)
    started = np.repeat(np.arange(30.0), 100)          # 100 start per step: the rest wait for later steps
    assert verdict(burst, started, np.zeros(3000, bool)) == "backlogged"
    assert verdict(burst, np.zeros(3000), np.zeros(3000, bool)) == "stable"
    assert verdict(burst, np.where(started < 20, started, np.nan), np.zeros(3000, bool)) == "overloaded"


def test_queue_p99_handles_requests_never_scheduled():
    work = synthetic("requests=101,input=100,output=5,qps=10,seed=1")
    result = simulate(work, SCENARIO)
    assert result.queue_p99_s() == pytest.approx(np.percentile(result.queue_s, 99))
    one_never = replace(result, first_scheduled=np.where(np.arange(101) == 100, np.nan, result.first_scheduled))
    # the 99th percentile of 101 values is the 100th smallest: the largest of the 100 that were scheduled
    assert one_never.queue_p99_s() == result.queue_s[:100].max()
    two_never = replace(result, first_scheduled=np.where(np.arange(101) >= 99, np.nan, result.first_scheduled))
    assert two_never.queue_p99_s() == np.inf


def test_a_request_larger_than_the_kv_pool_breaks_the_configuration():
    from planner.recommend.slo import SLOClass, holds, meets

    work = sorted_workload(np.arange(20) * 1.0, np.r_[np.full(19, 100), 7000], np.full(20, 5), "one huge")
    tight = SCENARIO.replace(num_gpu_blocks=100)            # 1,600 tokens: the 7,000-token prompt never fits
    result = simulate(work, tight)
    assert result.rejected.sum() == 1 and not result.too_long.any()
    assert "more KV blocks than the pool" in holds(result)
    assert not meets(result, SLOClass("throughput"))


def test_verdict_counts_requests_never_scheduled_as_waiting():
    arrival = np.linspace(0, 100, 400)
    started = np.where(arrival < 50, arrival + 0.1, np.nan)      # nothing starts after the first half
    assert verdict(arrival, started, np.zeros(400, bool)) == "overloaded"
    assert verdict(arrival, arrival + 0.1, np.zeros(400, bool)) == "stable"
    # rejected requests never queue
    assert verdict(arrival, started, arrival >= 50) == "stable"
