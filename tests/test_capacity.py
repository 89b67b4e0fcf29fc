"""Reservation policies, padding, fit check, preemption cost, trace concurrency and the vLLM log reader."""

from dataclasses import replace

import numpy as np
import pytest

from planner.capacity.concurrency import fit_check, trace_concurrency
from planner.capacity.padding import expected_useful_fraction, useful_fraction
from planner.capacity.preemption import preemption_cost
from planner.capacity.reservation import (
    POLICIES,
    concurrency_ceiling,
    exceed_share,
    percentile_settings,
    seed_concurrency,
    tradeoff_table,
)
from planner.capacity.vllm_log import fit_overheads, overheads_from_log, parse_log
from planner.catalog.gpus import GiB, get_gpu
from planner.catalog.presets import get_model
from planner.errors import PlannerError
from planner.scenario import Scenario
from planner.sim.cost_model import predict_step
from planner.sim.run import simulate
from planner.sim.workload import SimWorkload

V019_LOG = """\
(EngineCore pid=243) DEBUG 04-22 01:47:26 [v1/worker/gpu_worker.py:284] worker init memory snapshot: torch_peak=0.0GiB, free_memory=78.68GiB, total_memory=79.19GiB, cuda_memory=0.51GiB
(EngineCore pid=243) INFO 04-22 01:47:37 [v1/worker/gpu_model_runner.py:4820] Model loading took 14.99 GiB memory and 9.803794 seconds
(EngineCore pid=243) INFO 04-22 01:47:55 [v1/worker/gpu_model_runner.py:5955] Estimated CUDA graph memory: 0.84 GiB total
(EngineCore pid=243) DEBUG 04-22 01:47:55 [v1/worker/gpu_worker.py:424] Initial free memory: 78.68 GiB; Requested memory: 0.950000 (util), 75.23 GiB
(EngineCore pid=243) DEBUG 04-22 01:47:55 [v1/worker/gpu_worker.py:435] Memory profiling takes 18.17 seconds. Total non KV cache memory: 17.12GiB; torch peak memory increase: 1.89GiB; non-torch forward increase memory: 0.25GiB; weights memory: 14.99GiB.
(EngineCore pid=243) INFO 04-22 01:47:55 [v1/worker/gpu_worker.py:436] Available KV cache memory: 58.11 GiB
(EngineCore pid=243) INFO 04-22 01:47:55 [v1/core/kv_cache_utils.py:1319] GPU KV cache size: 476,016 tokens
(EngineCore pid=243) INFO 04-22 01:47:55 [v1/core/kv_cache_utils.py:1324] Maximum concurrency for 16,384 tokens per request: 29.05x
"""  # noqa: E501  (llm-d-planner's published vLLM v0.19.0 log, Llama-3.1-8B-Instruct on an H100)

V0_LOG = ("INFO 01-22 worker.py:266] Memory profiling takes 5.1 seconds\n"
          "INFO worker.py:266] the current vLLM instance can use total_gpu_memory (79.14GiB) x "
          "gpu_memory_utilization (0.90) = 71.23GiB\nINFO worker.py:266] model weights take 14.99GiB; "
          "non_torch_memory takes 0.12GiB; PyTorch activation peak memory takes 1.19GiB; the rest of the memory "
          "reserved for KV Cache is 54.93GiB.\nINFO executor_base.py:108] # CUDA blocks: 28123, # CPU blocks: 2048\n")


def test_seed_page_formula_reproduces_its_table():
    # seed 002: 1,000 pages of 16 tokens -> ~125 / 31 / 7 concurrent requests at max_new_tokens 128 / 512 / 2048
    assert [seed_concurrency(1000, m) for m in (128, 512, 2048)] == [125, 31, 7]
    prompts, outputs = np.full(50, 300.0), np.full(50, 20.0)
    for max_new, expected in ((128, 125), (512, 31), (2048, 7)):
        ceiling = concurrency_ceiling(POLICIES["seed"], 16_000, prompts, outputs, max_new)
        assert int(ceiling) == expected


