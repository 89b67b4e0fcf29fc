"""The simulator: the compiled vLLM V1 loop against the reference loop, conservation, and the seeds' directions."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import compiled_v1

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.scenario import Scenario
from planner.sim.cost_model import step_seconds
from planner.sim.engines import ENGINES, EngineSettings
from planner.sim.reference import run_reference
from planner.sim.results import SimulationSummary, summarize
from planner.sim.run import simulate
from planner.sim.workload import synthetic

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
COEFFS = Scenario(MODEL, GPU).coefficients.as_tuple()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), blocks=st.integers(8, 200), seqs=st.integers(1, 12),
       budget=st.integers(8, 600), chunked=st.booleans(), block_size=st.sampled_from([1, 4, 16]),
       lagged=st.booleans(), window=st.sampled_from([0, 1, 40, 250]))
def test_compiled_loop_matches_the_reference_exactly(seed, n, blocks, seqs, budget, chunked, block_size, lagged,
                                                     window):
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.exponential(0.05, n).cumsum() * rng.integers(0, 2))
    prompt = rng.integers(1, 300, n)
    output = rng.integers(1, 200, n)
    if not chunked:
        budget = max(budget, int(prompt.max() + output.max()))   # a whole re-prefill must fit the budget
    cfg = EngineSettings(seqs, budget, chunked, block_size, blocks, 10_000, async_scheduling=lagged)
    # a sliding window on two layers in three (its skips summed in the loops' own orders, decode runs among them)
    coeffs = replace(Scenario(MODEL, GPU).coefficients, window_tokens=float(window), window_share=2 / 3).as_tuple()
    fast = compiled_v1(arrival, prompt, output, cfg, coeffs)
    slow = run_reference(arrival, prompt, output, cfg, coeffs)
    for name in ("first_token", "finish", "first_scheduled", "preemptions", "rejected", "generated",
                 "free_blocks_at_end"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    assert fast.steps == slow.steps


@pytest.mark.parametrize("loop", ["compiled", "reference"])
def test_async_scheduling_admits_an_arrival_one_step_later(loop):
    # request 0 prefills alone in step 1 (0 → d1) and decodes in step 2; request 1 arrives during step 1. In sync
    # the scheduler sees it at d1; in async step 2's batch was fixed at 0, so it first runs in step 3 at d1 + d2.
    # A request reaching an idle engine is scheduled on arrival either way.
    arrival, prompt, output = np.array([0.0, 1e-4, 100.0]), np.array([100, 50, 50]), np.array([20, 5, 5])
    run = {}
    for lagged in (False, True):
        cfg = EngineSettings(8, 2048, True, 16, 400, 10_000, async_scheduling=lagged)
        run[lagged] = (compiled_v1(arrival, prompt, output, cfg, COEFFS) if loop == "compiled"
                       else run_reference(arrival, prompt, output, cfg, COEFFS))
    d1 = run[False].first_token[0]
    d2, _ = step_seconds.py_func(COEFFS, 0.0, 101.0, 1.0, 100.0, 1.0)      # one decode after 100 tokens
    assert run[True].first_token[0] == d1
    assert run[False].first_scheduled[1] == d1
    assert run[True].first_scheduled[1] == d1 + d2
    assert run[False].first_scheduled[2] == run[True].first_scheduled[2] == 100.0


def test_a_preempted_request_back_in_the_queue_does_not_stop_a_search():
    # five long decodes outgrow 700 blocks, and the last admitted is preempted about 20 s in: it ran, so a search's
    # bound on waiting (10 s here) must not read it as a request that waited since its arrival
    arrival, prompt, output = np.array([0, 0, 0, 0, 1e-3]), np.full(5, 64), np.full(5, 3000)
    whole, bounded = (ENGINES["vllm-v1"].run(arrival, prompt, output, EngineSettings(
        8, 2048, True, 16, 700, 100_000, abort_wait_s=bound), COEFFS, 1000) for bound in (np.inf, 10.0))
    assert whole.preemptions.sum() > 0 and np.nanmax(whole.first_scheduled - arrival) < 0.1
    np.testing.assert_array_equal(bounded.finish, whole.finish)
    # a request that did wait that long still stops it
    late = ENGINES["vllm-v1"].run(np.zeros(2), np.full(2, 64), np.full(2, 3000), EngineSettings(
        1, 2048, True, 16, 700, 100_000, abort_wait_s=10.0), COEFFS, 1000)
    assert np.isfinite(late.finish).sum() == 0 and np.isnan(late.first_scheduled[1])


@pytest.mark.parametrize("blocks, fails", [(50, True), (100, False)])
def test_a_v0_request_that_outgrows_the_pool_alone_fails_in_either_preemption_mode(blocks, fails):
    # 100 + 1,501 tokens need 100 blocks of 16 at the end: on 50 it preempts itself; recompute re-admits it too
    # long and fails it; swap swapped it out and in at one instant forever (vLLM's _can_swap answers NEVER)
    for mode in ("recompute", "swap"):
        cfg = EngineSettings(256, 4096, False, 16, blocks, 4096, preemption=mode, swap_s_per_block=1e-4)
        run = ENGINES["vllm-v0"].run(np.zeros(1), np.array([100]), np.array([1501]), cfg, COEFFS, 1000)
        assert bool(run.rejected[0]) is fails and bool(np.isnan(run.finish[0])) is fails
        # a failed request has no first token for TTFT to count, though it ran
        assert bool(np.isnan(run.first_token[0])) is fails and bool(np.isnan(run.first_scheduled[0])) is fails
        assert run.preemptions[0] == (1 if fails else 0)


def test_requests_larger_than_the_pool_are_said_to_be_rejected():
    # 140 + 10 tokens need 10 blocks of 16; a 10-block pool schedules 9 (vLLM's null block): all three refused,
    # which the summary said nothing about (its note named prompts past max_model_len only)
    work = synthetic("requests=3,input=140,output=10,qps=1,seed=1")
    summary = summarize(simulate(work, Scenario(MODEL, GPU, num_gpu_blocks=10)))
    assert (summary.rejected, summary.rejected_too_long, summary.completed) == (3, 0, 0)
    assert summary.rejection_note.startswith("3 of 3 requests were rejected: each needs more KV blocks than the "
                                             "10-block pool holds")
    assert summarize(simulate(work, Scenario(MODEL, GPU, num_gpu_blocks=11))).rejection_note is None


def small_kv(**changes) -> Scenario:
    base = dict(max_num_seqs=64, max_num_batched_tokens=512, num_gpu_blocks=400, max_model_len=8192)
    return Scenario(MODEL, GPU, **{**base, **changes})


@pytest.mark.parametrize("engine", list(ENGINES))
def test_conservation(engine):
    work = synthetic("requests=400,input=uniform:16:900,output=uniform:1:700,qps=40,seed=3")
    result = simulate(work, small_kv(max_new_tokens=700, engine=engine))
    done = np.isfinite(result.finish)
    assert done.sum() + result.rejected.sum() == work.n            # every request completes once or is rejected
    assert not result.rejected.any()
    # tokens: each completed request generated exactly its output; times are ordered
    assert np.all(result.first_scheduled[done] >= work.arrival_s[done])
    assert np.all(result.first_token[done] > result.first_scheduled[done])
    assert np.all(result.finish[done] >= result.first_token[done])
    assert np.all(result.timeline[:, 3] <= 400)                    # blocks never over-allocated ...
    # ... all freed (TRT: 32-token blocks; vLLM V1's BlockPool holds one null block out of its 400)
    assert result.free_blocks_at_end == {"trtllm": 200, "vllm-v1": 399}.get(engine, 400)
    np.testing.assert_array_equal(result.generated[done], result.workload.output_tokens[done])
    if engine in ("vllm-v1", "vllm-v0"):
        assert result.preemptions.sum() > 0                         # the small pool forces preemption ...
    elif engine != "tgi":                                           # (TGI re-queues per 1,024-token chunk)
        assert result.preemptions.sum() == 0                        # ... reservations never preempt


def test_blocks_are_all_freed_and_decode_steps_account_for_every_token():
    work = synthetic("requests=50,input=100,output=37,qps=inf")
    result = simulate(work, small_kv(max_num_seqs=50, max_num_batched_tokens=100_000, num_gpu_blocks=10_000))
    # all prompts prefill in one step, then 36 decode steps: 37 steps, everyone finishes together
    assert result.steps == 37 and len(set(result.finish)) == 1
    assert result.free_blocks_at_end == 10_000 - 1             # all but vLLM's null block
    summary = summarize(result)
    assert summary.throughput_tok_s["output"] == pytest.approx(50 * 37 / summary.duration_s)


def test_contract_summary_keys():
    work = synthetic("requests=200,input=512,output=uniform:64:1024,qps=8,arrival=gamma:2")
    obj = summarize(simulate(work, Scenario(MODEL, GPU, max_model_len=8192))).to_dict()
    for key in ("requests", "completed", "ttft_ms", "tpot_ms", "e2e_ms", "throughput_tok_s", "preemptions",
                "duration_s", "sim_wall_s", "saturated"):
        assert key in obj
    assert set(obj["throughput_tok_s"]) == {"input", "output", "total"}
    assert obj["requests"] == obj["completed"] == 200


def test_saturation_is_flagged_only_when_the_queue_grows():
    light = synthetic("requests=2000,input=512,output=256,qps=4,seed=1")
    heavy = synthetic("requests=2000,input=512,output=256,qps=200,seed=1")
    cfg = Scenario(MODEL, GPU, max_model_len=8192)
    assert not summarize(simulate(light, cfg)).saturated
    assert summarize(simulate(heavy, cfg)).saturated


# The seeds' scenario (seed 000/003): Llama-3-8B on an A100-80GB, 512 input tokens, 256 or 64-1024 output tokens.
def run_seed(output: str, seqs: int, qps: str = "inf", budget: int | None = None, engine: str = "vllm-v1",
             requests: int = 1500) -> SimulationSummary:
    work = synthetic(f"requests={requests},input=512,output={output},qps={qps},arrival=gamma:2,seed=2")
    return summarize(simulate(work, Scenario(MODEL, GPU, max_model_len=8192, max_num_seqs=seqs,
                                             max_num_batched_tokens=budget, engine=engine)))


def test_continuous_batching_is_far_ahead_of_static_when_lengths_vary():
    mixed = [run_seed("uniform:64:1024", 128, engine=e).throughput_tok_s["output"] for e in ("vllm-v1", "static")]
    fixed = [run_seed("256", 128, engine=e).throughput_tok_s["output"] for e in ("vllm-v1", "static")]
    assert mixed[0] > 1.5 * mixed[1]                 # padding and waiting for the longest member
    assert fixed[0] == pytest.approx(fixed[1], rel=0.05)   # equal lengths: nothing to pad


def test_throughput_flattens_while_tpot_climbs_with_max_num_seqs():
    runs = [run_seed("256", s) for s in (8, 16, 32, 64, 128, 256)]
    throughput = [r.throughput_tok_s["output"] for r in runs]
    tpot = [r.tpot_ms.p99 for r in runs]
    gains = np.diff(throughput) / np.array(throughput[:-1])
    assert throughput == sorted(throughput) and tpot == sorted(tpot)
    assert gains[0] > 0.5 and gains[-1] < 0.2 and np.all(np.diff(gains) < 0)   # diminishing returns
    assert tpot[-1] > 4 * tpot[0]


def test_a_smaller_token_budget_lowers_tpot_p99():
    tpot = [run_seed("256", 32, qps="6", budget=b, requests=3000).tpot_ms.p99 for b in (512, 2048)]
    assert tpot[0] < tpot[1]


def test_mixed_lengths_worsen_the_tail_at_equal_max_num_seqs():
    uniform, mixed = (run_seed(out, 32, qps="3", requests=3000) for out in ("256", "uniform:64:1024"))
    assert mixed.ttft_ms.p99 > 4 * uniform.ttft_ms.p99
    assert mixed.e2e_ms.p99 > uniform.e2e_ms.p99


def test_prediction_stand_in_has_the_stated_skill():
    from planner.sim.prediction import predicted_lengths

    output = np.maximum(np.rint(np.random.default_rng(0).lognormal(5, 1, 50_000)), 1)
    median, p95 = predicted_lengths(output, 0.95)
    r2 = np.corrcoef(np.log(median), np.log(output))[0, 1] ** 2
    assert r2 == pytest.approx(0.82, abs=0.03)
    assert np.mean(output <= p95) == pytest.approx(0.95, abs=0.02)      # calibrated quantile
    assert np.all(p95 >= median)


def test_the_seeds_remedies_under_kv_pressure():
    work = synthetic("requests=2000,input=uniform:100:3000,output=lognormal:5:1,qps=10,seed=3")

    def run(**remedy):
        return summarize(simulate(work, Scenario(MODEL, GPU, max_model_len=8192, gpu_memory_utilization=0.35,
                                                 **remedy)))
    lazy, p75, p95, shortest = run(), run(reserve_quantile=0.75), run(reserve_quantile=0.95), \
        run(priority="shortest-predicted")
    assert p95.preemptions < p75.preemptions < lazy.preemptions / 10   # reserving trades preemption ...
    assert p95.tpot_ms.p99 < lazy.tpot_ms.p99                          # ... for steadier decoding
    assert shortest.ttft_ms.p50 < lazy.ttft_ms.p50 / 5                  # short requests jump the queue
    assert shortest.ttft_ms.p99 > lazy.ttft_ms.p99                      # long ones starve


def test_every_jitted_module_keys_the_numba_cache():
    import hashlib
    import os
    from pathlib import Path

    import planner

    import re

    root = Path(planner.__file__).parent
    jitted = {p.relative_to(root).as_posix() for p in root.rglob("*.py") if "numba.njit" in p.read_text()}
    # what compiled code reads: the jitted modules and the modules whose constants they import (numba freezes
    # a global's value into the compiled code)
    read = set(jitted)
    for source in jitted:
        for module, names in re.findall(r"^from planner\.([\w.]+) import ([^\n(]+)", (root / source).read_text(),
                                        re.M):
            if any(re.fullmatch(r"[A-Z][A-Z0-9_]+", n.strip()) for n in names.split(",")):
                read.add(module.replace(".", "/") + ".py")
    assert read == set(planner.JIT_SOURCES)            # an edit to any of them selects a fresh compiled cache
    digest = hashlib.sha256(b"".join((root / s).read_bytes() for s in planner.JIT_SOURCES)).hexdigest()[:16]
    assert Path(os.environ["NUMBA_CACHE_DIR"]).name == digest


def test_shortest_predicted_admits_equal_keys_in_arrival_order():
    # one seat, r0 in it; r1 and r2 (predicted 5) and r3 (predicted 3) queue in that order: r3 first, then r1, r2
    # as vLLM's priority queue orders (priority, arrival). Swapping r3 with the head put r1 behind r2
    from planner.sim.engines.base import ONE_REPLICA
    from planner.sim.engines.vllm_v1 import usable_blocks
    from planner.sim.kernel import LAZY, simulate_kernel

    scenario = Scenario(MODEL, GPU, max_num_seqs=1, priority="shortest-predicted", max_model_len=2048)
    cfg = scenario.settings
    arrival, prompt = np.array([0.0, 0.001, 0.002, 0.003]), np.full(4, 32, np.int64)
    output, key = np.array([20, 5, 5, 5], np.int64), np.array([1.0, 5.0, 5.0, 3.0])
    out = simulate_kernel(arrival, prompt, output, np.full(4, 100, np.int64), scenario.coefficients.as_tuple(), 1,
                          cfg.max_num_batched_tokens, cfg.block_size, usable_blocks(cfg), True, 0, LAZY, 1, key, True,
                          np.inf, False, *ONE_REPLICA.kernel_args(cfg, prompt, output, False))
    first_scheduled = out[2]
    assert np.argsort(first_scheduled).tolist() == [0, 3, 1, 2]


@pytest.mark.parametrize("engine", ["vllm-v1", "vllm-v0", "static"])
def test_a_sliding_window_shortens_long_context_steps_in_every_engine(engine):
    # Mistral-7B v0.1 slides a 4,096-token window on every layer: prompts of 6,000 tokens decode as if 4,095 earlier
    # tokens were all they had. Without the window (its v0.2 successor's layout) each step reads them all.
    windowed = get_model("mistral-7b")
    full = replace(windowed, sliding_window=None, sliding_layers=0)
    work = synthetic("requests=8,input=6000,output=200,qps=inf")

    def run(model):
        return summarize(simulate(work, Scenario(model, GPU, max_model_len=8192, engine=engine)))
    fast, slow = run(windowed), run(full)
    assert fast.tpot_ms.p50 < 0.97 * slow.tpot_ms.p50
    assert fast.ttft_ms.p50 < slow.ttft_ms.p50          # the prefill past 4,096 tokens attends 4,096 keys each
    short = synthetic("requests=8,input=1000,output=200,qps=inf")   # never past the window: the same steps
    same = [summarize(simulate(short, Scenario(m, GPU, max_model_len=8192, engine=engine))) for m in (windowed, full)]
    assert same[0].e2e_ms.p99 == same[1].e2e_ms.p99
