"""The Scenario: refused values name their flag as vllm serve would refuse them, defaults resolve in one place,
replace() re-resolves what was defaulted, and the reproduce flags rebuild the same scenario."""

import json
import math
import re
import shlex

import pytest
from helpers import run_cli

from planner.capacity.memory import Overheads
from planner.capacity.vllm_log import overheads_from_log
from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.cli.main import build_parser
from planner.cli.scenario_args import scenario_from_args
from planner.errors import PlannerError
from planner.scenario import FLAGS, Scenario, defaults, tp_degrees
from planner.sim.cost_model import CostParams
from planner.sim.engines import get_engine
from planner.sim.engines.base import vllm_scenario_flags

LLAMA8, LLAMA70, A100 = get_model("llama-3-8b"), get_model("llama-3-70b"), get_gpu("a100-80gb-sxm")


@pytest.mark.parametrize("fields, message", [
    ({"tp": 3}, "--tp 3: llama-3-8b has 32 attention heads (8 KV heads)"),
    ({"tp": 0}, "--tp 0: expected a whole number of at least 1"),
    ({"tp": 2.5}, "--tp 2.5: expected a whole number"),
    ({"max_model_len": -5}, "--max-model-len -5: expected a whole number of at least 1"),
    ({"max_model_len": 9000}, "--max-model-len 9000: llama-3-8b has max_position_embeddings 8,192"),
    ({"block_size": 7}, "--block-size 7: expected one of 1, 8, 16, 32, 64, 128, 256"),
    ({"num_gpu_blocks": -5}, "--num-gpu-blocks -5: expected a whole number of at least 1"),
    ({"gpu_memory_utilization": math.nan}, "--gpu-mem-util nan: expected a finite number"),
    ({"gpu_memory_utilization": 1.5}, "--gpu-mem-util 1.5: expected a fraction of GPU memory in (0, 1]"),
    ({"gpu_memory_utilization": 0.0}, "--gpu-mem-util 0: expected a fraction"),
    ({"max_num_seqs": 0}, "--max-num-seqs 0: expected a whole number of at least 1"),
    ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "--max-num-batched-tokens 256: expected "
     "--max-num-batched-tokens (256) at least --max-num-seqs (512), as vLLM requires"),
    ({"max_num_seqs": 100_000}, "--max-num-seqs 100000: expected --max-num-batched-tokens (2048) at least "
     "--max-num-seqs (100000)"),
    # vLLM V0 cuts no default: a budget below its 256 sequences does not start
    ({"engine": "vllm-v0", "max_num_batched_tokens": 128}, "--max-num-batched-tokens 128: expected "
     "--max-num-batched-tokens (128) at least --max-num-seqs (256)"),
    ({"chunked_prefill": False, "max_num_batched_tokens": 2048}, "without chunked prefill it must hold a whole prompt"),
    ({"kv_cache_dtype": "fp4"}, "--kv-cache-dtype 'fp4': expected one of auto"),
    ({"weight_dtype": "fp6"}, "--weight-dtype 'fp6': expected one of bf16"),
    ({"engine": "nope"}, "--engine 'nope': expected one of vllm-v1"),
    ({"preemption": "swap"}, "--preemption 'swap': vLLM V1 preempts by recompute only; expected --preemption "
                              "recompute, or --engine vllm-v0 to swap"),
    ({"engine": "tgi", "reserve_quantile": 0.9}, "remedies of the vllm-v1 engine, not of tgi"),
    ({"reserve_quantile": 1.5}, "--reserve-predicted 1.5: expected a quantile"),
    ({"priority": "random"}, "--priority 'random': expected one of fcfs, shortest-predicted"),
    ({"max_new_tokens": 0}, "--max-new-tokens 0: expected a whole number of at least 1"),
    ({"cost": CostParams(mfu=0.0)}, "cost model mfu 0.0"),
    ({"cost": CostParams(step_overhead_s=-1.0)}, "cost model step_overhead_s -1.0"),
    ({"cost": CostParams(mbu="fast")}, "cost model mbu 'fast'"),
    # what a release would not do: V1 chunked every prompt through 0.11.0; --async-scheduling came after 0.9.0;
    # 256-token blocks with 0.11.1
    ({"chunked_prefill": False, "max_num_batched_tokens": 8192, "overheads": Overheads(vllm_version="0.10")},
     "--no-chunked-prefill: V1 0.9.1-0.10 (FlashInfer sampler, as in the vllm-openai images; piecewise CUDA graphs) "
     "chunks every prompt whatever --no-enable-chunked-prefill says through 0.11.0 (vllm#18547, fixed in 0.11.1 by "
     "PR #28665); expected chunked prefill on, or --vllm-version 0.13 or later"),
    ({"chunked_prefill": False, "max_num_batched_tokens": 8192, "overheads": Overheads(vllm_version="0.11")},
     "--no-chunked-prefill: V1 0.11 (FlashInfer sampler; full CUDA graphs for decode) chunks every prompt"),
    ({"async_scheduling": True, "overheads": Overheads(vllm_version="0.8")}, "--async-scheduling: V1 0.7-0.9.0"),
    ({"block_size": 256, "overheads": Overheads(vllm_version="0.11")},
     "--block-size 256: V1 0.11 (FlashInfer sampler; full CUDA graphs for decode) takes at most 128"),
    ({"block_size": 256, "engine": "vllm-v0"}, "--block-size 256: V0 0.6.5-0.10 (VLLM_USE_V1=0) takes at most 128"),
    # TGI's KV budget is its wiggle room (the launch command writes the utilization there), which must be below 1
    ({"engine": "tgi", "gpu_memory_utilization": 1.0}, "--gpu-mem-util 1: TGI asserts TGI_WIGGLE_ROOM < 1"),
])
def test_values_vllm_would_refuse_are_refused_by_name(fields, message):
    with pytest.raises(PlannerError) as info:
        Scenario(LLAMA8, A100, **fields)
    assert message in str(info.value)


