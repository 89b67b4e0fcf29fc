"""The step-time cost model against the reference worked examples, its monotonicity, and calibration."""

import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import ROOT, cli_json, run_cli

from planner.capacity.memory import Overheads
from planner.catalog.gpus import DEFAULT_ROOFLINE_P, GPUS, get_gpu
from planner.catalog.models import weights_bytes
from planner.catalog.presets import from_hf_config, get_model
from planner.errors import PlannerError
from planner.scenario import Scenario
from planner.sim.calibration import fit_points, predict_points, read_points
from planner.sim.calibration_file import params_from_json
from planner.sim.cost_model import CostParams, predict_step, step_seconds
from planner.sim.step_spec import batch_aggregates, window_skips
from planner.sim.run import simulate
from planner.sim.trace_calibration import fit_trace
from planner.sim.workload import synthetic

LLAMA8, LLAMA70, A100 = get_model("llama-3-8b"), get_model("llama-3-70b"), get_gpu("a100-80gb-sxm")
# the reference's arithmetic is the ideal roofline, max(compute, memory): a very sharp knee
MBU08 = CostParams(mbu=0.8, step_overhead_s=0.0, seq_overhead_s=0.0, roofline_p=64.0)


def S(model=LLAMA8, gpu=A100, **fields) -> Scenario:
    return Scenario(model, gpu, **fields)


def test_reference_worked_examples():
    # performance-models.md §3 (A100-80GB SXM, bf16, η = 0.8)
    # ≈ 15–16 ms there, streaming all 16.06 GB; the input embedding table (1.05 GB) is gathered, not streamed
    decode = predict_step(S(cost=MBU08), [], [(64, 1024)])
    table_ms = 128256 * 4096 * 2 / (0.8 * 2039e9) * 1e3
    assert decode["bound"] == "memory" and decode["step_ms"] == pytest.approx(15.1 - table_ms, abs=0.5)
    # ≈ 0.16 s there, counting 2 · all 8.03B parameters per token; the embedding lookup costs no FLOPs and the
    # output head runs only for the sampled position: 2 · 6.98B · 2048 + causal attention 1.1 TFLOP
    prefill = predict_step(S(cost=CostParams(mfu=0.7, roofline_p=64.0)), [(2048, 0)], [])
    flops = 2 * (8_030_261_248 - 2 * 128256 * 4096) * 2048 + 4 * 32 * 4096 * 2048 * 2049 / 2 + 2 * 128256 * 4096
    assert prefill["bound"] == "compute"
    assert prefill["compute_ms"] == pytest.approx(flops / (0.7 * 312e12) * 1e3, rel=1e-9)
    assert 130 < prefill["step_ms"] < 160
    mixed_2048 = predict_step(S(cost=CostParams(mfu=0.7, roofline_p=64.0)), [(1984, 0)], [(64, 1024)])
    mixed_512 = predict_step(S(cost=CostParams(mfu=0.7, roofline_p=64.0)), [(448, 0)], [(64, 1024)])
    assert 125 < mixed_2048["step_ms"] < 160 and 30 < mixed_512["step_ms"] < 40           # ≈ 155 / ≈ 38 ms
    tp4 = predict_step(S(LLAMA70, tp=4, cost=CostParams(mbu=0.8, roofline_p=64.0)), [], [(32, 2048)])
    assert 26 <= tp4["step_ms"] <= 35                                                            # ≈ 28–33 ms


def test_a_step_streams_the_output_head_but_gathers_an_untied_input_embedding():
    # Llama-3-8B (untied, vocab 128,256 × hidden 4,096): each GPU streams its weights less its shard of the input
    # table; Gemma-2-9B ties its table to the output head, which every step reads whole
    for tp in (1, 2):
        c = S(tp=tp).coefficients
        assert c.weight_bytes == -(-weights_bytes(LLAMA8) // tp) - 128256 // tp * 4096 * 2
    gemma = get_model("gemma-2-9b")
    assert gemma.tied_embeddings and S(gemma).coefficients.weight_bytes == weights_bytes(gemma)
    # so a 1-sequence decode of Llama-3-8B reads 15.0 GB (and its one KV row), not 16.06 GB: 6.5% less
    one = predict_step(S(cost=MBU08), [], [(1, 0)])
    assert one["memory_ms"] == pytest.approx((weights_bytes(LLAMA8) - 128256 * 4096 * 2 + 131072)
                                             / (0.8 * 2039e9) * 1e3, rel=1e-9)


def test_the_a100s_knee_matches_its_measured_gemms_at_the_mfu_the_model_applies():
    from planner.sim.cost_model import _busy

    # performance-models.md §2, Vidur A100 Llama-3-8B mlp_up_proj (117.4M params, 235 MB): 0.142 ms at 1 token
    # (memory), 128 tokens measured at ~1.3x the 1-token time. The model's compute side is at the A100's MFU (0.55),
    # not the GEMM's own 75%: there its knee (8) gives 1.26x, where p = 2 gives 1.59x (22% slow)
    memory_ms, compute_ms = 0.142, 2 * 117.4e6 * 128 / (A100.mfu * 312e12) * 1e3
    assert A100.mfu == 0.55 and A100.roofline_p == 8.0
    assert _busy(compute_ms, memory_ms, A100.roofline_p) / memory_ms == pytest.approx(1.3, rel=0.05)
    assert _busy(compute_ms, memory_ms, 2.0) / memory_ms == pytest.approx(1.587, rel=1e-3)
    assert _busy(compute_ms, memory_ms, 64.0) / memory_ms == pytest.approx(compute_ms / memory_ms, rel=1e-3)
    far = 2 * 117.4e6 * 4096 / (0.55 * 312e12) * 1e3
    assert _busy(far, memory_ms, 2.0) == pytest.approx(far, rel=1e-3)                # far from the ridge: compute
    # the catalog's knees are taken by square roots in the simulator's loop: the same as the power formula
    for p in (2.0, 3.0, 4.0, 8.0):
        for c, m in ((compute_ms, memory_ms), (memory_ms, compute_ms), (far, memory_ms), (1.0, 1.0)):
            assert _busy(c, m, p) == pytest.approx((c ** p + m ** p) ** (1 / p), rel=1e-14)
    # and a whole step: the smooth knee adds at most sqrt(2)-1 over the ideal roofline, most at the ridge
    smooth = predict_step(S(cost=replace(MBU08, roofline_p=2.0)), [], [(64, 1024)])
    assert smooth["memory_ms"] < smooth["step_ms"] <= smooth["memory_ms"] * 2 ** 0.5
    assert smooth["overlap_loss_ms"] == pytest.approx(smooth["step_ms"] - smooth["memory_ms"])


def test_step_time_grows_with_work_and_shrinks_with_efficiency():
    c = S().coefficients.as_tuple()
    times = [step_seconds(c, *batch_aggregates([], [(b, 1024)]))[0] for b in (1, 8, 64, 256)]
    assert times == sorted(times)
    chunks = [step_seconds(c, *batch_aggregates([(n, 4096)], []))[0] for n in (64, 512, 2048)]
    assert chunks == sorted(chunks)
    later = step_seconds(c, *batch_aggregates([(512, 8192)], []))[0]
    assert later > step_seconds(c, *batch_aggregates([(512, 0)], []))[0]       # attention over earlier context
    faster = S(cost=CostParams(mfu=0.8)).coefficients.as_tuple()
    assert step_seconds(faster, *batch_aggregates([(2048, 0)], []))[0] < chunks[-1]
    fp8 = S(kv_cache_dtype="fp8").coefficients.as_tuple()
    assert step_seconds(fp8, *batch_aggregates([], [(256, 4096)]))[0] < step_seconds(
        c, *batch_aggregates([], [(256, 4096)]))[0]
    moe = predict_step(S(get_model("mixtral-8x7b"), tp=2), [(2048, 0)], [])
    dense_equivalent = predict_step(S(LLAMA70, tp=2), [(2048, 0)], [])
    assert moe["compute_ms"] < dense_equivalent["compute_ms"] / 3            # 12.9B active vs 70B
    assert predict_step(S(gpu=get_gpu("h100-sxm")), [(2048, 0)], [])["step_ms"] < prefill_ms()


def prefill_ms():
    return predict_step(S(), [(2048, 0)], [])["step_ms"]


def test_step_cli_contract(tmp_path):
    db = tmp_path / "s.duckdb"
    obj = cli_json("step", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--prefill", "512x4",
                   "--prefill", "512@1024", "--decode", "16x640", db=db)
    assert set(obj) >= {"step_ms", "bound"} and obj["bound"] in ("compute", "memory", "overhead")
    expected = predict_step(S(), [(512, 0)] * 4 + [(512, 1024)], [(16, 640)])
    assert obj["step_ms"] == pytest.approx(expected["step_ms"])
    bad = run_cli("step", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--decode", "16", "--json", db=db,
                  check=False)
    assert bad.returncode == 2 and "COUNTxCONTEXT" in bad.stderr


TRUTH = CostParams(mfu=0.42, mbu=0.68, step_overhead_s=3e-4, seq_overhead_s=8e-6)


def measured_points(path, truth=TRUTH):
    c = S(cost=truth).coefficients.as_tuple()
    rows = ["prefill_tokens,prefill_count,decode_count,decode_context,step_ms"]
    for p in (128, 512, 2048):
        for count in (1, 4):
            rows.append(f"{p},{count},0,0,{step_seconds.py_func(c, *batch_aggregates([(p, 0)] * count, []))[0] * 1e3}")
    for count in (1, 16, 64, 256):
        for ctx in (256, 2048):
            rows.append(f"0,0,{count},{ctx},{step_seconds.py_func(c, *batch_aggregates([], [(count, ctx)]))[0] * 1e3}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_calibration_from_iterations_recovers_the_parameters(tmp_path):
    fit = fit_points(S(), read_points(measured_points(tmp_path / "p.csv")))
    for key in ("mfu", "mbu", "step_overhead_s", "seq_overhead_s"):
        assert fit["params"][key] == pytest.approx(getattr(TRUTH, key), rel=0.05)
    assert fit["params"]["roofline_p"] == pytest.approx(A100.roofline_p, rel=0.05)     # the knee the rows ran at
    assert fit["mape"] < 1e-4
    # a server whose steps near the ridge cost compute plus memory (the knee's bottom, 1) is fitted there, and the
    # fit does not call that end of the range a failure to follow the data
    added = fit_points(S(), read_points(measured_points(tmp_path / "p1.csv", replace(TRUTH, roofline_p=1.0))))
    assert added["params"]["roofline_p"] == pytest.approx(1.0, abs=1e-6) and added["mape"] < 1e-6
    assert not any("roofline_p ended at" in w for w in added["warnings"])


def test_steps_no_server_of_the_scenario_runs_are_said(tmp_path):
    # 5,000 sequences of 8,000 tokens (80x the pool, 20x max_num_seqs) were fitted and written without a word
    path = tmp_path / "p.csv"
    path.write_text("prefill_tokens,prefill_count,decode_count,decode_context,step_ms\n512,1,0,0,40\n"
                    "2048,1,0,0,150\n0,0,8,512,15\n0,0,64,1024,20\n0,0,5000,8000,4000\n0,0,128,256,19\n"
                    "0,0,300,100,25\n")
    assert fit_points(S(), read_points(path))["warnings"][0] == (
        "line 6 (and 1 more) holds 5,000 sequences, more than max_num_seqs 256 and 2,505,000 KV blocks, more than "
        f"the {S().memory.num_blocks:,} of the pool: no server of this scenario runs that step, so it was timed on "
        "another (check --max-num-seqs and the memory flags against the measured server's) or the row is mistyped")
    # a blank line keeps the lines after it numbered as in the file
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], "", *lines[3:]]) + "\n")
    assert fit_points(S(), read_points(path))["warnings"][0].startswith("line 7 (and 1 more) holds 5,000 sequences")
    with pytest.raises(PlannerError, match=r"--points: line 7 holds a sequence longer than"):
        fit_points(S(max_model_len=4096), read_points(path))
    path.write_text("\n".join(lines[:5] + lines[6:7]) + "\n")
    assert not any("no server of this scenario" in w for w in fit_points(S(), read_points(path))["warnings"])
    proc = run_cli("step", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--decode", "300x100", "--json",
                   db=tmp_path / "s.duckdb")
    assert proc.stderr == ("warning: this step holds 300 sequences, more than max_num_seqs 256: the server never "
                           "runs it, so its time is extrapolated\n")