def test_engine_reservations_follow_their_rules():
    prompt, output = np.array([100.0, 2000.0]), np.array([50.0, 3000.0])
    assert list(POLICIES["vllm-v1"].peak_tokens(prompt, output, 4096, 16)) == [160.0, 5008.0]  # lazy: final length
    assert list(POLICIES["vllm-v1"].peak_tokens(prompt, output, 4096, 32)) == [160.0, 5024.0]  # the scenario's blocks
    # the last token sampled never enters the KV cache: 16 + 1 tokens hold one block, 16 + 2 two
    assert list(POLICIES["vllm-v1"].peak_tokens(np.array([16.0, 16.0]), np.array([1.0, 2.0]), 4096, 16)) == [16, 32]
    # TGI's reservation is its queue's input + max_new_tokens - 1: 16 + 17 tokens in two blocks of 16
    assert list(POLICIES["tgi"].peak_tokens(np.array([16.0]), np.array([17.0]), 17, 16)) == [32.0]
    assert list(POLICIES["trtllm"].peak_tokens(prompt, output, 512, 16)) == [640.0, 2528.0]    # prompt + max, 32s
    assert list(POLICIES["orca"].peak_tokens(prompt, output, 512, 16)) == [624.0, 2512.0]      # prompt + max
    assert list(POLICIES["tgi"].peak_tokens(prompt, output, 4096, 16)) == [1136.0, 5072.0]     # 1024-token chunks
    # SGLang: prompt + generated + ratio × min(what max_new still allows, 4096)
    sglang = POLICIES["sglang"].peak_tokens(prompt, output, 8192.0, 16)
    assert list(sglang) == pytest.approx([100 + 50 + 0.7 * 4096, 2000 + 3000 + 0.7 * 4096])
    decayed = POLICIES["sglang-decayed"].peak_tokens(prompt, output, 8192.0, 16)
    assert np.all(decayed < POLICIES["sglang"].peak_tokens(prompt, output, 8192.0, 16))
    assert {p.label for p in POLICIES.values() if p.simulated} >= {"vLLM V1 / vLLM V0 (historical)", "HF TGI"}


