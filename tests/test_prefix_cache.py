"""vLLM V1's prefix cache in the simulator: cases whose hits are known exactly, the compiled loop against the
reference loop, the identity sources, and the fleet's prefix-aware routing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import compiled_v1

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.errors import PlannerError
from planner.scenario import Scenario
from planner.sim.engines import ENGINES, EngineSettings
from planner.sim.engines.base import FleetSpec
from planner.sim.fleet import Fleet
from planner.sim.prefix import PrefixIdentity, declared, from_hash_ids, from_sessions
from planner.sim import reference
from planner.sim.reference import run_reference
from planner.sim.results import summarize
from planner.sim.routers.base import ROUND_ROBIN
from planner.sim.run import simulate
from planner.sim.workload import SimWorkload, synthetic

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
COEFFS = Scenario(MODEL, GPU).coefficients.as_tuple()


def both_loops(arrival, prompt, output, identity, cfg):
    """The compiled loop's and the reference loop's runs of one workload, checked identical."""
    n = len(prompt)
    arrival, prompt, output = (np.asarray(a) for a in (arrival, prompt, output))
    fast = compiled_v1(arrival.astype(float), prompt.astype(np.int64), output.astype(np.int64), cfg, COEFFS,
                       FleetSpec(1, 0, np.full(n, -1, np.int64), 0, identity))
    slow = run_reference(arrival, prompt, output, cfg, COEFFS, identity.runs(prompt + output, cfg.block_size))
    for name in ("first_token", "finish", "first_scheduled", "preemptions", "rejected", "generated", "hits",
                 "rehits"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    assert fast.free_blocks_at_end == slow.free_blocks_at_end and fast.steps == slow.steps
    return fast


def spaced(n):
    return np.arange(n) * 1000.0          # each request long done before the next: no concurrency


def test_identical_prompts_hit_all_but_the_last_block():
    prompt, output = [160] * 4, [5] * 4
    identity = from_hash_ids([[7]] * 4, np.array(prompt))
    run = both_loops(spaced(4), prompt, output, identity, EngineSettings(8, 512, True, 16, 400, 4096))
    # floor((160 − 1)/16) = 9 blocks: a prompt of whole blocks still recomputes its last one
    assert run.hits.tolist() == [0, 144, 144, 144]


def test_sessions_hit_the_previous_turn_rounded_down_to_blocks():
    prompt, output = np.array([100, 150, 300]), np.array([20, 40, 10])
    identity = from_sessions(np.array([0, 0, 0]), prompt, output)
    assert identity.parent.tolist() == [-1, 0, 1] and identity.shared_tokens.tolist() == [0, 120, 190]
    run = both_loops(spaced(3), prompt, output, identity, EngineSettings(8, 512, True, 16, 400, 4096))
    # turn 2 shares 120 tokens, but turn 1 computed only 100 + 20 − 1 = 119 of them: 7 whole blocks; turn 3 shares
    # 190 of turn 2's 150 + 40 − 1 = 189 computed: 11 blocks
    assert run.hits.tolist() == [0, 7 * 16, 11 * 16]


def test_a_tree_of_sessions_shares_its_common_prefix():
    prompt = np.array([64, 96, 128, 40])
    identity = PrefixIdentity("sessions", np.array([-1, 0, 0, 0]), np.array([0, 64, 64, 40]),
                              np.empty(0, np.int64))
    run = both_loops(spaced(4), prompt, [8, 8, 8, 8], identity, EngineSettings(8, 512, True, 16, 400, 4096))
    assert run.hits.tolist() == [0, 64, 64, 32]    # the 40-token branch: floor(39/16) = 2 blocks


def test_a_declared_prefix_is_shared_by_its_share_of_requests():
    identity = declared(8, np.full(8, 200), 160, 0.5)
    assert (identity.parent >= 0).sum() == 4
    run = both_loops(spaced(8), [200] * 8, [3] * 8, identity, EngineSettings(8, 512, True, 16, 400, 4096))
    carriers = np.flatnonzero(identity.parent >= 0)
    assert run.hits[carriers].tolist() == [0, 160, 160, 160]
    assert run.hits[identity.parent < 0].sum() == 0
    # scattered, not every other request: round-robin over two replicas sends carriers to both (every second
    # request carrying it sent them all to one)
    carriers = np.flatnonzero(declared(1000, np.full(1000, 200), 160, 0.5).parent >= 0)
    assert carriers.size == 500 and 200 < (carriers % 2).sum() < 300


def test_a_pool_too_small_to_keep_anything_hits_nothing():
    # families A and B alternate; the pool holds one request's blocks, so each evicts the other's
    prompt = [160] * 6
    identity = from_hash_ids([[1], [2]] * 3, np.array(prompt))
    run = both_loops(spaced(6), prompt, [1] * 6, identity, EngineSettings(8, 512, True, 16, 10, 4096))
    assert run.hits.sum() == 0


def test_eviction_takes_a_chains_tail_first():
    # 13 blocks, one of them vLLM's null block. A: 10 full blocks, released last block first to the tail of the
    # free queue; B needs 5 blocks: the 2 never used, then A's blocks 9, 8, 7 (evicted). C repeats A: blocks 0-6
    # survive, capped at 9 anyway
    prompt = [160, 80, 160]
    identity = from_hash_ids([[1], [2], [1]], np.array(prompt))
    run = both_loops(spaced(3), prompt, [1, 1, 1], identity, EngineSettings(8, 512, True, 16, 13, 4096))
    assert run.hits.tolist() == [0, 0, 7 * 16]


def test_a_hit_on_a_running_request_shares_its_blocks():
    # B arrives while A still decodes: it shares A's prompt blocks (no new blocks for them), so both fit a pool
    # that could not hold two copies at once
    prompt, output = [320, 320], [100, 100]     # 27 blocks each at the end, 19 of them shared: 35 of 40
    identity = from_hash_ids([[5], [5]], np.array(prompt))
    run = both_loops([0.0, 0.01], prompt, output, identity, EngineSettings(8, 1024, True, 16, 40, 4096))
    assert run.hits.tolist() == [0, 304] and run.preemptions.sum() == 0
    assert run.first_token[1] < run.finish[0]          # B runs beside A
    alone = ENGINES["vllm-v1"].run(np.array([0.0, 0.01]), np.array(prompt), np.array(output),
                                   EngineSettings(8, 1024, True, 16, 40, 4096, prefix_caching=False), COEFFS, 1,
                                   FleetSpec(1, 0, np.full(2, -1, np.int64), 0, identity))
    assert alone.first_token[1] > alone.finish[0]      # without sharing B's 20 blocks wait for A's to free


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), blocks=st.integers(8, 200), seqs=st.integers(1, 12),
       budget=st.integers(8, 600), chunked=st.booleans(), block_size=st.sampled_from([1, 4, 16]),
       share=st.floats(0.0, 1.0), lagged=st.booleans())
def test_compiled_loop_with_caching_matches_the_reference(seed, n, blocks, seqs, budget, chunked, block_size, share,
                                                          lagged):
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.exponential(0.05, n).cumsum() * rng.integers(0, 2))
    prompt, output = rng.integers(1, 300, n), rng.integers(1, 150, n)
    parent, shared = np.full(n, -1), np.zeros(n, np.int64)
    for r in range(1, n):
        if rng.random() < share:
            p = int(rng.integers(0, r))
            parent[r] = p
            shared[r] = int(rng.integers(0, min(prompt[r], prompt[p] + output[p]) + 1))
    if not chunked:
        budget = max(budget, int(prompt.max() + output.max()))
    both_loops(arrival, prompt, output, PrefixIdentity("hash_ids", parent, shared, np.empty(0, np.int64)),
               EngineSettings(seqs, budget, chunked, block_size, blocks, 10_000, async_scheduling=lagged))


def test_duplicates_and_their_promotion_match_the_reference(monkeypatch):
    # concurrent requests computing the same blocks (each admitted before the other published them) cache
    # duplicates; evicting the first copy makes the oldest duplicate the one lookups find. The compiled pool keeps
    # duplicates on a slow path of its own, so the cases must contain both, which the reference loop counts here
    seen = {"duplicates": 0, "promotions": 0}
    publish, pop = reference.Pool.publish, reference.Pool.pop

    def counting_publish(pool, block, key):
        seen["duplicates"] += bool(pool.cached.get(key))
        publish(pool, block, key)

    def counting_pop(pool):
        block = next(iter(pool.free))
        holders = pool.cached.get(pool.key[block], [])
        seen["promotions"] += len(holders) > 1 and holders[0] == block
        return pop(pool)

    monkeypatch.setattr(reference.Pool, "publish", counting_publish)
    monkeypatch.setattr(reference.Pool, "pop", counting_pop)
    for seed in range(12):
        rng = np.random.default_rng(seed)
        n = 24
        prompt, output = rng.integers(100, 300, n), rng.integers(1, 80, n)
        parent = np.r_[-1, rng.integers(0, np.arange(1, n))]
        shared = np.r_[0, [rng.integers(0, min(prompt[r], prompt[parent[r]] + output[parent[r]]) + 1)
                           for r in range(1, n)]]
        both_loops(np.sort(rng.exponential(0.02, n).cumsum()), prompt, output,
                   PrefixIdentity("hash_ids", parent, shared.astype(np.int64), np.empty(0, np.int64)),
                   EngineSettings(6, 48, True, 4, 90, 10_000))
    assert seen["duplicates"] > 20 and seen["promotions"] > 5, seen


def test_each_replica_of_a_fleet_keeps_its_own_cache():
    # round-robin reads no replica state, so two replicas whose requests only share prefixes among themselves
    # (request r extends r − 2) run exactly as each half would alone: each pool is indexed by its replica only
    rng = np.random.default_rng(7)
    n = 40
    prompt, output = rng.integers(50, 300, n), rng.integers(1, 60, n)
    arrival = np.sort(rng.exponential(0.03, n).cumsum())
    parent = np.r_[-1, -1, np.arange(n - 2)]
    shared = np.r_[0, 0, [rng.integers(0, min(prompt[r], prompt[r - 2] + output[r - 2]) + 1) for r in range(2, n)]]
    identity = PrefixIdentity("hash_ids", parent, shared.astype(np.int64), np.empty(0, np.int64))
    cfg = EngineSettings(4, 128, True, 4, 70, 10_000)
    fleet = ENGINES["vllm-v1"].run(arrival, prompt.astype(np.int64), output.astype(np.int64), cfg, COEFFS, 1,
                                   FleetSpec(2, ROUND_ROBIN, np.full(n, -1, np.int64), 0, identity))
    assert fleet.hits.sum() > 0 and fleet.preemptions.sum() > 0
    for k in range(2):
        half = np.arange(n) % 2 == k
        alone = both_loops(arrival[half], prompt[half], output[half], identity.subset(half), cfg)
        for name in ("first_token", "finish", "preemptions", "hits", "rehits"):
            np.testing.assert_array_equal(getattr(fleet, name)[half], getattr(alone, name), err_msg=name)


def test_a_tight_pool_preempts_and_re_admitted_requests_find_their_own_blocks():
    rng = np.random.default_rng(4)
    n = 40
    prompt, output = rng.integers(100, 300, n), rng.integers(50, 150, n)
    identity = PrefixIdentity("hash_ids", np.r_[-1, np.zeros(n - 1, np.int64)], np.r_[0, np.full(n - 1, 100)],
                              np.empty(0, np.int64))
    run = both_loops(np.sort(rng.exponential(0.05, n).cumsum()), prompt, output, identity,
                     EngineSettings(8, 256, True, 4, 120, 10_000))
    assert run.preemptions.sum() > 0 and run.rehits.sum() > 0 and run.hits.sum() > 0


def scenario(**changes) -> Scenario:
    return Scenario(MODEL, GPU, **{"max_model_len": 8192, **changes})


def test_simulate_reports_hits_and_the_switch_turns_them_off():
    work = synthetic("requests=300,input=1200,output=50,qps=5,seed=1,prefix=1024:0.8")
    on = summarize(simulate(work, scenario()))
    off = summarize(simulate(work, scenario(prefix_caching=False)))
    carriers = int((work.prefix.parent >= 0).sum())
    assert carriers == 240
    assert on.prefix_cache["hit_tokens"] == (carriers - 1) * 1024 and on.prefix_cache["enabled"]
    assert on.prefix_cache["prompt_tokens"] == 300 * 1200
    assert off.prefix_cache["hit_tokens"] == 0 and not off.prefix_cache["enabled"]
    assert on.ttft_ms.p50 < off.ttft_ms.p50
    assert summarize(simulate(work, scenario(engine="tgi"))).prefix_cache["hit_tokens"] == 0


def test_a_preempted_request_finds_its_own_blocks_again_without_a_prefix_identity():
    # nothing shared, 1,500 blocks for long requests: vLLM V1 frees a preempted request's blocks into the cache and
    # finds them again on re-admission; the replay did so only for a trace with prefix identity
    from dataclasses import replace

    work = synthetic("requests=300,input=uniform:200:2000,output=uniform:200:2000,qps=6,seed=1")
    tight = scenario(num_gpu_blocks=1500)
    bare, own = (simulate(w, tight) for w in (work, replace(work, prefix=PrefixIdentity.unshared(work.n))))
    for name in ("first_token", "finish", "preemptions", "hit_tokens", "rehit_tokens"):
        np.testing.assert_array_equal(getattr(bare, name), getattr(own, name), err_msg=name)
    off = simulate(work, scenario(num_gpu_blocks=1500, prefix_caching=False))
    assert bare.hit_tokens.sum() == 0 and bare.rehit_tokens.sum() > 100_000
    assert bare.preemptions.sum() < off.preemptions.sum()
    assert np.nanpercentile(bare.finish - bare.workload.arrival_s, 99) < \
        np.nanpercentile(off.finish - off.workload.arrival_s, 99)
    # without a preemption its own keys change nothing: the replay keys them only when one happens
    light = synthetic("requests=200,input=uniform:200:2000,output=uniform:20:200,qps=2,seed=1")
    plain = ENGINES["vllm-v1"].run(light.arrival_s, light.input_tokens, light.output_tokens, tight.settings,
                                   COEFFS, 1000, FleetSpec(1, 0, np.full(light.n, -1, np.int64), 0))
    keyed = ENGINES["vllm-v1"].run(light.arrival_s, light.input_tokens, light.output_tokens, tight.settings,
                                   COEFFS, 1000, FleetSpec(1, 0, np.full(light.n, -1, np.int64), 0,
                                                           PrefixIdentity.unshared(light.n)))
    assert plain.preemptions.sum() == 0
    for name in ("first_token", "finish", "first_scheduled"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(keyed, name), err_msg=name)


def test_per_replica_stats_add_up_and_prefix_aware_routing_keeps_sessions_warm():
    rng = np.random.default_rng(2)
    sessions, turns = 60, 5
    prompt, group, arrival = [], [], []
    for s in range(sessions):
        length = int(rng.integers(200, 600))
        for t in range(turns):
            prompt.append(length)
            group.append(s)
            arrival.append(s * 0.5 + t * 8.0 + rng.random())
            length += 60 + int(rng.integers(50, 400))
    order = np.argsort(arrival, kind="stable")
    from planner.sim.workload import sorted_workload
    work = sorted_workload(np.array(arrival), np.array(prompt), np.full(len(prompt), 60), "sessions",
                           np.array(group))
    assert work.prefix.source == "sessions" and (work.prefix.parent >= 0).sum() == sessions * (turns - 1)
    assert order.size == work.n
    rates = {}
    for router in ("round-robin", "prefix-aware"):
        summary = summarize(simulate(work, scenario(), fleet=Fleet(4, router)))
        assert sum(r.prefix_cache["hit_tokens"] for r in summary.per_replica) == summary.prefix_cache["hit_tokens"]
        assert sum(r.prefix_cache["prompt_tokens"] for r in summary.per_replica) == \
            summary.prefix_cache["prompt_tokens"]
        rates[router] = summary.prefix_cache["hit_rate"]
    assert rates["prefix-aware"] > rates["round-robin"] + 0.3


def test_identity_follows_requests_through_resampling_and_truncation():
    identity = from_hash_ids([[1, 2], [1, 2], [1, 3], [4]], np.array([1024, 1024, 1000, 10]))
    assert identity.parent.tolist() == [-1, 0, 1, -1] and identity.shared_tokens.tolist() == [0, 1024, 512, 0]
    cut = identity.subset(np.array([False, True, True, True]))
    assert cut.parent.tolist() == [-1, 0, -1]          # the first request is gone, so its child shares nothing
    twice = identity.take(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]))
    assert twice.parent.tolist() == [-1, 0, -1, 2]     # copies share within their own copy only


def test_a_refused_prompt_leaves_the_prefix_it_shared_to_the_requests_after_it():
    # prompts of 10,240 tokens (past max_model_len 8,192: refused) and 2,560 alternate, all opening with the same
    # four ids: each short one's parent is the long one before it, whose own parent is the short one before that.
    # Cutting the refused ones out cut every short one off the 2,048 tokens they all share (hit rate 0)
    from dataclasses import replace

    prompt = np.where(np.arange(60) % 2 == 0, 10240, 2560)
    ids = [[1, 2, 3, 4] + [1000 * r + j for j in range(p // 512 - 4)] for r, p in enumerate(prompt.tolist())]
    identity = from_hash_ids(ids, prompt)
    assert identity.subset(prompt < 8192).parent.tolist() == [-1, *range(29)]
    assert identity.subset(prompt < 8192).shared_tokens.tolist() == [0] + [2048] * 29
    work = replace(synthetic("requests=60,input=2560,output=20,qps=1,seed=1"), input_tokens=prompt, prefix=identity)
    cache = summarize(simulate(work, scenario())).prefix_cache
    assert cache["hit_tokens"] == 29 * 2048 and cache["prompt_tokens"] == 30 * 2560      # hit rate 0.773


def test_a_subset_shares_with_the_nearest_kept_ancestor_as_a_walk_up_the_tree_finds():
    def walk(identity, keep):       # obviously right: climb one parent at a time, keeping the least shared
        position = {old: new for new, old in enumerate(np.flatnonzero(keep))}
        out = []
        for r in np.flatnonzero(keep):
            up, tokens = identity.parent[r], identity.shared_tokens[r]
            while up >= 0 and up not in position and tokens > 0:
                up, tokens = identity.parent[up], min(tokens, identity.shared_tokens[up])
            out.append((position[up], int(tokens)) if up >= 0 and tokens > 0 else (-1, 0))
        return out

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        parent = np.array([int(rng.integers(-1, r)) if r else -1 for r in range(n)])
        identity = PrefixIdentity("hash_ids", parent, np.where(parent >= 0, rng.integers(1, 5000, n), 0),
                                  np.empty(0, np.int64))
        keep = rng.random(n) < 0.6
        cut = identity.subset(keep)
        assert list(zip(cut.parent.tolist(), cut.shared_tokens.tolist(), strict=True)) == walk(identity, keep)


def test_hash_ids_match_as_sequences_from_the_first():
    def tree(ids):
        identity = from_hash_ids(ids, np.full(len(ids), 1024))
        return identity.parent.tolist(), identity.shared_tokens.tolist()

    # an id seen before at another place shares nothing: B's first block is not A's second
    assert tree([[1, 2], [2, 5]]) == ([-1, -1], [0, 0])
    # C shares A's first block, not B's tokens under id 4 (C's 4 follows 1, B's follows 3)
    assert tree([[1, 2], [3, 4], [1, 4]]) == ([-1, -1, 0], [0, 0, 512])
    assert tree([[1, 2], [3, 2]]) == ([-1, -1], [0, 0])


def test_a_declared_prefix_is_refused_where_the_trace_has_one():
    work = synthetic("requests=10,input=100,output=5,qps=1,prefix=50")
    with pytest.raises(PlannerError, match="already carries a prefix identity"):
        work.with_shared_prefix("20:0.5")
    with pytest.raises(PlannerError, match="expected TOKENS"):
        SimWorkload(work.arrival_s, work.input_tokens, work.output_tokens, "x").with_shared_prefix("lots")