def test_calibration_from_a_simulated_trace_recovers_mfu_and_mbu():
    truth = CostParams(mfu=0.42, mbu=0.68)
    work = synthetic("requests=600,input=uniform:100:2000,output=uniform:20:400,qps=4,seed=5")
    cfg = S(max_model_len=8192)
    replay = simulate(work, cfg.replace(cost=truth))
    fit = fit_trace(cfg, work, replay.ttft_s, replay.tpot_s)
    assert fit["params"]["mfu"] == pytest.approx(0.42, rel=0.05)
    assert fit["params"]["mbu"] == pytest.approx(0.68, rel=0.05)


def test_calibrate_cli_round_trip(tmp_path):
    db = tmp_path / "c.duckdb"
    out = tmp_path / "cal.json"
    obj = cli_json("calibrate", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--points",
                   str(measured_points(tmp_path / "p.csv")), "-o", str(out), db=db)
    assert obj["path"] == str(out) and obj["mape"] < 1e-3 and obj["params"]["mfu"] == pytest.approx(0.42, rel=0.05)
    assert json.loads(out.read_text())["params"]["mbu"] == pytest.approx(0.68, rel=0.05)
    calibrated = cli_json("step", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--decode", "64x2048",
                          "--calibration", str(out), db=db)
    c = S(cost=TRUTH).coefficients.as_tuple()
    assert calibrated["step_ms"] == pytest.approx(step_seconds(c, *batch_aggregates([], [(64, 2048)]))[0] * 1e3,
                                                  rel=0.01)
    bad = tmp_path / "bad.csv"
    bad.write_text("prefill_tokens,step_ms\n1,2\n")
    proc = run_cli("calibrate", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--points", str(bad), "-o",
                   str(out), "--json", db=db, check=False)
    assert proc.returncode == 2 and "lacks columns" in proc.stderr
    with pytest.raises(PlannerError):
        fit_trace(S(max_model_len=8192), synthetic("requests=3,input=5,output=5,qps=1"), np.full(3, np.nan),
                  np.full(3, np.nan))