def test_the_reservation_view_is_the_engines_own_admission_rule():
    """The reserving engines admit by the rule the view applies: with every request arriving at once, the loop runs
    as many at once as the pool holds reservations made at admission (the view's hold of a request that has not
    generated yet: a one-token output)."""
    model, gpu = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
    prompt, output = np.full(64, 300), np.full(64, 2500)
    work = SimWorkload(np.zeros(64), prompt, output, "equal requests")
    for engine in ("tgi", "trtllm", "orca"):
        scenario = Scenario(model, gpu, engine=engine, num_gpu_blocks=4000, max_new_tokens=3000, max_model_len=8192)
        held = POLICIES[engine].peak_tokens(prompt[:1].astype(float), np.ones(1), 3000, scenario.block_size)[0]
        result = simulate(work, scenario)
        peak_running = int(result.timeline[:, 1].max())
        assert peak_running == min(scenario.max_num_seqs, int(4000 * 16 // held)), engine


def test_tradeoff_properties():
    rng = np.random.default_rng(0)
    prompt = rng.integers(10, 2000, 500).astype(float)
    output = np.minimum(rng.lognormal(5, 1, 500).round() + 1, 4000)
    rows = tradeoff_table(400_000, prompt, output, 16)
    for policy in POLICIES:
        series = [r for r in rows if r["policy"] == policy]
        ceilings = [r["concurrency"] for r in series]
        assert ceilings == sorted(ceilings, reverse=True), policy         # larger max_new never fits more
        if policy != "seed":                                              # the seed ignores the prompt
            assert all(r["over_reservation"] >= 1 - 1e-9 for r in series)
    vllm = [r for r in rows if r["policy"] == "vllm-v1"]
    assert all(r["over_reservation"] < 1.02 for r in vllm)                # only block rounding
    shares = [r["exceed_share"] for r in vllm]
    assert shares == sorted(shares, reverse=True)
    settings = percentile_settings(output)
    assert [s["percentile"] for s in settings] == [90, 95, 99]
    for s, p in zip(settings, (0.10, 0.05, 0.01), strict=True):
        assert s["exceed_share"] <= p
        assert exceed_share(output, s["max_new_tokens"] - 1) >= s["exceed_share"]


def test_padding_worked_example_and_expectation():
    # seed 003: 32 requests from 128 to 1,280 tokens, 22,400 real tokens -> 22,400 / 40,960 = 54.7% useful
    lengths = np.full(32, 700.0)
    lengths[0], lengths[1] = 128.0, 1280.0
    lengths[2] = 700 + (700 - 128) + (700 - 1280)
    assert lengths.sum() == 22_400 and useful_fraction(lengths) == pytest.approx(0.546875)
    assert useful_fraction(np.full(8, 300.0)) == 1.0
    rng_lengths = np.random.default_rng(1).lognormal(6, 1, 5000)
    means = [expected_useful_fraction(rng_lengths, b)["mean"] for b in (1, 4, 16, 64)]
    assert means[0] == 1.0 and means == sorted(means, reverse=True)


def test_fit_check_explains_the_seeds_70b_on_two_a100s():
    llama70 = Scenario(get_model("llama-3-70b"), get_gpu("a100-80gb-sxm"))
    check = fit_check(llama70, sequences=32, tokens=4096)
    assert check.tp == 4
    by_tp = {t["tp"]: t for t in check.tried}
    assert "no room for KV" in by_tp[1]["reason"]
    assert by_tp[2]["sequences_fit"] < 32 and "short of 32" in by_tp[2]["reason"]
    assert by_tp[4]["sequences_fit"] >= 100          # the seed's ≈116 at 4K on 4 GPUs, less vLLM's overheads
    # the scenario's own dtypes and block size: fp8 weights and KV fit 32 sequences on two GPUs; the blocks each
    # TP degree reports are its plan's
    fp8 = fit_check(llama70.replace(weight_dtype="fp8", kv_cache_dtype="fp8", block_size=32), 32, 4096)
    assert fp8.tp == 2
    assert fp8.tried[-1]["sequences_fit"] == llama70.replace(
        tp=2, weight_dtype="fp8", kv_cache_dtype="fp8", block_size=32, max_model_len=4096).memory.num_blocks // 128


def test_fit_check_keeps_overheads_fitted_from_a_log_and_scales_its_weights():
    parsed = parse_log(V019_LOG)
    scenario = Scenario(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), gpu_memory_utilization=0.95,
                        overheads=fit_overheads(parsed, int(np.ceil(parsed.total_bytes * 0.95))))
    check = fit_check(scenario, sequences=1, tokens=8192)
    assert check.tp == 1
    assert check.tried[0]["kv_pool_gib"] == pytest.approx(58.11, abs=0.006)      # the log's pool, not an estimate
    at_two = fit_check(scenario, sequences=10_000, tokens=8192).tried[1]
    assert at_two["tp"] == 2 and at_two["kv_pool_gib"] == pytest.approx(58.11 + 14.99 / 2, abs=0.01)


def test_trace_concurrency_uses_whole_blocks_and_names_the_binding_limit():
    plan = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), num_gpu_blocks=1000).memory
    # final lengths, whose last token holds no KV: 17 tokens hold one block, 18 two
    got = trace_concurrency(plan, np.array([1.0, 17.0, 18.0, 33.0]))
    assert got["concurrency_at_mean"] == pytest.approx(16_000 / np.mean([16, 16, 32, 32]))
    assert got["binding"] == "max_num_seqs"          # 666 fit by KV, but only 256 sequences are scheduled