@pytest.mark.parametrize("gpu, fields, limits", [
    ("a100-80gb-sxm", {"max_num_batched_tokens": 128}, (128, 128)),         # the default 256 sequences cut to 128
    ("h100-sxm", {"max_num_batched_tokens": 512}, (512, 512)),              # 1,024 cut to 512
    ("h100-sxm", {"max_num_seqs": 1, "max_model_len": 4096}, (1, 4096)),    # the default 8,192 budget cut to 4,096
    ("h100-sxm", {"max_num_seqs": 2, "max_model_len": 4096}, (2, 8192)),
    ("a100-80gb-sxm", {"chunked_prefill": False}, (256, 8192)),             # raised to a whole 8,192-token prompt
    ("h100-sxm", {}, (1024, 8192)),
    # 0.10 cut the sequences to a budget, not the budget to the sequences (that came with 0.11)
    ("h100-sxm", {"max_num_seqs": 1, "max_model_len": 4096, "overheads": Overheads(vllm_version="0.10")}, (1, 8192)),
    ("h100-sxm", {"max_num_batched_tokens": 512, "overheads": Overheads(vllm_version="0.10")}, (512, 512)),
])
def test_limits_settle_as_vllm_engine_arguments_settle_them(gpu, fields, limits):
    """vLLM's EngineArgs._set_default_max_num_seqs_and_batched_tokens_args: a default budget is cut to
    max_num_seqs × max_model_len, then a default max_num_seqs to the budget; the pages' "auto" says the same."""
    scenario = Scenario(LLAMA8, get_gpu(gpu), **fields)
    assert (scenario.max_num_seqs, scenario.max_num_batched_tokens) == limits
    auto = defaults(LLAMA8, get_gpu(gpu), fields.get("max_model_len"), fields.get("chunked_prefill", True),
                    fields.get("max_num_seqs"), fields.get("max_num_batched_tokens"), release=scenario.release)
    assert (fields.get("max_num_seqs") or auto["max_num_seqs"],
            fields.get("max_num_batched_tokens") or auto["max_num_batched_tokens"]) == limits