def test_a_calibration_carries_only_what_it_fitted_and_says_what_does_not_transfer(tmp_path):
    db = tmp_path / "c.duckdb"
    out = tmp_path / "cal.json"
    obj = cli_json("calibrate", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--points",
                   str(measured_points(tmp_path / "p.csv")), "-o", str(out), db=db)
    assert obj["fitted"] == ["mfu", "mbu", "step_overhead_s", "seq_overhead_s", "roofline_p"]
    body = json.loads(out.read_text())
    assert (body["model"], body["gpu"], body["tp"], body["engine"]) == ("llama-3-8b", "a100-80gb-sxm", 1, "vllm-v1")
    # what the A100 and V1 gave the fit (its all-reduce floor, V1's TP hand-over) is not frozen in; the knee the
    # rows set is the file's
    assert [body["params"][k] for k in ("allreduce_latency_s", "tp_step_overhead_s")] == [None] * 2
    assert body["params"]["roofline_p"] == pytest.approx(A100.roofline_p, rel=0.05)
    fitted = {k: body["params"][k] for k in obj["fitted"]}
    # applied to an H100 pair under V0, it takes that server's all-reduce floor and Ray hand-over (7 ms), and
    # keeps its measured knee (not the H100's 4)
    proc = run_cli("step", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tp", "2", "--engine", "vllm-v0",
                   "--decode", "64x2048", "--calibration", str(out), "--json", db=db)
    there = S(gpu=get_gpu("h100-sxm"), tp=2, engine="vllm-v0", cost=CostParams(**fitted))
    assert there.coefficients.roofline_p == fitted["roofline_p"] != get_gpu("h100-sxm").roofline_p
    assert there.coefficients.step_overhead_s == pytest.approx(fitted["step_overhead_s"] + 7e-3)
    expected = predict_step(there, [], [(64, 2048)])["step_ms"]
    assert json.loads(proc.stdout)["step_ms"] == pytest.approx(expected, rel=1e-9)
    # and says, once each, what of the A100 TP 1 V1 measurement does not carry over
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 3
    assert "fitted on a100-80gb-sxm and is applied to h100-sxm" in warnings[0]
    assert "fitted under vllm-v1 and is applied to vllm-v0" in warnings[1]
    assert "fitted at TP 1 and is applied at TP 2" in warnings[2]
    # on the measured server itself: nothing to say
    same = run_cli("step", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--decode", "64x2048",
                   "--calibration", str(out), "--json", db=db)
    assert "warning" not in same.stderr
    assert obj["resolved"]["roofline_p"] == fitted["roofline_p"] and obj["resolved"]["tp_step_overhead_s"] == 0.0
    # a file the code before the fitted names wrote: no engine, no "fitted", and the measured server's knee,
    # all-reduce floor and (here V0's) TP hand-over frozen in; they are released, and what it fitted is inferred
    old = {**{k: v for k, v in body.items() if k not in ("engine", "fitted")},
           "params": {**body["params"], "roofline_p": 2.0, "allreduce_latency_s": 2.5e-05, "tp_step_overhead_s": 7e-3}}
    params = params_from_json(json.dumps(old), "old.json")
    # those fits set four parameters (the knee was fitted since 2026-12-06)
    assert params.fitted_on.engine is None and params.fitted_on.fitted == tuple(obj["fitted"][:4])
    assert (params.roofline_p, params.allreduce_latency_s, params.tp_step_overhead_s) == (None, None, None)
    assert S(tp=2, cost=params).coefficients.step_overhead_s == pytest.approx(fitted["step_overhead_s"])
    # another model and TP: both said, the engine not (unknown)
    warned = S(LLAMA70, tp=4, engine="vllm-v0", cost=params).calibration_warnings
    assert len(warned) == 2 and warned[0].startswith("the calibration was fitted at TP 1 and is applied at TP 4")
    assert "fitted on llama-3-8b and is applied to llama-3-70b" in warned[1]
    # a hand-written file keeps what it sets, and says nothing of a server it does not name
    hand = params_from_json(json.dumps({"params": {"mfu": 0.5, "roofline_p": 3.0}}), "hand.json")
    assert hand.roofline_p == 3.0 and hand.fitted_on is None and S(cost=hand).calibration_warnings == ()
    # any knee from 64 up is the ideal max, and a file may say so with a larger p; below 1 is no roofline
    sharp = S(cost=params_from_json(json.dumps({"params": {"roofline_p": 100.0}}), "sharp.json"))
    assert predict_step(sharp, [], [(64, 1024)]) == predict_step(S(cost=CostParams(roofline_p=64.0)), [], [(64, 1024)])
    with pytest.raises(PlannerError, match=r"cost model roofline_p 0.5 .*expected a knee's sharpness in \[1, inf\]"):
        S(cost=params_from_json(json.dumps({"params": {"roofline_p": 0.5}}), "soft.json"))
    named = params_from_json(json.dumps({"model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "params": {}}), "n.json")
    assert "its efficiencies and overheads are that GPU's" in S(cost=named).calibration_warnings[0]
    for bad, match in (({"fitted": "mfu"}, "'fitted' must list cost-model parameter names"),
                       ({"fitted": ["mfu", "speed"]}, "'fitted' must list cost-model parameter names"),
                       ({"tp": 2.7}, "'tp' must be the measured server's tensor-parallel degree"),
                       ({"tp": True}, "'tp' must be"), ({"gpu": None}, "'model' and 'gpu' must name"),
                       ({"engine": 5}, "'engine' must name"),
                       ({"params": {**body["params"], "mfu": True}}, "cost model mfu True")):
        with pytest.raises(PlannerError, match=match):
            S(cost=params_from_json(json.dumps({**body, **bad}), "bad.json"))
    # a hand-written server in the names --model and --gpu accept is the same server: nothing to warn of
    hand_named = params_from_json(json.dumps({**body, "model": "meta-llama/Meta-Llama-3-8B", "gpu": "A100-80GB-SXM"}),
                                  "h.json")
    assert S(cost=hand_named).calibration_warnings == ()
    # the file names the dtypes it was measured with: 16-bit weights and an "auto" (16-bit) cache here, so an
    # explicit bf16 cache is the same server, and 8-bit weights or cache are not
    assert (body["weight_dtype"], body["kv_cache_dtype"]) == ("bf16", "auto")
    assert S(kv_cache_dtype="bf16", cost=params_from_json(json.dumps(body), "c.json")).calibration_warnings == ()
    eight = S(weight_dtype="fp8", kv_cache_dtype="fp8", cost=params_from_json(json.dumps(body), "c.json"))
    assert [w.split(":")[0] for w in eight.calibration_warnings] == [
        "the calibration was fitted with bf16 weights and is applied with fp8",
        "the calibration was fitted with auto KV cache and is applied with fp8"]
    for key in ("weight_dtype", "kv_cache_dtype"):
        with pytest.raises(PlannerError, match=f"'{key}' must be one of"):
            params_from_json(json.dumps({**body, key: "fp4"}), "bad.json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{")
    from planner.sim.calibration_file import load_params
    with pytest.raises(PlannerError, match="binary.json: not UTF-8 text"):
        load_params(tmp_path / "binary.json")
    assert S().calibration_warnings == () and S(cost=CostParams(mfu=0.3)).calibration_warnings == ()
    # a fit that starts from another server's calibration says what the new file keeps of it
    refit = fit_points(S(cost=named), read_points(measured_points(tmp_path / "p.csv")))
    assert any(w.startswith("the parameters this fit did not set are kept from calibrated (n.json), and the "
                            "calibration was fitted on h100-sxm") for w in refit["warnings"])
    # a points fit from another GPU's points calibration sets all it had fitted: nothing is kept
    elsewhere = params_from_json(json.dumps({**body, "gpu": "h100-sxm"}), "h100.json")
    assert not any("kept from" in w for w in fit_points(S(cost=elsewhere), read_points(tmp_path / "p.csv"))["warnings"])
    # a trace fit sets MFU and MBU only: the overheads it keeps are named
    from planner.sim.calibration import inherited
    kept = inherited(S(cost=elsewhere), ("mfu", "mbu"))
    assert len(kept) == 1 and "its step_overhead_s, seq_overhead_s, roofline_p are that GPU's" in kept[0]
    # and the TP degrees and GPUs a recommendation searches are each warned of, once; a degree the model cannot
    # take (3) is skipped
    from planner.recommend.plan import RecommendOptions, searched_calibration_warnings

    here = S(cost=params)
    searched = searched_calibration_warnings(here, RecommendOptions(tp_options=(1, 2, 3, 2)), "h100-sxm,l40s=1.0")
    assert [w[:60] for w in searched] == [
        "the calibration was fitted at TP 1 and is applied at TP 2: w",
        "the calibration was fitted on a100-80gb-sxm and is applied t",
        "the calibration was fitted on a100-80gb-sxm and is applied t"]
    assert "to h100-sxm" in searched[1] and "to l40s" in searched[2]


def test_calibrate_points_predicts_each_row_from_a_fit_that_did_not_see_it(tmp_path):
    # noise-free rows of the cost model itself: a fit without any one of them still recovers it exactly
    exact = fit_points(S(), read_points(measured_points(tmp_path / "p.csv")))
    assert exact["cross_validated"]["folds"] == 10 and len(exact["cross_validated"]["residuals"]) == 14
    assert exact["cross_validated"]["worst_abs_error"] < 1e-3
    # DistServe's six OPT-13B TP 1 iterations (A100, vLLM V0): six steps leave one to spare beyond five parameters,
    # so the knee is fitted too; each left out in turn (six folds of one) is predicted by the fit of the same
    # parameters on the other five, exactly as fitting those five would predict it
    sys.path.insert(0, str(ROOT / "bench"))
    import calibrate_points

    six = calibrate_points.points("facebook/opt-13b", 1, calibrate_points.SIX)
    server = calibrate_points.scenario("opt-13b", 1)
    report = fit_points(server, six)
    assert report["fitted"] == ["mfu", "mbu", "step_overhead_s", "seq_overhead_s", "roofline_p"]
    assert round(report["params"]["roofline_p"], 2) == 1.33         # V0's early-2024 steps: a smooth knee
    cv = report["cross_validated"]
    assert cv["folds"] == 6
    five = fit_points(server, six[1:], tuple(report["fitted"]))
    left_out = server.replace(cost=CostParams(**five["params"]))
    assert cv["residuals"][0]["predicted_ms"] == pytest.approx(predict_points(left_out, six[:1])[0], rel=1e-12)
    # the five fit their rows to 1.1% and miss the sixth by 4.5% at the median (21.2% worst): under the 5% past
    # which the report warns of the gap
    in_sample = np.median([abs(r["error"]) for r in report["residuals"]])
    assert round(in_sample, 3) == 0.011 and round(cv["median_abs_error"], 3) == 0.045
    assert round(cv["worst_abs_error"], 3) == 0.212
    assert not any(w.startswith("a row the fit did not see") for w in report["warnings"])
    # MBU, the step overhead and the knee trade off: changed together they move the six by 0.49% at most
    assert any(w.startswith("mbu and step_overhead_s and roofline_p trade off: changed together (by up to 10% "
                            "each) they move no predicted step time by more than 0.49%") for w in report["warnings"])
    assert not any(w.startswith("a row the fit did not see") for w in exact["warnings"])
    # with the four parameters of fewer rows the fit stops on V0's smooth knee with the A100's sharp one, and the
    # cross-validation says how much worse that predicts (7.8%, the fit before the knee was fitted)
    four_params = fit_points(server, six, tuple(report["fitted"][:4]))
    assert round(four_params["cross_validated"]["median_abs_error"], 3) == 0.078
    assert any(w.startswith("a row the fit did not see is predicted at 7.8% median error")
               for w in four_params["warnings"])
    # four rows leave three to fit four parameters in each fold: no cross-validation, and the report says so; five
    # fit the four (none to spare for the knee)
    four = fit_points(server, six[:4])
    assert four["cross_validated"] is None and four["fitted"] == report["fitted"][:4]
    assert any(w.startswith("4 distinct steps are too few to predict any of them") for w in four["warnings"])
    five_rows = fit_points(server, six[:5])
    assert five_rows["cross_validated"]["folds"] == 5 and five_rows["fitted"] == report["fitted"][:4]


def test_points_that_cannot_pin_the_parameters_are_refused_or_warned_of(tmp_path):
    good = measured_points(tmp_path / "p.csv").read_text().splitlines()
    header, first = good[0], good[1]

    def refused(name, rows, match, scenario=None):
        (tmp_path / name).write_text("\n".join([header, *rows]) + "\n")
        with pytest.raises(PlannerError, match=match):
            fit_points(scenario or S(), read_points(tmp_path / name))

    # one step timed six times pins one combination of four parameters, not each
    refused("dup.csv", [first] * 6, "6 rows time 1 distinct steps; the 4 parameters need at least 4")
    # a count without its lengths would be dropped unseen; a decode needs context
    refused("half.csv", [*good[1:], "512,0,4,100,20"], "line 16 .* prefill tokens without a prefill count")
    refused("ctx.csv", [*good[1:], "0,0,4,0,20"], "a decode count without a context")
    # a step no engine runs (longer than max_model_len)
    refused("long.csv", good[1:], "line 6 \\(and 5 more\\) holds a sequence longer than --max-model-len \\(1,024\\)",
            S(max_model_len=1024))
    # repeats of a step are left out with it: the cross-validation of every row twice is that of each row once
    once = fit_points(S(), read_points(tmp_path / "p.csv"))
    (tmp_path / "twice.csv").write_text("\n".join([header, *good[1:], *good[1:]]) + "\n")
    twice = fit_points(S(), read_points(tmp_path / "twice.csv"))
    assert twice["cross_validated"]["folds"] == once["cross_validated"]["folds"] == 10
    assert [r["predicted_ms"] for r in twice["cross_validated"]["residuals"]] == pytest.approx(
        [r["predicted_ms"] for r in once["cross_validated"]["residuals"]] * 2, rel=1e-6)


def test_a_measured_trace_is_calibrated_on_the_requests_of_the_model_it_names(tmp_path):
    from planner.traces import store
    from planner.workload.replay import measured_latencies, served_models

    db = tmp_path / "m.duckdb"
    cli_json("ingest", str(ROOT / "traces" / "sample_chat.csv.gz"), "--quiet", db=db)
    con = store.open_store(db)
    everyone = measured_latencies(con, "sample_chat")
    assert everyone.workload.n == 8350 and everyone.notes == ()
    small = measured_latencies(con, "sample_chat", get_model("meta-llama/Meta-Llama-3-8B"))
    assert small.workload.n == 5921 and np.isfinite(small.ttft_s).all()
    assert small.notes == ("calibrated on the 5,921 requests the trace says llama-3-8b served; 2,429 others left out "
                           "(llama-3-70b: 2,429)",)
    assert served_models(con, "sample_chat") == {"llama-3-8b": 5921, "llama-3-70b": 2429}
    # one server's latencies, named by the trace, replayed as another model: kept, and said
    other = measured_latencies(con, "sample_chat", get_model("mistral-7b"), "llama-3-70b")
    assert other.workload.n == 2429 and other.notes[1] == (
        "the trace says llama-3-70b served these requests, and they are replayed as mistral-7b: check that this is "
        "the model they measured")
    assert len(measured_latencies(con, "sample_chat", LLAMA8, "llama-3-8b").notes) == 1
    with pytest.raises(PlannerError, match="several models .* and none is mistral-7b"):
        measured_latencies(con, "sample_chat", get_model("mistral-7b"))
    with pytest.raises(PlannerError, match="--trace-model 'llama': trace 'sample_chat' names no such model"):
        measured_latencies(con, "sample_chat", LLAMA8, "llama")
    con.close()


def test_a_trace_naming_a_fine_tune_is_calibrated_as_its_preset(tmp_path):
    from planner.traces import store
    from planner.workload.replay import measured_latencies

    def trace(name, models):
        rows = "".join(f"{i * 0.5},{200 + i},{50},{30 + i % 7},{9},{models[i % len(models)]}\n" for i in range(60))
        path = tmp_path / f"{name}.csv"
        path.write_text("timestamp,input_tokens,output_tokens,ttft_ms,tpot_ms,model\n" + rows)
        cli_json("ingest", str(path), "--name", name, "--quiet", db=tmp_path / "m.duckdb")

    trace("one", ["meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-70b"])
    trace("two", ["meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"])
    con = store.open_store(tmp_path / "m.duckdb", create=False)
    chat = measured_latencies(con, "one", LLAMA8)
    assert chat.workload.n == 30 and chat.notes == (
        "calibrated on the 30 requests the trace says meta-llama/Meta-Llama-3-8B-Instruct served; 30 others left "
        "out (llama-3-70b: 30)",)
    # a base and its fine-tune are one preset but two servers: which one is the user's to say
    with pytest.raises(PlannerError, match="several servers of llama-3-8b .*: calibrate on one server's, naming it "
                                           "with --trace-model"):
        measured_latencies(con, "two", LLAMA8)
    assert measured_latencies(con, "two", LLAMA8, "meta-llama/Meta-Llama-3-8B").workload.n == 30
    con.close()


def test_a_held_out_split_needs_latencies_on_both_sides(tmp_path):
    from planner.sim.trace_calibration import fit_trace_held_out
    from planner.sim.calibration_file import file_text

    work = synthetic("requests=60,input=uniform:100:600,output=uniform:20:100,qps=2,seed=3")
    replay = simulate(work, S(max_model_len=8192))
    ttft, tpot = replay.ttft_s.copy(), replay.tpot_s.copy()
    ttft[45:], tpot[45:] = np.nan, np.nan          # the last quarter untimed: 42 fitted and 3 held out timed
    with pytest.raises(PlannerError, match="hold 42 requests with a measured TTFT or TPOT and the last 30% 3"):
        fit_trace_held_out(S(max_model_len=8192), work, ttft, tpot)
    # a file with an undefined figure is still strict JSON (null, not NaN)
    text = file_text({"params": {"mfu": 0.5}, "residuals": [{"error": float("nan")}]}, S())
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c))["residuals"] == [{"error": None}]


def test_trace_calibration_warns_of_an_unmeasured_metric_and_of_a_held_out_gap():
    from planner.sim.trace_calibration import fit_trace_held_out

    truth = CostParams(mfu=0.42, mbu=0.68)
    work = synthetic("requests=200,input=uniform:100:2000,output=uniform:20:400,qps=4,seed=7")
    replay = simulate(work, S(max_model_len=8192, cost=truth))
    server = S(max_model_len=8192)
    # TTFT only: MBU is fitted through TTFT alone, and the report says so; the held-out part is predicted well
    ttft_only = fit_trace_held_out(server, work, replay.ttft_s, np.full(work.n, np.nan))
    assert [w for w in ttft_only["warnings"] if w.startswith("no ")] == [
        "no TPOT is measured: mbu, which TPOT mostly sets, was fitted through TTFT alone; check the file's TPOT "
        "predictions against a trace that measures it, or calibrate on timed iterations (--points)"]
    assert not any("held-out arrivals" in w for w in ttft_only["warnings"])
    # the server slowed down by half after the fitted part: the held-out error is far above the in-sample one
    slower = np.arange(work.n) >= 140
    gap = fit_trace_held_out(server, work, np.where(slower, 1.5, 1.0) * replay.ttft_s,
                             np.where(slower, 1.5, 1.0) * replay.tpot_s)
    held, fitted = gap["held_out"]["median_abs_error"], gap["in_sample"]["median_abs_error"]
    assert held > 2 * fitted and held > 0.05
    assert any(w.startswith(f"the held-out arrivals are predicted at {held:.1%} median error") for w in gap["warnings"])


def test_trace_calibration_compares_the_same_requests_on_both_sides():
    from planner.sim.trace_calibration import fit_trace_held_out, latency_errors

    truth = CostParams(mfu=0.42, mbu=0.68)
    work = synthetic("requests=200,input=uniform:100:2000,output=uniform:20:400,qps=4,seed=7")
    replay = simulate(work, S(max_model_len=8192, cost=truth))
    # the longest fifth of the prompts untimed (a client that lost their stream events): the predictions of the
    # requests the trace times, against those times, are exact
    long = work.input_tokens > np.quantile(work.input_tokens, 0.8)
    untimed = np.where(long, np.nan, replay.ttft_s)
    rows = {r["metric"]: r for r in latency_errors(replay.ttft_s, replay.tpot_s, untimed, replay.tpot_s)}
    assert [rows[m]["error"] for m in ("TTFT mean", "TTFT p99", "TPOT p99")] == [0.0, 0.0, 0.0]
    assert (rows["TTFT p99"]["requests"], rows["TPOT p99"]["requests"]) == (int((~long).sum()), work.n)
    # a TPOT logged as 0 (a one-token reply's, in many loggers) is no inter-token time: on neither side
    zeroed = np.arange(work.n) % 4 == 0
    rows = {r["metric"]: r for r in latency_errors(replay.ttft_s, replay.tpot_s, replay.ttft_s,
                                                   np.where(zeroed, 0.0, replay.tpot_s))}
    assert rows["TPOT mean"]["error"] == 0.0 and rows["TPOT mean"]["requests"] == int((~zeroed).sum())
    # and the fit matches the same requests: the untimed long prompts do not drag MFU up (0.458 and MBU 0.635 here,
    # and MFU at its bound, 1.0, on the bundled sample, when every predicted TTFT was set against the timed ones)
    fit = fit_trace_held_out(S(max_model_len=8192), work, untimed, replay.tpot_s)
    assert fit["params"]["mfu"] == pytest.approx(0.42, rel=0.05) and fit["params"]["mbu"] == pytest.approx(0.68, rel=0.05)
    # a scenario that rejects requests the server timed is not that server: refused, with how many and why
    short = S(max_model_len=1024)
    lost = simulate(work, short).too_long
    assert 0 < lost.sum() < work.n
    with pytest.raises(PlannerError, match=rf"^{int(lost.sum())} of the trace's timed requests are rejected by this "
                                           rf"scenario, though the server timed them \({int(lost.sum())} whose "
                                           rf"prompts, up to {int(work.input_tokens.max()):,} tokens, do not fit "
                                           r"--max-model-len 1,024; 0 that need more KV"):
        fit_trace_held_out(short, work, replay.ttft_s, replay.tpot_s)


def test_trace_fit_ends_at_least_as_close_as_the_truth():
    from planner.sim.trace_calibration import _TRACE_QUANTILES

    # the first 140 of 200 requests simulated with a known MFU and MBU: later arrivals slowed their decodes, so even
    # the truth misses them a little. A local search from the defaults stalled on a ledge of the replay's quantiles
    # at 7x the truth's loss (MFU 0.406, MBU 0.757); from the coarse grid's best it ends below the truth's loss
    truth = CostParams(mfu=0.42, mbu=0.68)
    work = synthetic("requests=200,input=uniform:100:2000,output=uniform:20:400,qps=4,seed=7")
    replay = simulate(work, S(max_model_len=8192, cost=truth))
    head = np.arange(work.n) < 140
    part = work.subset(head)
    report = fit_trace(S(max_model_len=8192), part, replay.ttft_s[head], replay.tpot_s[head])

    def loss(cost):
        got = simulate(part, S(max_model_len=8192, cost=cost))
        return sum(np.mean(np.log(np.nanquantile(g, _TRACE_QUANTILES) / np.quantile(w, _TRACE_QUANTILES)) ** 2)
                   for g, w in ((got.ttft_s, replay.ttft_s[head]), (got.tpot_s, replay.tpot_s[head])))

    fitted = CostParams(mfu=report["params"]["mfu"], mbu=report["params"]["mbu"])
    assert loss(fitted) <= loss(truth) < loss(CostParams(mfu=0.406, mbu=0.757)) / 5
    assert fitted.mfu == pytest.approx(0.42, rel=0.05) and fitted.mbu == pytest.approx(0.68, rel=0.05)


def test_trace_calibration_refuses_latencies_it_cannot_follow_and_warns_of_a_loose_fit():
    from planner.sim.trace_calibration import LOOSE_FIT, fit_trace_held_out

    work = synthetic("requests=200,input=uniform:100:2000,output=uniform:20:400,qps=4,seed=7")
    replay = simulate(work, S(max_model_len=8192, cost=CostParams(mfu=0.42, mbu=0.68)))
    server = S(max_model_len=8192)
    # seconds written where milliseconds belong: no MFU or MBU makes the server 1,000 times faster
    with pytest.raises(PlannerError, match=r"still misses the TTFT and TPOT .* by a median [0-9]+%; they are "
                                           r"0\.00[0-9]+x what the scenario predicts; they read like seconds"):
        fit_trace_held_out(server, work, replay.ttft_s / 1000, replay.tpot_s / 1000)
    # 200 ms of client time in every TTFT: no server's step times give that shape; the fit is kept, and said loose
    loose = fit_trace_held_out(server, work, replay.ttft_s + 0.2, replay.tpot_s)
    fitted = loose["in_sample"]["median_abs_error"]
    assert LOOSE_FIT < fitted < 0.5
    assert any(w.startswith(f"the fit misses the requests it was fitted to by a median {fitted:.0%}")
               for w in loose["warnings"])
    # the server's own latencies: followed closely, nothing of the kind
    close = fit_trace_held_out(server, work, replay.ttft_s, replay.tpot_s)
    assert close["in_sample"]["median_abs_error"] < 0.05
    assert not any(w.startswith("the fit misses") for w in close["warnings"])


def test_calibrate_from_a_stored_trace_with_latencies(tmp_path):
    truth = CostParams(mfu=0.42, mbu=0.68)
    work = synthetic("requests=500,input=uniform:100:2000,output=uniform:20:400,qps=4,seed=7")
    replay = simulate(work, S(max_model_len=8192, cost=truth))
    rows = ["arrival_time,prompt_tokens,completion_tokens,ttft_ms,tpot_ms"]
    for a, p, o, f, t in zip(work.arrival_s, work.input_tokens, work.output_tokens, replay.ttft_s, replay.tpot_s,
                             strict=True):
        rows.append(f"{a:.6f},{p},{o},{f * 1e3:.6f},{'' if np.isnan(t) else f'{t * 1e3:.6f}'}")
    path = tmp_path / "measured.csv"
    path.write_text("\n".join(rows) + "\n")
    db = tmp_path / "c.duckdb"
    cli_json("ingest", str(path), "--quiet", "--unit", "arrival=s", db=db)
    obj = cli_json("calibrate", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--trace", "measured",
                   "--max-model-len", "8192", "-o", str(tmp_path / "cal.json"), db=db)
    assert obj["params"]["mfu"] == pytest.approx(0.42, rel=0.05)
    assert obj["params"]["mbu"] == pytest.approx(0.68, rel=0.05)
    assert obj["mape"] < 0.05 and len(obj["residuals"]) == 38
    # each residual names its quantile: p5-p95 of TTFT, then of TPOT, measured as the trace has them
    assert [(r["metric"], r["quantile"]) for r in obj["residuals"][18:20]] == [("TTFT", 0.95), ("TPOT", 0.05)]
    assert obj["residuals"][9]["measured_ms"] == pytest.approx(np.quantile(replay.ttft_s[:350], 0.5) * 1e3, rel=1e-6)
    # fitted on the first 350 arrivals, then the whole trace replayed: the last 150 are predicted, not fitted
    assert obj["in_sample"]["requests"] == 350 and obj["held_out"]["requests"] == 150
    assert obj["held_out"]["median_abs_error"] < 0.03 and abs(obj["held_out"]["bias"]) < 0.03
    held = {r["metric"]: r for r in obj["held_out"]["metrics"]}
    assert held["TTFT p50"]["measured_ms"] == pytest.approx(np.percentile(replay.ttft_s[350:], 50) * 1e3)
    assert obj["warnings"] == []


def test_calibration_names_the_parameters_the_data_cannot_pin_down(tmp_path):
    # small decode batches only: compute never comes near binding, so no row tells MFU
    c = S(cost=TRUTH).coefficients.as_tuple()
    rows = ["prefill_tokens,prefill_count,decode_count,decode_context,step_ms"]
    for count in (1, 2, 4, 8):
        for ctx in (128, 512):
            rows.append(f"0,0,{count},{ctx},{step_seconds.py_func(c, *batch_aggregates([], [(count, ctx)]))[0] * 1e3}")
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    fit = fit_points(S(), read_points(tmp_path / "d.csv"))
    # and the fixed costs (0.3 ms and 8 µs per sequence beside ~12 ms of weights) are as loose; MBU is pinned
    assert fit["warnings"][0].startswith("no prefill rows: mfu")
    # as is the knee: every row is memory-bound, far from the ridge it shapes
    assert [w.split(" ")[0] for w in fit["warnings"][1:]] == ["mfu", "step_overhead_s", "seq_overhead_s", "roofline_p"]
    assert all("poorly constrained" in w for w in fit["warnings"][1:])
    # with prefill rows MFU is pinned; overheads this small stay below timing noise even then, and so does a knee
    # as sharp as the A100's 8 (a tenth more or less turns the few rows near the ridge by under 1%)
    full = fit_points(S(), read_points(measured_points(tmp_path / "p.csv")))["warnings"]
    assert [w.split(" ")[0] for w in full] == ["line", "step_overhead_s", "seq_overhead_s", "roofline_p"]
    # (256 sequences of 2,048 tokens are more than the A100's pool holds for Llama-3-8B: the rows are synthetic)
    assert full[0].startswith("line 15 holds 33,024 KV blocks, more than the 28,053 of the pool")


def test_step_times_the_model_cannot_follow_are_refused_and_a_missing_kind_of_row_named(tmp_path):
    good = read_points(measured_points(tmp_path / "p.csv"))
    # step_ms in seconds: no setting follows them, and their scale to the scenario's own prediction says why
    for factor, unit in ((1e-3, "seconds"), (1e3, "microseconds")):
        with pytest.raises(PlannerError, match=f"still misses these --points step times .* they read like {unit}"):
            fit_points(S(), good.with_columns(pl.col("step_ms") * factor))
    # a factor no unit slip gives is named as the ratio alone
    with pytest.raises(PlannerError, match=r"they are [0-9.]+e\+12x what the scenario predicts: expected"):
        fit_points(S(), good.with_columns(pl.col("step_ms") * 1e12))
    # prefill rows only: MBU was fitted on them alone, and the report says so first
    prefills = fit_points(S(), good.filter(pl.col("prefill_count") > 0))
    assert prefills["warnings"][0].startswith("no decode rows: mbu")
    assert not any(w.startswith("no prefill rows") for w in prefills["warnings"])
    assert not any(w.startswith("no ") for w in fit_points(S(), good)["warnings"])


def test_an_overhead_fitted_to_zero_is_bounded_not_called_untrustworthy(tmp_path):
    # no per-step cost at all: a relative 10% probe of ~0 moves nothing, yet the rows bound it from above. The
    # bound is the value that moves the most sensitive row by 1%: a constant per step is 1% of the shortest step
    path = measured_points(tmp_path / "z.csv", CostParams(mfu=0.45, mbu=0.7, step_overhead_s=0.0, seq_overhead_s=40e-6))
    fit = fit_points(S(), read_points(path))
    assert fit["params"]["seq_overhead_s"] == pytest.approx(40e-6, rel=0.01)
    assert fit["params"]["step_overhead_s"] < 2e-6
    [step] = [w for w in fit["warnings"] if w.startswith("step_overhead_s")]
    assert "indistinguishable from 0" in step and "poorly constrained" not in step
    bound_s = float(step.split("below ")[1].split(",")[0])
    shortest_s = read_points(path)["step_ms"].min() / 1e3
    assert bound_s == pytest.approx(0.01 * shortest_s, rel=0.02)


def test_trace_calibration_can_profile_the_kv_pool():
    # a server whose KV pool is 80% of what the memory plan says, at a load where KV binds
    work = synthetic("requests=600,input=uniform:200:3000,output=uniform:50:600,qps=12,seed=9")
    planned = S(max_model_len=8192, gpu_memory_utilization=0.3)
    real = planned.replace(num_gpu_blocks=int(planned.settings.num_blocks * 0.8), cost=CostParams(mfu=0.42, mbu=0.68))
    replay = simulate(work, real)
    fit = fit_trace(planned, work, replay.ttft_s, replay.tpot_s, blocks_factors=(0.7, 0.8, 0.9, 1.0))
    assert fit["num_blocks"] == real.settings.num_blocks
    assert fit["params"]["mbu"] == pytest.approx(0.68, rel=0.05)


def _terms(scenario, prefills, decodes):
    """``(compute_s, memory_s, overhead_s)`` of a step: its two rooflines' sides summed."""
    from planner.sim.cost_model import step_parts
    linear, weights, attention, kv, overhead = step_parts.py_func(scenario.coefficients.as_tuple(),
                                                                  *batch_aggregates(prefills, decodes))
    return linear + attention, weights + kv, overhead


def test_attention_runs_after_the_gemms_not_beside_them():
    from planner.sim.cost_model import _busy

    # Llama-3-8B on an H100 (knee 4): a 512-token chunk beside 256 decodes at 800 tokens of context. The GEMMs
    # stream 15.0 GB of weights under 768 tokens of compute; attention reads 205,568 tokens of KV (26.9 GB). The
    # GPU runs the two one after the other, so the step is the sum of two rooflines, not one roofline of the sums
    scenario = S(gpu=get_gpu("h100-sxm"), cost=CostParams(step_overhead_s=0.0, seq_overhead_s=0.0))
    c = scenario.coefficients
    prefills, decodes = [(512, 0)], [(256, 800)]
    pairs = 512 * 513 / 2 + 256 * 801
    linear = c.linear_s_per_token * 768 + c.logit_s_per_seq * 257
    weights, kv = c.weight_bytes * c.s_per_byte, c.kv_bytes_per_token * (256 * 800 + 768) * c.s_per_byte
    attention = c.attn_s_per_pair * pairs
    step = predict_step(scenario, prefills, decodes)
    two = _busy.py_func(linear, weights, 4.0) + _busy.py_func(attention, kv, 4.0)
    assert step["step_ms"] - step["overhead_ms"] == pytest.approx(two * 1e3, rel=1e-12)
    assert step["compute_ms"] == pytest.approx((linear + attention) * 1e3, rel=1e-12)
    assert step["memory_ms"] == pytest.approx((weights + kv) * 1e3, rel=1e-12)
    # one roofline over the whole step would hide the KV reads under the GEMMs' compute: 1.37x too short here
    one = _busy.py_func(linear + attention, weights + kv, 4.0)
    assert two / one == pytest.approx(1.37, abs=0.01)
    # 64 decodes leave both sides memory-bound (the H100's ridge is ~200 tokens): the step is its bytes' time
    lone = predict_step(scenario, [], [(64, 800)])
    assert lone["step_ms"] - lone["overhead_ms"] == pytest.approx(lone["memory_ms"], rel=0.01)


def test_moe_reads_only_the_experts_its_tokens_visit():
    # Mixtral 8x7B, top-2 of 8: one token reads 2 experts (expected untouched share (6/8)^1), 32 tokens nearly all
    mixtral = S(get_model("mixtral-8x7b"), get_gpu("h100-sxm"), tp=2)
    c = mixtral.coefficients
    assert 0 < c.expert_bytes < c.weight_bytes
    one, four, many = (_terms(mixtral, [], [(n, 500)])[1] for n in (1, 4, 64))
    kv = lambda n: c.kv_bytes_per_token * n * 501 * c.s_per_byte       # noqa: E731
    assert one == pytest.approx((c.weight_bytes - c.expert_bytes * 0.75) * c.s_per_byte + kv(1), rel=1e-12)
    assert four == pytest.approx((c.weight_bytes - c.expert_bytes * 0.75 ** 4) * c.s_per_byte + kv(4), rel=1e-12)
    assert many == pytest.approx(c.weight_bytes * c.s_per_byte + kv(64), rel=1e-6)
    # a dense model reads all its weights at any batch
    dense = S(get_model("llama-3-8b"), get_gpu("h100-sxm"))
    assert dense.coefficients.expert_bytes == 0
    assert _terms(dense, [], [(1, 500)])[1] == pytest.approx(
        (dense.coefficients.weight_bytes + dense.coefficients.kv_bytes_per_token * 501) * dense.coefficients.s_per_byte)


def test_a_step_with_prefill_pays_the_piecewise_graphs_and_attention_grows_with_context():
    scenario = S(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    c = scenario.coefficients
    decode = _terms(scenario, [], [(32, 1000)])
    mixed = _terms(scenario, [(1, 1000)], [(31, 1000)])            # one decode replaced by a 1-token chunk
    assert mixed[2] - decode[2] == pytest.approx(32 * 16e-6)       # 32 layers × 16 µs (vllm PR #16072)
    assert mixed[1] == pytest.approx(decode[1]) and mixed[0] == pytest.approx(decode[0])
    # V1 before 0.11 ran decode steps piecewise too: they pay what mixed steps pay, which then pay no more
    piecewise = scenario.replace(overheads=Overheads(vllm_version="0.10"))
    assert _terms(piecewise, [], [(32, 1000)])[2] == pytest.approx(mixed[2])
    assert _terms(piecewise, [(1, 1000)], [(31, 1000)])[2] == pytest.approx(mixed[2])
    assert scenario.replace(overheads=Overheads(vllm_version="0.11")).coefficients == c
    # the KV a decode batch reads: linear in context; a chunk's attention FLOPs: quadratic in its length
    longer = _terms(scenario, [], [(32, 3000)])
    assert longer[1] - decode[1] == pytest.approx(32 * 2000 * c.kv_bytes_per_token * c.s_per_byte)
    pairs = [batch_aggregates([(n, 0)], [])[1] for n in (1000, 2000)]
    assert pairs == [1000 * 1001 / 2, 2000 * 2001 / 2]
    # a chunk after computed context attends to all of it too: 512 queries × 1,024 earlier keys more
    assert batch_aggregates([(512, 1024)], [])[1] == 512 * 1024 + 512 * 513 / 2


def test_quantized_weights_compute_at_the_peak_their_kernels_reach():
    # a 2,048-token prefill of Llama-3-8B, FLOP by FLOP: the linear layers (all parameters but the two 128,256 ×
    # 4,096 embeddings) at the weights' peak; causal attention and the output head in 16 bits. FP8 runs W8A8 at the
    # 8-bit peak on Hopper and Ada, but weight-only (FP8 Marlin) on Ampere, which has no FP8 tensor cores; INT8
    # W8A8 runs on INT8 tensor cores on both; INT4 (W4A16) computes in 16 bits
    linear = 2 * (8_030_261_248 - 2 * 128_256 * 4096) * 2048
    sixteen_bit = 4 * 32 * 4096 * 2048 * 2049 / 2 + 2 * 128_256 * 4096

    def compute_ms(gpu, dtype):
        return predict_step(S(gpu=get_gpu(gpu), weight_dtype=dtype), [(2048, 0)], [])["compute_ms"]

    for gpu, bf16_tflops, eight_bit_tflops, fp8_cores in (("h100-sxm", 989, 1979, True), ("l40s", 362, 733, True),
                                                          ("a100-80gb-sxm", 312, 624, False)):
        mfu = get_gpu(gpu).mfu * 1e12

        def expected_ms(linear_tflops):
            return (linear / linear_tflops + sixteen_bit / bf16_tflops) / mfu * 1e3

        assert compute_ms(gpu, "bf16") == pytest.approx(expected_ms(bf16_tflops), rel=1e-9)
        assert compute_ms(gpu, "int4") == pytest.approx(expected_ms(bf16_tflops), rel=1e-9)
        assert compute_ms(gpu, "int8") == pytest.approx(expected_ms(eight_bit_tflops), rel=1e-9)
        assert compute_ms(gpu, "fp8") == pytest.approx(expected_ms(eight_bit_tflops if fp8_cores else bf16_tflops),
                                                       rel=1e-9)
    # attention and the head are 3.7% of this prefill's FLOPs: FP8 weights make it 1.93x as fast on an H100, not 2x
    h100 = compute_ms("h100-sxm", "bf16") / compute_ms("h100-sxm", "fp8")
    assert sixteen_bit / (linear + sixteen_bit) == pytest.approx(0.037, abs=5e-4)
    assert h100 == pytest.approx(1.93, abs=5e-3)


def test_all_reduce_floor_by_gpu_engine_and_tensor_parallelism():
    # two all-reduces per layer, each log2(tp) rounds of the GPU's floor: H100 NVLink 10 µs; A100 NVLink 12.8 µs
    # (the H100's × 1.281) where vLLM V1 captures its custom all-reduce in CUDA graphs, 25 µs on either where an
    # engine calls NCCL eagerly (vLLM V0); a PCIe GPU has no graph floor of its own
    llama70 = get_model("llama-3-70b")
    h2, h4, h8 = (S(llama70, get_gpu("h100-sxm"), tp=t).coefficients.comm_fixed_s for t in (2, 4, 8))
    assert h2 == pytest.approx(2 * 80 * 10e-6) and h4 == pytest.approx(2 * h2) and h8 == pytest.approx(3 * h2)
    assert S(llama70, A100, tp=2).coefficients.comm_fixed_s == pytest.approx(2 * 80 * 12.81e-6)
    assert S(llama70, get_gpu("a100-40gb-sxm"), tp=4).coefficients.comm_fixed_s == pytest.approx(2 * 80 * 12.81e-6 * 2)
    assert S(llama70, A100, tp=2, engine="vllm-v0").coefficients.comm_fixed_s == pytest.approx(2 * 80 * 25e-6)
    assert S(llama70, get_gpu("a100-80gb-pcie"), tp=2).coefficients.comm_fixed_s == pytest.approx(2 * 80 * 25e-6)
    # an engine that calls NCCL eagerly pays the eager floor on Hopper too, not V1's captured one
    assert S(llama70, get_gpu("h100-sxm"), tp=2, engine="vllm-v0").coefficients.comm_fixed_s == \
        pytest.approx(2 * 80 * 25e-6)
    assert S(llama70, A100, tp=2, cost=CostParams(allreduce_latency_s=5e-6)).coefficients.comm_fixed_s == \
        pytest.approx(2 * 80 * 5e-6)
    assert S(LLAMA8, A100).coefficients.comm_fixed_s == 0


def test_the_client_sees_the_frontend_on_top_of_the_engine():
    # one request alone: TTFT is its prefill step plus the frontend; E2E adds the same once, not per token
    work = synthetic("requests=1,input=512,output=3,qps=1")
    base = S(cost=CostParams(frontend_s=0.0))
    plain, fronted = simulate(work, base), simulate(work, base.replace(cost=CostParams(frontend_s=0.006)))
    assert fronted.ttft_s[0] - plain.ttft_s[0] == pytest.approx(0.006, abs=1e-12)
    assert fronted.e2e_s[0] - plain.e2e_s[0] == pytest.approx(0.006, abs=1e-12)
    assert fronted.tpot_s[0] == pytest.approx(plain.tpot_s[0], abs=1e-12)
    # other engines' frontends are not modelled: the parameter changes nothing there
    for engine in ("vllm-v0", "tgi"):
        v0 = S(engine=engine, cost=CostParams(frontend_s=0.0))
        assert simulate(work, v0.replace(cost=CostParams(frontend_s=0.006))).ttft_s[0] == simulate(work, v0).ttft_s[0]


def test_tensor_parallel_steps_pay_the_engines_coordination():
    # vLLM V0 hands every step to its Ray workers (7 ms a step at TP 2, DistServe's A100 profiles); V1 broadcasts
    # through shared memory (0); one GPU pays nothing; a calibration's own value wins
    llama70 = get_model("llama-3-70b")
    v0, v1 = (S(llama70, A100, tp=2, engine=e).coefficients.step_overhead_s for e in ("vllm-v0", "vllm-v1"))
    base_s = CostParams().step_overhead_s
    assert v0 == pytest.approx(base_s + 7e-3) and v1 == pytest.approx(base_s)
    assert S(LLAMA8, A100, engine="vllm-v0").coefficients.step_overhead_s == pytest.approx(CostParams().step_overhead_s)
    own = S(llama70, A100, tp=2, engine="vllm-v0", cost=CostParams(tp_step_overhead_s=1e-3)).coefficients
    assert own.step_overhead_s == pytest.approx(CostParams().step_overhead_s + 1e-3)


def test_calibration_says_when_the_scenario_cannot_be_the_measured_server():
    # latencies measured on an H100, calibrated as if they came from an A100: even at full compute and bandwidth
    # the A100's steps are too slow, so the fit ends on a bound and the report says so
    from planner.sim.trace_calibration import fit_trace_held_out

    work = synthetic("requests=300,input=uniform:100:800,output=uniform:50:200,qps=2,seed=4")
    measured = simulate(work, S(gpu=get_gpu("h100-sxm"), max_model_len=8192))
    report = fit_trace_held_out(S(max_model_len=8192), work, measured.ttft_s, measured.tpot_s)
    assert any(w.split(" ")[0] in ("mfu", "mbu") and " ended at " in w and "top of its range" in w
               for w in report["warnings"])
    assert report["params"]["mbu"] >= 0.99           # projected onto its range: on the bound, within at_bound's 1%
    # on the bound the sensitivity is probed downwards, and MBU still governs every TPOT: not "poorly constrained"
    assert not any(w.startswith("mbu is poorly constrained") for w in report["warnings"])
    assert report["held_out"]["bias"] > 0.05            # the A100 replay stays slower than what was measured


def test_each_gpu_family_has_its_measured_default_efficiencies():
    from planner.catalog.gpus import DEFAULT_MBU, DEFAULT_MFU, FAMILY_EFFICIENCY

    l40s = get_gpu("l40s")
    # the checked GPUs take the defaults as they are; L40S its GEMMs' ratios to the H100's (0.885, 0.943)
    assert (A100.mfu, A100.mbu) == (get_gpu("h100-sxm").mfu, get_gpu("h100-sxm").mbu) == (DEFAULT_MFU, DEFAULT_MBU)
    assert (l40s.mfu, l40s.mbu) == (0.487, 0.754) == tuple(round(d * f, 3) for d, f in
                                                             zip((DEFAULT_MFU, DEFAULT_MBU), FAMILY_EFFICIENCY["l40s"]))
    # a 64 × 1,024 decode of Llama-3-8B on an L40S streams its bytes at 0.754 × 864 GB/s
    ideal = replace(MBU08, mbu=None)
    step = predict_step(S(gpu=l40s, cost=ideal), [], [(64, 1024)])
    c = S(gpu=l40s).coefficients
    memory_bytes = c.weight_bytes + c.kv_bytes_per_token * (64 * 1024 + 64)
    assert step["memory_ms"] == pytest.approx(memory_bytes / (0.754 * 864e9) * 1e3, rel=1e-9)
    # Llama-3-8B's attention: 4 FLOPs × 32 layers × 4,096 per (query, key) pair, at 0.487 × 362 TFLOP/s
    assert c.attn_s_per_pair == pytest.approx(4 * 32 * 4096 / (0.487 * 362e12))
    # a calibrated value is the GPU's no more: it applies as fitted
    fitted = S(gpu=l40s, cost=CostParams(mfu=0.6, mbu=0.9)).coefficients
    assert fitted.attn_s_per_pair == pytest.approx(4 * 32 * 4096 / (0.6 * 362e12))
    assert fitted.s_per_byte == pytest.approx(1 / (0.9 * 864e9))
    # what the GPU leaves to the scenario follows the GPU when it changes
    assert S(gpu=l40s).replace(gpu=A100).coefficients.s_per_byte == pytest.approx(1 / (0.8 * 2039e9))


def test_each_gpu_family_turns_compute_bound_where_its_gemms_do():
    # the roofline's knee: 2 on the L40S (within 5% of its GEMMs) and on GPUs whose GEMMs were not measured; the
    # H100's GEMMs stay memory-bound further (4), the A100's (every part: one chip) further (8), the H200's
    # further still (64: the ideal max)
    h100, h200, l40s = get_gpu("h100-sxm"), get_gpu("h200"), get_gpu("l40s")
    assert [S(gpu=g).coefficients.roofline_p for g in (l40s, h100, A100, h200)] == [2.0, 4.0, 8.0, 64.0]
    assert {get_gpu(g).roofline_p for g in GPUS if g.startswith("a100")} == {8.0}
    assert [get_gpu(g).roofline_p for g in ("l4", "a10g", "mi300x")] == [DEFAULT_ROOFLINE_P] * 3 == [2.0] * 3
    # a 128-sequence decode of Llama-3-8B on an H100: its GEMMs' busy time is (c^4 + w^4)^(1/4), nearer the
    # weights' time than the L40S's knee (2) would put it (attention, reading the KV, is memory-bound either way)
    from planner.sim.cost_model import step_parts
    step = predict_step(S(gpu=h100), [], [(128, 1024)])
    linear, weights, attention, kv, _ = step_parts.py_func(S(gpu=h100).coefficients.as_tuple(),
                                                           *batch_aggregates([], [(128, 1024)]))
    assert step["overlap_loss_ms"] == pytest.approx(((linear ** 4 + weights ** 4) ** 0.25 + (attention ** 4 + kv ** 4)
                                                     ** 0.25 - weights - kv) * 1e3, rel=1e-9)
    knee2 = predict_step(S(gpu=h100, cost=CostParams(roofline_p=2.0)), [], [(128, 1024)])
    assert knee2["step_ms"] - step["step_ms"] == pytest.approx((math.hypot(linear, weights) + math.hypot(attention, kv)
                                                                - (linear ** 4 + weights ** 4) ** 0.25
                                                                - (attention ** 4 + kv ** 4) ** 0.25) * 1e3, rel=1e-9)
    assert h200.roofline_p >= 64 and predict_step(S(gpu=h200), [], [(128, 1024)])["overlap_loss_ms"] == 0
    # a calibration's knee applies as given; left unset it follows the GPU when the scenario's GPU changes
    assert S(gpu=h100, cost=CostParams(roofline_p=3.0)).coefficients.roofline_p == 3.0
    assert S(gpu=h100).replace(gpu=l40s).coefficients.roofline_p == 2.0


def test_the_h200s_knee_is_what_its_own_timed_gemms_give():
    # 360 BF16 GEMMs this project timed on an H200 (bench/gemm_ramp.py: cuBLAS inside CUDA graphs, weights streamed
    # past L2): p = 2 turns compute-bound far too early there (+15%); the ideal max, the catalog's knee, is within 1%
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_efficiency

    from planner.catalog.gpus import FAMILY_ROOFLINE_P

    timed = gpu_efficiency.measured_here(gpu_efficiency.H200_TIMED, "h200")
    assert timed["shapes"] == 360 and round(timed["biases"][2.0], 3) == 0.153 and abs(timed["biases"][64.0]) < 0.01
    assert gpu_efficiency.knee(timed["biases"]) == FAMILY_ROOFLINE_P["h200"] == get_gpu("h200").roofline_p == 64.0
    # its GEMMs reach 0.795 of peak FLOP/s and its GEMVs 0.794 of peak bandwidth: within 2% and 6% of the
    # AIConfigurator medians (0.779, 0.749) that set the catalog's H200 factors
    assert round(timed["gemm_mfu"], 3) == 0.795 and round(timed["gemv_mbu"], 3) == 0.794
    assert abs(timed["gemm_mfu"] / 0.779 - 1) < 0.03 and abs(timed["gemv_mbu"] / 0.749 - 1) < 0.07


AICONFIGURATOR = os.environ.get("AICONFIGURATOR", "")
VIDUR = os.environ.get("VIDUR", "")


@pytest.mark.skipif(not VIDUR or not Path(VIDUR).exists(), reason="no clone of microsoft/vidur (VIDUR)")
def test_vidurs_a100_gemms_turn_as_sharply_as_the_a100s_knee():
    # Vidur's own A100 linear layers (four models, TP 1-8): at the A100's MFU 0.55, a knee of 2 makes their ramp
    # from 1 to 16-512 tokens 15% slow; 8, the catalog's (from AIConfigurator's tables), within 6%
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_efficiency

    table = gpu_efficiency.vidur_gemms(Path(VIDUR))
    biases = gpu_efficiency.ramp_biases(table, "a100-80gb-sxm")
    large = table.filter((pl.col("n") >= 4096) & (pl.col("k") >= 4096))
    assert large.select(pl.struct("n", "k").n_unique()).item() == 33
    assert round(biases[2.0], 3) == 0.151 and round(biases[8.0], 3) == 0.057 and A100.roofline_p == 8.0


@pytest.mark.skipif(not AICONFIGURATOR or not Path(AICONFIGURATOR).exists(),
                    reason="no clone of ai-dynamo/aiconfigurator (AICONFIGURATOR)")
def test_family_factors_are_what_the_kernel_tables_give():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_efficiency

    from planner.catalog.gpus import FAMILY_ALLREDUCE, FAMILY_EFFICIENCY, FAMILY_ROOFLINE_P

    rows = gpu_efficiency.factors(Path(AICONFIGURATOR))
    assert rows["h100-sxm"]["mfu_ratio"] == rows["h100-sxm"]["mbu_ratio"] == 1.0
    for name, (mfu_ratio, mbu_ratio) in FAMILY_EFFICIENCY.items():
        assert round(rows[name]["mfu_ratio"], 3) == mfu_ratio and round(rows[name]["mbu_ratio"], 3) == mbu_ratio
    # the A100 SXM's all-reduce factor, measured on the 80 GB part, serves both SXM parts; the H200's (1.004) is
    # left at the H100's floor
    links = gpu_efficiency.allreduce_factors(Path(AICONFIGURATOR))
    assert {round(links["a100-80gb-sxm"]["allreduce_ratio"], 3)} == set(FAMILY_ALLREDUCE.values()) == {1.281}
    assert round(links["h200"]["allreduce_ratio"], 2) == 1.0 and "h200" not in FAMILY_ALLREDUCE
    # each family's knee is the one its GEMMs' ramp picks (the A100's measured on the 80 GB SXM part, for all four)
    knees = {name: gpu_efficiency.knee(gpu_efficiency.knee_biases(Path(AICONFIGURATOR), system, name))
             for name, system in gpu_efficiency.SYSTEMS.items()}
    assert knees == {"h100-sxm": 4.0, "a100-80gb-sxm": 8.0, "h200": 64.0, "l40s": None}
    assert {name: FAMILY_ROOFLINE_P[name] for name in knees if knees[name]} == {k: v for k, v in knees.items() if v}
    assert {FAMILY_ROOFLINE_P[g] for g in FAMILY_ROOFLINE_P if g.startswith("a100")} == {8.0}


def test_a_mesh_gpu_reaches_one_direct_link_per_peer():
    # MI300X: 7 Infinity Fabric links of 64 GB/s per direction, one to each peer; a TP 2 pair shares one of them,
    # a TP 8 group all seven. A ring all-reduce moves 2 (tp - 1) / tp of the activations: 1 at TP 2, 1.75 at TP 8
    mi300x = get_gpu("mi300x")
    assert [mi300x.link_bytes_s(tp) for tp in (1, 2, 4, 8, 16)] == [448e9, 64e9, 192e9, 448e9, 448e9]
    assert get_gpu("h100-sxm").link_bytes_s(2) == get_gpu("h100-sxm").link_bytes_s(8) == 450e9   # switched
    model = get_model("llama-3.1-70b")
    comm = {tp: Scenario(model, mi300x, tp=tp).coefficients.comm_s_per_token for tp in (2, 8)}
    assert comm[8] / comm[2] == pytest.approx((1.75 / 448) / (1 / 64))


def test_an_all_reduce_over_pcie_is_discounted_once_by_its_measured_efficiency():
    # Gen4's 32 GB/s per direction at 0.7 (Vidur's 4 x A100 PCIe TP 4 tables), not 0.8 x 32 GB/s and 0.4 on top of
    # that; NVLink stays at 0.4 of 300 GB/s. Llama-3.1-70B: 2 all-reduces x 80 layers x 8,192 x 2 bytes per token
    model = get_model("llama-3.1-70b")
    per_token = 2 * 80 * 8192 * 2
    pcie = S(model, get_gpu("a100-80gb-pcie"), tp=4).coefficients.comm_s_per_token
    assert pcie == pytest.approx(1.5 * per_token / (32e9 * 0.7))
    assert S(model, A100, tp=4).coefficients.comm_s_per_token == pytest.approx(1.5 * per_token / (300e9 * 0.4))
    # a calibration's own efficiency is kept; swap copies take the host link as a copy achieves it (25.6 GB/s)
    fitted = S(model, get_gpu("l40s"), tp=2, cost=CostParams(link_efficiency=0.5)).coefficients.comm_s_per_token
    assert fitted == pytest.approx(per_token / (32e9 * 0.5))
    assert get_gpu("l40s").pcie_bytes_s == get_gpu("a100-80gb-sxm").pcie_bytes_s == 25.6e9


def test_falcon_sums_its_parallel_attention_and_mlp_before_one_all_reduce():
    # vllm/model_executor/models/falcon.py: with parallel_attn or new_decoder_architecture the row-parallel layers
    # do not reduce; the layer adds both outputs and all-reduces once
    falcon = get_model("falcon-180b")
    assert falcon.allreduces_per_layer == 1 and get_model("llama-3-70b").allreduces_per_layer == 2
    c = S(falcon, get_gpu("h100-sxm"), tp=8).coefficients
    assert c.comm_s_per_token == pytest.approx(1.75 * 80 * 14848 * 2 / (450e9 * 0.4))
    assert c.comm_fixed_s == pytest.approx(80 * 10e-6 * 3)
    sequential = from_hf_config({"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
                                    "num_attention_heads": 71, "vocab_size": 65024, "parallel_attn": False})
    assert sequential.allreduces_per_layer == 2


def test_a_rank_computes_the_layers_every_rank_holds_whole():
    # DeepSeek-V3 at TP 8: 35.70 B linear parameters active per token, 1.03 B of them replicated (MLA's latent
    # projections, the MoE gates): 5.36 B per rank, not 4.46 B; attention in MLA's MHA form, 2 · 192 + 2 · 128 FLOPs
    # per (query, key) pair and head
    s = S(get_model("deepseek-v3"), get_gpu("h200"), tp=8)
    c, params = s.coefficients, s.cost.resolved(s)
    rank_flops_per_token = c.linear_s_per_token * params.mfu * 8 * s.gpu.peak_flops(s.weight_dtype) / 2 / 8
    assert rank_flops_per_token == pytest.approx(5_363_528_384, rel=1e-9)
    pair_flops = c.attn_s_per_pair * params.mfu * 8 * s.gpu.attention_peak_flops(s.kv_cache_dtype)
    assert pair_flops == pytest.approx(61 * 128 * (2 * 192 + 2 * 128), rel=1e-9)


def test_a_decode_step_holds_at_most_max_model_len_tokens():
    s = S(max_model_len=4096)
    assert predict_step(s, [], [(1, 4095)])["step_ms"] > 0          # the decoded token is the 4,096th
    with pytest.raises(PlannerError, match="expected at most --max-model-len − 1 \\(4,095\\)"):
        predict_step(s, [], [(1, 4096)])


@pytest.mark.parametrize("window", [1, 7, 64, 4096])
def test_a_window_skips_what_its_layers_do_not_attend(window):
    # brute force over FlashAttention's window: the query at position p (from 1) attends keys max(1, p - window + 1)
    # to p; of the context's keys 1..context, the chunk reads those some query of it reaches
    for new in (1, 2, 5, 63, 64, 65, 500, 5000):
        for context in (0, 1, 6, 7, 63, 64, 100, 4095, 4096, 9000):
            queries = range(context + 1, context + new + 1)
            full = sum(queries)
            kept = sum(p - max(1, p - window + 1) + 1 for p in queries)
            earliest = min(max(1, p - window + 1) for p in queries)
            read = max(context - earliest + 1, 0)
            expected = (full - kept, context - read)
            assert window_skips.py_func(new, context, window) == expected
            assert window_skips(new, context, window) == expected          # the compiled loops' own
    assert window_skips(300, 900, 0) == (0, 0)                            # no window


def test_decode_past_a_sliding_window_costs_the_same_at_any_context():
    mistral = S(get_model("mistral-7b"), max_model_len=32768)           # a 4,096 window on every layer
    at_edge, far = (predict_step(mistral, [], [(64, k)])["step_ms"] for k in (4095, 30000))
    assert far == at_edge
    unwindowed = S(replace(get_model("mistral-7b"), sliding_window=None, sliding_layers=0), max_model_len=32768)
    assert predict_step(unwindowed, [], [(64, 30000)])["step_ms"] > 2 * far
    assert predict_step(unwindowed, [], [(64, 4095)])["step_ms"] == at_edge
    # Gemma-2 slides on half its layers: past the window a decode's attention grows at half the rate
    gemma = S(get_model("gemma-2-9b"), max_model_len=8192)
    full_gemma = S(replace(get_model("gemma-2-9b"), sliding_window=None, sliding_layers=0), max_model_len=8192)
    parts = [predict_step(g, [], [(32, 8000)]) for g in (gemma, full_gemma)]
    edge = predict_step(gemma, [], [(32, 4095)])["memory_ms"]
    assert parts[0]["memory_ms"] - edge == pytest.approx((parts[1]["memory_ms"] - edge) / 2, rel=0.01)
    # a prefill chunk after 6,000 tokens of context: each layer's pairs, windowed, are the chunk's 4,096 keys each
    chunk = batch_aggregates([(512, 6000)], [], 4096, 1.0)
    assert chunk[1] == 512 * 4096 and chunk[3] == 4095


def test_a_step_of_no_tokens_is_refused():
    for prefills, decodes in (([], []), ([(0, 0)], []), ([], [(0, 100)])):
        with pytest.raises(PlannerError, match="an empty step"):
            predict_step(S(), prefills, decodes)