def test_preemption_costs_are_the_cost_models_and_the_engines():
    scenario = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"))
    lengths = np.arange(16, 8192 + 1, 16, dtype=float)
    cost = preemption_cost(scenario, lengths)
    assert np.all(np.diff(cost["recompute_s"]) > 0) and np.all(np.diff(cost["swap_s"]) > 0)
    # recompute is one prefill step as the cost model prices it; swap is the V0 engine's per-block cost, twice
    for n in (16, 1024, 8192):
        step = predict_step(scenario, [(n, 0)], [])["step_ms"] / 1e3
        assert cost["recompute_s"][int(n // 16) - 1] == pytest.approx(step, rel=1e-12)
    assert np.allclose(cost["swap_s"], 2 * np.ceil(lengths / 16) * scenario.settings.swap_s_per_block, rtol=1e-12)
    # a step reads every weight: a short sequence costs a whole weight read to recompute and little to swap
    assert cost["swap_s"][0] < cost["recompute_s"][0]
    slow_host = scenario.replace(gpu=replace(scenario.gpu, pcie_bytes_s=scenario.gpu.pcie_bytes_s / 20))
    slow = preemption_cost(slow_host, lengths)
    crossing = slow["crossover_tokens"]
    assert crossing is not None and 16 < crossing < 8192 and not slow["swap_cheaper_above"]
    i = int(np.searchsorted(lengths, crossing))
    assert slow["swap_s"][i - 1] < slow["recompute_s"][i - 1] and slow["swap_s"][i] >= slow["recompute_s"][i]


def test_log_reader_reproduces_the_servers_kv_capacity():
    parsed = parse_log(V019_LOG)
    assert parsed.total_bytes == round(79.19 * GiB) and parsed.utilization == 0.95
    assert parsed.kv_tokens == 476_016 and parsed.max_model_len == 16_384 and parsed.max_concurrency == 29.05
    h100 = get_gpu("h100-sxm")
    overheads = fit_overheads(parsed, int(np.ceil(parsed.total_bytes * 0.95)))
    plan = Scenario(get_model("llama-3.1-8b"), h100, gpu_memory_utilization=0.95, max_model_len=16384,
                       overheads=overheads).memory
    assert plan.kv_pool_bytes / GiB == pytest.approx(58.11, abs=0.006)
    assert plan.kv_capacity_tokens == pytest.approx(476_016, rel=1e-3)
    assert plan.max_concurrency == pytest.approx(29.05, abs=0.01)


def test_a_pasted_log_is_fitted_at_its_own_utilization_on_the_release_given_and_its_gpu_only():
    h100 = get_gpu("h100-sxm")
    model = get_model("llama-3.1-8b")
    pools = {}
    for util in (0.85, 0.9, 0.95, 0.98):
        gpu, overheads = overheads_from_log(V019_LOG, h100, util, "0.15")
        assert overheads.vllm_version == "0.15"          # the release asked for, not "current"
        plan = Scenario(model, gpu, gpu_memory_utilization=util, max_model_len=16384, overheads=overheads).memory
        pools[util] = plan.kv_pool_bytes
    # the log ran at 0.95: there it reproduces the logged pool; elsewhere the pool moves by the memory added
    assert pools[0.95] / GiB == pytest.approx(58.11, abs=0.006)
    for util, pool in pools.items():
        assert pool - pools[0.95] == pytest.approx((util - 0.95) * round(79.19 * GiB), abs=2)
    # the log's 79.19 GiB is not an A100 40GB's 39.50: refused, not taken as that GPU's memory
    with pytest.raises(PlannerError, match="the logged GPU has 79.19 GiB, but a100-40gb-sxm has 39.50 GiB"):
        overheads_from_log(V019_LOG, get_gpu("a100-40gb-sxm"), 0.9)


def test_v0_log_wording():
    parsed = parse_log(V0_LOG)
    assert parsed.total_bytes == round(79.14 * GiB) and parsed.activation_bytes == round(1.19 * GiB)
    assert parsed.num_blocks == 28123 and parsed.kv_pool_bytes == round(54.93 * GiB)
    overheads = fit_overheads(parsed, int(np.ceil(parsed.total_bytes * 0.9)))
    assert overheads.non_torch_bytes == round(0.12 * GiB)
    with pytest.raises(Exception, match="lacks"):
        fit_overheads(parse_log("nothing useful here"), 10 * GiB)


def test_a_whole_prompt_server_gets_its_concurrency_curve_and_fit_check():
    from planner.capacity.report import capacity_report

    # a budget that holds exactly its 4,096-token prompts: the longer contexts of the curve need a longer budget,
    # as vLLM would ask; they were refused, and `memory` and `report` with them
    whole = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), chunked_prefill=False,
                     max_num_batched_tokens=4096, max_model_len=4096)
    curve = {row["max_model_len"]: row["max_concurrency"] for row in capacity_report(whole).concurrency_curve}
    longest = whole.replace(max_model_len=8192, max_num_batched_tokens=8192).memory.max_concurrency
    assert curve[8192] == longest and curve[4096] == whole.memory.max_concurrency
    assert fit_check(whole, 4, 8192).tried[0]["sequences_fit"] > 4


def test_the_fit_check_counts_a_sliding_window_as_vllm_does():
    # Mistral-7B holds only its 4,096-token window (plus a step's tokens) per layer: 385 blocks a 32k sequence,
    # not the 2,048 of the whole context
    mistral = Scenario(get_model("mistral-7b"), get_gpu("a100-80gb-sxm"), max_model_len=32768)
    first = fit_check(mistral, 1, 32768).tried[0]
    assert first["tp"] == 1 and first["sequences_fit"] == int(mistral.memory.max_concurrency)
    assert first["sequences_fit"] == mistral.memory.num_blocks // 385 > mistral.memory.num_blocks // 2048