def test_what_a_release_refuses_its_successors_take():
    # 0.12-0.13 honour --no-enable-chunked-prefill and take 256-token blocks; other engines are not vLLM's to refuse
    later = Scenario(LLAMA8, A100, block_size=256, chunked_prefill=False, max_num_batched_tokens=8192,
                     overheads=Overheads(vllm_version="0.13"))
    assert (later.block_size, later.chunked_prefill) == (256, False)
    tgi = Scenario(LLAMA8, A100, engine="tgi", block_size=256, overheads=Overheads(vllm_version="0.11"))
    assert tgi.block_size == 256
    # TGI takes any utilization below 1 as its wiggle room; vLLM takes 1 itself
    assert Scenario(LLAMA8, A100, engine="tgi", gpu_memory_utilization=0.99).gpu_memory_utilization == 0.99
    assert Scenario(LLAMA8, A100, gpu_memory_utilization=1).gpu_memory_utilization == 1.0


def test_a_model_read_from_a_config_json_is_rebuilt_from_it(tmp_path, monkeypatch):
    from planner.catalog.presets import load_config

    # a folder named after a preset holds another model: the flags name its file, not the preset's name
    folder = tmp_path / "mistral-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
        "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 4096,
        "_name_or_path": "acme/tiny-llama"}))
    monkeypatch.chdir(tmp_path)
    mine = Scenario(load_config("mistral-7b/config.json"), A100)       # a relative path, as typed
    assert mine.cli_args()[:2] == ["--model", "mistral-7b/config.json"]
    # vllm serve takes the folder (the weights beside the config), from anywhere; the id stays the config's
    assert (mine.model.name, mine.model.hf_id, mine.model.serve_path) == ("mistral-7b", "acme/tiny-llama", str(folder))
    config = {"max_num_seqs": 8, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True}
    assert f"vllm serve {folder} " in get_engine("vllm-v1").command(config, mine)
    again = scenario_from_args(build_parser().parse_args(["memory", *mine.cli_args()]))
    assert again.model == mine.model and again.memory == mine.memory
    assert Scenario(get_model("mistral-7b"), A100).cli_args()[:2] == ["--model", "mistral-7b"]     # the preset
    # a file of another name is no folder vllm serve can take: the model is served by its id
    (folder / "tiny.json").write_text((folder / "config.json").read_text())
    other = Scenario(load_config(folder / "tiny.json"), A100)
    assert other.model.name == "tiny" and "vllm serve acme/tiny-llama " in get_engine("vllm-v1").command(config, other)


def test_tp_degrees_follow_vllms_head_rules():
    assert tp_degrees(LLAMA8) == [1, 2, 4, 8, 16, 32]          # 32 heads; 8 KV heads split, then replicate
    # 28 heads, 4 KV heads: 7 and 14 split neither; 28 the heads allow, but not the MLP's 18,944 nor the vocabulary
    assert tp_degrees(get_model("qwen2.5-7b")) == [1, 2, 4]
    assert 3 not in tp_degrees(LLAMA70) and 8 in tp_degrees(LLAMA70)
    assert Scenario(get_model("deepseek-v3"), get_gpu("h200"), tp=8).tp == 8      # MLA: one latent on every rank


@pytest.mark.parametrize("model, tp, message", [
    ("qwen2.5-7b", 28, "qwen2.5-7b's intermediate_size 18,944 must divide evenly"),
    ("opt-13b", 5, "opt-13b's vocabulary of 50,272 (padded to 50,304) must divide evenly"),
    # the FP8 checkpoint's 128 x 128 blocks: 18,432 / 32 = 576 per rank (vllm#12256); dequantized to bf16 it shards
    ("deepseek-v3", 32, "scales 128-wide weight blocks, and its intermediate_size 18,432 leaves 576 per rank"),
])
def test_tp_follows_vllms_sharding_of_widths_vocabulary_and_fp8_blocks(model, tp, message):
    with pytest.raises(PlannerError, match=re.escape(f"--tp {tp}: ") + ".*" + re.escape(message)):
        Scenario(get_model(model), get_gpu("h200"), tp=tp)
    assert tp not in tp_degrees(get_model(model))
    assert tp_degrees(get_model("deepseek-v3")) == [1, 2, 4, 8, 16]
    assert 32 in tp_degrees(get_model("deepseek-v3"), "bf16")


def test_defaults_resolve_once_and_replace_resolves_them_again():
    s = Scenario(LLAMA8, A100)
    assert (s.max_model_len, s.max_num_seqs, s.max_num_batched_tokens, s.weight_dtype) == (8192, 256, 2048, "bf16")
    assert s.auto == {"weight_dtype", "max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens",
                      "async_scheduling", "vllm_version"}
    # async scheduling as the release does: vllm serve's default from 0.14, opt-in before; re-resolved with it
    assert s.async_scheduling is True
    assert s.replace(overheads=Overheads(vllm_version="0.13")).async_scheduling is False
    assert s.replace(overheads=Overheads(vllm_version="0.15")).async_scheduling is True
    assert Scenario(LLAMA8, A100, async_scheduling=True).replace(
        overheads=Overheads(vllm_version="0.10")).async_scheduling is True                 # as entered
    on_h100 = s.replace(gpu=get_gpu("h100-sxm"))                # vllm serve's large-GPU limits
    assert (on_h100.max_num_seqs, on_h100.max_num_batched_tokens) == (1024, 8192)
    pinned = Scenario(LLAMA8, A100, max_num_seqs=64).replace(gpu=get_gpu("h100-sxm"))
    assert pinned.max_num_seqs == 64 and pinned.max_num_batched_tokens == 8192
    whole = s.replace(chunked_prefill=False)                    # the budget must then hold a whole prompt
    assert whole.max_num_batched_tokens == 8192
    assert Scenario(get_model("deepseek-v3"), get_gpu("h200"), tp=8).weight_dtype == "fp8"   # as it ships


def test_an_mla_model_on_hopper_takes_the_block_flashmla_forces():
    # vllm/platforms/cuda.py: FlashMLA, the MLA backend on Hopper, raises a --block-size that is not a multiple of 64
    # to 64; Ampere runs Triton MLA on 16; other models and engines keep 16
    ds, h200 = get_model("deepseek-v3"), get_gpu("h200")
    s = Scenario(ds, h200, tp=8)
    assert s.block_size == 64 and "block_size" in s.auto
    assert s.settings.block_size == 64 and s.memory.block_size == 64
    assert [Scenario(ds, h200, tp=8, block_size=b).block_size for b in (16, 32, 64, 128)] == [64, 64, 64, 128]
    assert "block_size" not in Scenario(ds, h200, tp=8, block_size=128).auto
    per_block = 64 * 576 * 2 * 61                               # bf16 latent, 61 layers, held whole by each rank
    assert s.memory.num_blocks == s.memory.kv_pool_bytes // per_block
    assert s.memory.kv_capacity_tokens == 64 * s.memory.num_blocks
    assert s.replace(gpu=A100).block_size == 16                 # forced by the GPU: a new GPU resolves it again
    assert s.replace(engine="tgi").block_size == 16
    assert Scenario(LLAMA8, h200).block_size == 16
    assert Scenario(ds, get_gpu("a100-80gb-sxm"), tp=8, block_size=32).block_size == 32
    assert "--block-size 64" in " ".join(vllm_scenario_flags(s))
    assert "--block-size" not in s.cli_args()


def test_every_layer_reads_the_same_dtypes():
    fp8 = Scenario(LLAMA8, A100, weight_dtype="fp8", kv_cache_dtype="fp8")
    base = Scenario(LLAMA8, A100)
    assert fp8.coefficients.kv_bytes_per_token == base.coefficients.kv_bytes_per_token / 2
    assert fp8.coefficients.weight_bytes < 0.6 * base.coefficients.weight_bytes        # embeddings stay 16-bit
    # the A100 has no FP8 tensor cores: vLLM runs FP8 weights there weight-only, at the 16-bit peak
    assert fp8.coefficients.linear_s_per_token == base.coefficients.linear_s_per_token
    h100 = get_gpu("h100-sxm")
    on_h100 = {kv: Scenario(LLAMA8, h100, weight_dtype="fp8", kv_cache_dtype=kv).coefficients
               for kv in ("auto", "fp8", "fp8_e5m2")}
    bf16 = Scenario(LLAMA8, h100).coefficients
    # FP8 weights: the linear layers at the FP8 peak (1,979 TFLOPS), the output head and attention still in 16 bits
    assert on_h100["auto"].linear_s_per_token == pytest.approx(bf16.linear_s_per_token * 989 / 1979)
    assert (on_h100["auto"].logit_s_per_seq, on_h100["auto"].attn_s_per_pair) == (bf16.logit_s_per_seq,
                                                                                  bf16.attn_s_per_pair)
    # FlashAttention 3 computes attention in FP8 over an e4m3 KV cache (not e5m2), on Hopper only
    assert on_h100["fp8"].attn_s_per_pair == pytest.approx(bf16.attn_s_per_pair * 989 / 1979)
    assert on_h100["fp8_e5m2"].attn_s_per_pair == bf16.attn_s_per_pair
    # vLLM V1's backend; V0's kernels dequantize the cache and compute in 16 bits
    assert Scenario(LLAMA8, h100, kv_cache_dtype="fp8", engine="vllm-v0").coefficients.attn_s_per_pair == \
        Scenario(LLAMA8, h100, engine="vllm-v0").coefficients.attn_s_per_pair
    l40s = get_gpu("l40s")
    assert Scenario(LLAMA8, l40s, kv_cache_dtype="fp8").coefficients.attn_s_per_pair == \
        Scenario(LLAMA8, l40s).coefficients.attn_s_per_pair
    assert fp8.settings.num_blocks == fp8.memory.num_blocks > 2 * base.memory.num_blocks


def test_the_reproduce_flags_rebuild_the_same_scenario():
    log = "Model loading took 4.52 GiB memory\nAvailable KV cache memory: 60.25 GiB\ntotal_memory=79.14GiB\n"
    gpu, overheads = overheads_from_log(log, A100, 0.92)
    original = Scenario(LLAMA8, gpu.with_price(2.25), tp=2, weight_dtype="fp8", kv_cache_dtype="fp8", block_size=32,
                        gpu_memory_utilization=0.92, max_model_len=4096, max_num_seqs=128, overheads=overheads,
                        max_new_tokens=512, chunked_prefill=False)
    args = build_parser().parse_args(["memory", *original.cli_args()])
    rebuilt = scenario_from_args(args)
    # every term the same; the overheads now read as entered (the log's figures, written out as flags)
    assert {**rebuilt.memory.to_dict(), "overheads_source": None} == {**original.memory.to_dict(),
                                                                       "overheads_source": None}
    assert rebuilt.settings == original.settings
    assert rebuilt.coefficients == original.coefficients and rebuilt.gpu == original.gpu
    line = shlex.join(original.cli_args())
    for flag in ("--weight-dtype fp8", "--block-size 32", "--max-num-seqs 128", "--no-chunked-prefill",
                 "--max-new-tokens 512", "--cudagraphs outside", "--weights-gib 4.5", "--gpu-memory-gib 79.1",
                 "--price 2.25"):
        assert flag in line, flag
    assert "--max-num-batched-tokens" not in line and "--vllm-log" not in line      # defaulted; the log written out
    # numbers exactly: six digits (0.85035) moved this pool by a block
    odd = Scenario(LLAMA8, A100.with_price(2.123456789), gpu_memory_utilization=0.8503501750875437)
    again = scenario_from_args(build_parser().parse_args(["memory", *odd.cli_args()]))
    assert again.memory.num_blocks == odd.memory.num_blocks and again.gpu.price_per_hour == 2.123456789

    # a release's profiling rules and V1's scheduling mode travel as flags too
    older = Scenario(LLAMA8, A100, tp=2, async_scheduling=False, overheads=Overheads(vllm_version="0.15"))
    line = shlex.join(older.cli_args())
    assert "--vllm-version 0.15" in line and "--no-async-scheduling" in line and "--cudagraphs" not in line
    again = scenario_from_args(build_parser().parse_args(["memory", *older.cli_args()]))
    assert again.memory == older.memory and again.settings == older.settings and not again.async_scheduling
    assert again.settings.async_scheduling is False and Scenario(LLAMA8, A100).settings.async_scheduling is True
    # a release's own default travels as the release alone; the opt-in of an older one as its flag
    old = Overheads(vllm_version="0.10")
    assert "async-scheduling" not in shlex.join(Scenario(LLAMA8, A100, overheads=old).cli_args())
    opted = Scenario(LLAMA8, A100, overheads=old, async_scheduling=True)
    assert "--async-scheduling" in opted.cli_args()
    assert scenario_from_args(build_parser().parse_args(["memory", *opted.cli_args()])).async_scheduling is True


def test_the_vllm_release_defaults_to_the_newest_that_runs_the_engine_and_refuses_one_that_does_not():
    v1 = Scenario(LLAMA8, A100)
    assert v1.overheads.vllm_version == "current" and "--vllm-version" not in v1.cli_args()
    # vLLM V0 left in 0.11: a V0 server is profiled by V0's rules, re-resolved when the engine changes
    v0 = v1.replace(engine="vllm-v0")
    assert v0.overheads.vllm_version == "0.6" and "vllm_version" in v0.auto
    assert v0.memory.num_blocks != v1.memory.num_blocks and v0.replace(engine="vllm-v1").memory == v1.memory
    pinned = Scenario(LLAMA8, A100, overheads=Overheads(vllm_version="0.15"))
    assert pinned.replace(engine="tgi").overheads.vllm_version == "0.15"      # as entered: other engines take any
    assert "--vllm-version 0.15" in shlex.join(pinned.cli_args())
    with pytest.raises(PlannerError, match=r"--vllm-version 0.15: V1 0.14-0.16 .* runs vllm-v1, not --engine "
                                           r"vllm-v0 .*; expected 0.6 \(left out: 0.6, V0 0.6.5-0.10"):
        pinned.replace(engine="vllm-v0")
    with pytest.raises(PlannerError, match=r"--vllm-version 0.6: .* runs vllm-v0, not --engine vllm-v1 .*expected "
                                           r"0.8, 0.10, 0.11, 0.13, 0.15, 0.19, current \(left out: current"):
        Scenario(LLAMA8, A100, overheads=Overheads(vllm_version="0.6"))
    # a startup log pasted without a version is the engine's release too, and still reproduces its pool
    gpu, fitted = overheads_from_log("Model loading took 14.99 GiB memory\nAvailable KV cache memory: 50.00 GiB\n",
                                     A100, 0.9)
    logged = Scenario(LLAMA8, gpu, engine="vllm-v0", overheads=fitted)
    assert logged.overheads.vllm_version == "0.6"
    assert logged.memory.kv_pool_bytes == pytest.approx(50 * 2**30, abs=2)


def test_a_startup_log_of_another_server_is_refused():
    # Llama-3.1-8B's log (14.99 GiB of weights) is its server's; applied to Llama-3-70B at TP 4 (32.85 GiB per
    # GPU) it would have given that scenario a KV pool half again too large
    log = "Model loading took 14.99 GiB memory\nAvailable KV cache memory: 54.49 GiB\ntotal_memory=79.19GiB\n"
    gpu, overheads = overheads_from_log(log, get_gpu("h100-sxm"), 0.9)
    assert Scenario(get_model("llama-3.1-8b"), gpu, overheads=overheads).memory.weights_bytes_per_gpu == \
        int(round(14.99 * 1024**3))
    for model, tp, dtype in (("llama-3-70b", 4, None), ("llama-3.1-8b", 2, None), ("llama-3.1-8b", 1, "fp8")):
        with pytest.raises(PlannerError, match="the log loaded 14.99 GiB of weights per GPU, but"):
            Scenario(get_model(model), gpu, tp=tp, weight_dtype=dtype, overheads=overheads)


@pytest.mark.parametrize("command", ["memory", "step", "simulate", "calibrate", "recommend", "report"])
def test_every_command_takes_the_same_scenario_flags(command):
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    options = {o for action in sub._actions for o in action.option_strings}
    assert set(FLAGS.values()) <= options, set(FLAGS.values()) - options


@pytest.mark.parametrize("args", [["memory"], ["simulate", "--synthetic", "requests=10,input=5,output=5,qps=1"]])
def test_a_refused_value_is_one_error_line_before_any_work(tmp_path, args):
    proc = run_cli(*args, "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--tp", "3", "--json",
                   db=tmp_path / "s.duckdb", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("error: --tp 3: ")
