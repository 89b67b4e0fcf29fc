"""Memory math: the seeds' worked numbers, the reference model table, TP replication, MLA, fp8, vLLM's budget."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from planner.capacity.memory import Overheads, kv_bytes_per_token, kv_heads_per_rank, seed_pool_sequences
from planner.catalog.gpus import GPUS, GiB, get_gpu
from planner.catalog.models import active_param_count, param_count, weights_bytes, weights_bytes_per_gpu
from planner.catalog.presets import from_hf_config, get_model, preset_names
from planner.errors import PlannerError
from planner.scenario import Scenario
from planner.sim.step_spec import beyond_limits

# reference/engines.md §8: KV bytes per token in bf16 over all layers of one replica
REFERENCE_KV = {"llama-3-8b": 131_072, "llama-3-70b": 327_680, "llama-3.1-405b": 516_096, "mistral-7b": 131_072,
                "mixtral-8x7b": 131_072, "qwen2.5-7b": 57_344, "qwen2.5-72b": 327_680, "yi-34b": 245_760,
                "falcon-180b": 163_840, "deepseek-v3": 70_272, "gemma-2-9b": 344_064}


@pytest.mark.parametrize("name, expected", REFERENCE_KV.items())
def test_kv_bytes_per_token_match_the_reference_table(name, expected):
    assert kv_bytes_per_token(get_model(name)) == expected
    assert kv_bytes_per_token(get_model(name), "fp8") == expected // 2


def test_seed_kv_figures():
    # seed 003: 2 × 32 × 8 × 128 × 2 B = 131,072 B ≈ 128 KB; 70B: 320 KB
    assert kv_bytes_per_token(get_model("llama-3-8b")) == 128 * 1024
    assert kv_bytes_per_token(get_model("llama-3-70b")) == 320 * 1024


@pytest.mark.parametrize("name", preset_names())
def test_parameter_counts_within_half_a_percent_of_published(name):
    model = get_model(name)
    if name.startswith("opt-"):       # published only as 13B / 66B / 175B: within that rounding
        assert abs(param_count(model) - model.published_params) <= 0.5e9
    else:
        assert param_count(model) == pytest.approx(model.published_params, rel=0.005)
    exact = {"llama-3-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496, "qwen2.5-72b": 72_706_203_648,
             "falcon-180b": 179_522_565_120, "gemma-2-9b": 9_241_705_984, "mixtral-8x7b": 46_702_792_704,
             "llama-2-7b": 6_738_415_616, "qwen3-14b": 14_768_307_200, "mixtral-8x22b": 140_630_071_296}
    if name in exact:                 # Hugging Face safetensors totals, to the parameter
        assert param_count(model) == exact[name]


def test_parameter_count_terms():
    llama = get_model("llama-3-8b")
    # embeddings + untied head + 32 × (attention 4096·(4096 + 2·1024) + 4096·4096, MLP 3·4096·14336, 2 norms) + norm
    expected = 2 * 128256 * 4096 + 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096) + 4096
    assert param_count(llama) == expected == 8_030_261_248
    # Qwen2 adds q/k/v biases: 28 layers × (3584 + 2·512)
    qwen = get_model("qwen2.5-7b")
    assert param_count(qwen) - param_count(from_hf_config({**_hf("qwen2.5-7b"), "attention_bias": False})) \
        == 28 * (3584 + 2 * 512)
    mixtral = get_model("mixtral-8x7b")
    assert active_param_count(mixtral) == pytest.approx(12.9e9, rel=0.01)
    assert active_param_count(get_model("deepseek-v3")) == pytest.approx(37.5e9, rel=0.02)
    # HF total 684,531,386,000 = main 671,026,419,200 + MTP 11,610,068,224 + its embedding/head copies
    # 1,853,358,080 + FP8 scales 41,540,496
    assert param_count(get_model("deepseek-v3")) == 671_026_419_200
    assert param_count(get_model("deepseek-v3"), include_mtp=True) == 684_531_386_000 - 41_540_496


def _hf(name):
    from planner.catalog.presets import _PRESETS
    return _PRESETS[name][1]


def test_weight_bytes_by_dtype():
    llama = get_model("llama-3-8b")
    assert weights_bytes(llama, "bf16") == 2 * 8_030_261_248
    # quantized checkpoints keep the embedding and the untied head in 16 bits
    sixteen = 2 * 128256 * 4096
    assert weights_bytes(llama, "fp8") == weights_bytes(llama, "int8") == (8_030_261_248 - sixteen) + 2 * sixteen
    assert weights_bytes(llama, "int4") == pytest.approx((8_030_261_248 - sixteen) * (0.5 + 2 / 128) + 2 * sixteen,
                                                         rel=1e-9)
    assert weights_bytes(llama, "bf16") / GiB == pytest.approx(14.96, abs=0.01)   # vLLM logs 14.99 GiB


def test_tp_splits_kv_heads_then_replicates():
    llama70 = get_model("llama-3-70b")        # 8 KV heads
    assert [kv_heads_per_rank(llama70, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    assert kv_bytes_per_token(llama70, tp=8) == 327_680 // 8
    assert kv_bytes_per_token(llama70, tp=16) == 327_680 // 8      # one head per rank, replicated


def test_replicated_layers_are_held_whole_by_every_rank():
    # vLLM's ReplicatedLinear: MLA's q_a_proj (7,168 x 1,536) and kv_a_proj_with_mqa (7,168 x 576) on 61 layers,
    # the MoE gate (7,168 x 256) on 58; everything else splits over the ranks
    ds = get_model("deepseek-v3")
    whole = 61 * 7168 * (1536 + 576) + 58 * 7168 * 256
    assert weights_bytes_per_gpu(ds, "fp8", 8) == -(-(weights_bytes(ds, "fp8") - whole) // 8) + whole
    assert weights_bytes_per_gpu(ds, "fp8", 8) - weights_bytes(ds, "fp8") / 8 == pytest.approx(0.84 * 2**30, rel=0.01)
    mixtral = get_model("mixtral-8x7b")                            # the gate alone: 4,096 x 8 on 32 layers
    assert weights_bytes_per_gpu(mixtral, "bf16", 2) == weights_bytes(mixtral, "bf16") // 2 + 4096 * 8 * 32
    assert weights_bytes_per_gpu(get_model("llama-3-8b"), "bf16", 4) == weights_bytes(get_model("llama-3-8b")) // 4


def test_ranks_past_the_kv_heads_hold_a_whole_kv_head_each():
    # QKVParallelLinear at TP 16 with 8 KV heads: each rank holds one head's k_proj and v_proj (8,192 x 128 each,
    # 80 layers): 80 * 2 * 8,192 * 128 parameters, 335 MB in bf16, where an even split of the 8 heads gives 168 MB
    llama70 = get_model("llama-3-70b")
    one_head = 80 * 2 * 8192 * 128
    even = weights_bytes(llama70, "bf16") / 16
    assert weights_bytes_per_gpu(llama70, "bf16", 16) - even == pytest.approx(2 * one_head * (1 - 8 / 16), abs=1)
    assert weights_bytes_per_gpu(llama70, "bf16", 8) == weights_bytes(llama70, "bf16") // 8     # 8 ranks, 8 heads


def test_mla_latent_is_held_whole_by_every_rank():
    ds = get_model("deepseek-v3")
    assert kv_bytes_per_token(ds) == 576 * 2 * 61
    assert kv_bytes_per_token(ds, tp=8) == kv_bytes_per_token(ds)
    assert kv_bytes_per_token(ds, "fp8") == 576 * 61


def test_plan_reproduces_the_reference_worked_example():
    # engines.md §3.3: Llama-3-8B bf16, A100-80GB, util 0.9: ≈ 71.2 GiB requested, ≈ 54 GiB KV, ≈ 444k tokens,
    # ≈ 27.8k blocks, ≈ 54x at max_model_len 8192
    plan = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), max_model_len=8192).memory
    assert plan.requested_bytes / GiB == pytest.approx(71.2, abs=0.05)
    assert plan.kv_pool_bytes / GiB == pytest.approx(54.5, abs=1.0)
    assert plan.kv_capacity_tokens == pytest.approx(444_000, rel=0.02)
    assert plan.num_blocks == pytest.approx(27_800, rel=0.02)
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / 512)
    assert plan.max_concurrency == pytest.approx(54, rel=0.03)


def test_budget_terms_add_up_and_move_the_right_way():
    llama, a100 = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
    base = Scenario(llama, a100).memory
    assert base.kv_pool_bytes == (base.requested_bytes - base.weights_bytes_per_gpu - base.activation_bytes
                                  - base.non_torch_bytes - base.cudagraph_bytes)
    assert base.num_blocks == base.kv_pool_bytes // (16 * 131_072)
    outside = Scenario(llama, a100, overheads=Overheads(cudagraph_counted=False)).memory
    assert outside.kv_pool_bytes - base.kv_pool_bytes == base.cudagraph_bytes > 0
    bigger_budget = Scenario(llama, a100, max_num_batched_tokens=16384).memory
    assert bigger_budget.activation_bytes > base.activation_bytes and bigger_budget.num_blocks < base.num_blocks
    fp8 = Scenario(llama, a100, kv_cache_dtype="fp8").memory
    assert fp8.num_blocks == pytest.approx(2 * base.num_blocks, abs=1)
    assert Scenario(llama, a100, num_gpu_blocks=1000).memory.kv_capacity_tokens == 16_000
    assert Scenario(llama, get_gpu("h100-sxm")).memory.max_num_batched_tokens == 8192
    assert base.max_num_batched_tokens == 2048 and base.max_num_seqs == 256
    utils = [Scenario(llama, a100, gpu_memory_utilization=u).memory.num_blocks for u in (0.5, 0.7, 0.9, 0.95)]
    assert utils == sorted(utils)
    with pytest.raises(PlannerError, match="gpu-mem-util"):
        Scenario(llama, a100, gpu_memory_utilization=1.5).memory


def test_sliding_window_concurrency_counts_only_the_window():
    mistral = get_model("mistral-7b")        # window 4096 on every layer
    plan = Scenario(mistral, get_gpu("a100-80gb-sxm"), max_model_len=32768).memory
    per_request = math.ceil((4096 - 1 + 2048) / 16) + 1
    assert plan.blocks_per_max_len_request == per_request
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / per_request)
    # a pool smaller than 32,768 tokens still starts: each layer holds the window, not the whole context
    small = Scenario(mistral, get_gpu("l4"), max_model_len=32768, gpu_memory_utilization=0.78)
    assert small.memory.kv_capacity_tokens < 32768 <= small.memory.kv_capacity_tokens * small.memory.max_concurrency
    assert small.memory_problems == ()
    # two 30,000-token sequences hold 2 x 385 window blocks, not 2 x 1,876
    assert beyond_limits(small, [], [(2, 30_000)]) == []
    assert beyond_limits(small, [], [(8, 30_000)]) == [f"3,080 KV blocks, more than the {small.memory.num_blocks:,} "
                                                       "of the pool"]
    # the window's straddled block counts even past a short request's own length (vLLM: 28,969 / 33 at 512)
    assert Scenario(mistral, get_gpu("a100-80gb-sxm"), max_model_len=512).memory.blocks_per_max_len_request == 33
    # Gemma-2: half its layers slide. vLLM's groups each span half the layers, so a request takes 512 full-attention
    # and 385 window blocks of half a pool block each (its log: 20,261 group blocks / 897 = 22.59 at util 0.9)
    gemma = Scenario(get_model("gemma-2-9b"), get_gpu("a100-80gb-sxm")).memory
    assert gemma.blocks_per_max_len_request == (512 + 385) / 2
    assert gemma.max_concurrency == pytest.approx(2 * gemma.num_blocks / 897)


def test_seed_capacity_arithmetic_brackets_its_quoted_numbers():
    # seed 003: 80 × 0.9 − 16 = 56 GB → ≈109 sequences at 4K, ≈54 at 8K; 70B on 4 GPUs: 320 × 0.9 − 140 → ≈116.
    # Its units mix GB and GiB: the quoted figures lie between the decimal and the binary reading of its formula.
    for total, weights, kv, context, quoted in ((80, 16, 131_072, 4096, 109), (80, 16, 131_072, 8192, 54),
                                                (320, 140, 327_680, 4096, 116)):
        low = seed_pool_sequences(total, 0.9, weights, kv, context, binary=False)
        high = seed_pool_sequences(total, 0.9, weights, kv, context, binary=True)
        assert low < quoted < high
    assert seed_pool_sequences(80, 0.9, 16, 131_072, 4096) == pytest.approx(112.0)


def test_the_seed_views_vllm_column_is_vllms_own_concurrency_line():
    # Mistral-7B slides a 4,096-token window: at 8K vLLM holds it and a step (385 blocks at a 2,048 budget), not 512
    from planner.capacity.report import capacity_report

    report = capacity_report(Scenario(get_model("mistral-7b"), get_gpu("a100-80gb-sxm"), max_model_len=4096,
                                      max_num_batched_tokens=2048))
    curve = {row["max_model_len"]: row["max_concurrency"] for row in report.concurrency_curve}
    rows = {row["context"]: row for row in report.seed["rows"]}
    plan = report.plan
    assert rows[8192]["vllm"] == curve[8192] == pytest.approx(plan.num_blocks / 385)
    assert rows[4096]["vllm"] == curve[4096] == pytest.approx(plan.num_blocks / 257)
    # the seed's arithmetic ignores the window: at twice the context, half the sequences
    assert rows[8192]["seed_binary"] == pytest.approx(rows[4096]["seed_binary"] / 2)


def test_catalogs_name_what_the_contract_names():
    assert set(GPUS) >= {"a100-40gb-sxm", "a100-80gb-sxm", "a100-40gb-pcie", "a100-80gb-pcie", "h100-sxm",
                         "h100-pcie", "h200", "l40s", "l4", "a10g", "mi300x"}
    assert set(preset_names()) >= {"llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b",
                                   "qwen2.5-7b", "qwen2.5-72b", "yi-34b", "falcon-180b", "deepseek-v3",
                                   "gemma-2-9b", "opt-13b", "opt-66b", "opt-175b"}
    for name in ("a100-80gb-sxm", "a100-80gb-pcie"):
        assert 79.1 <= GPUS[name].memory_gib <= 79.2
    for name in ("a100-40gb-sxm", "a100-40gb-pcie"):
        assert 39.4 <= GPUS[name].memory_gib <= 39.6


def test_config_json_errors_name_the_missing_fields(tmp_path):
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}))
    with pytest.raises(PlannerError, match="num_hidden_layers, vocab_size, intermediate_size"):
        get_model(str(path))
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    with pytest.raises(PlannerError, match="'bert' is not supported"):
        get_model(str(path))
    with pytest.raises(PlannerError, match="unknown model"):
        get_model("llama-9")


def test_a_preset_is_found_by_its_hugging_face_id():
    assert get_model("Qwen/Qwen3-14B") == get_model("qwen3-14b")
    assert get_model(" meta-llama/llama-2-7b-hf ").name == "llama-2-7b"
    # Qwen3 14B: 2 (K and V) × 40 layers × 8 KV heads × 128 × 2 B = 160 KiB per token
    assert kv_bytes_per_token(get_model("qwen/qwen3-14b")) == 160 * 1024
    with pytest.raises(PlannerError, match="unknown model 'Qwen/Qwen3-15B'"):
        get_model("Qwen/Qwen3-15B")


def test_a_fine_tune_published_with_its_base_config_is_the_base_preset():
    from planner.catalog.presets import _PRESETS, FINE_TUNES, preset_name

    assert get_model("meta-llama/Llama-3.1-8B-Instruct") == get_model("llama-3.1-8b")
    assert preset_name(" META-LLAMA/Llama-3.3-70B-Instruct ") == "llama-3.1-70b"
    assert get_model("mistralai/Mixtral-8x7B-Instruct-v0.1").moe.experts == 8
    # each id names one preset, and none is a preset's own id (which would make it two models)
    ids = [t.lower() for tunes in FINE_TUNES.values() for t in tunes]
    assert len(ids) == len(set(ids)) and not set(ids) & {hf.lower() for hf, *_ in _PRESETS.values()}
    assert set(FINE_TUNES) <= set(_PRESETS)
    # a fine-tune whose config differs is not taken for its base: Qwen2.5-7B-Instruct's context is 32,768 tokens
    with pytest.raises(PlannerError, match="unknown model 'Qwen/Qwen2.5-7B-Instruct'"):
        get_model("Qwen/Qwen2.5-7B-Instruct")


def test_every_supported_family_reads(tmp_path):
    configs = {
        "qwen3": {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
                  "tie_word_embeddings": False},
        "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 5120, "num_hidden_layers": 36,
                     "num_attention_heads": 40, "intermediate_size": 20480, "vocab_size": 50432},
    }
    # Qwen3-8B: 8,190,735,360 parameters; Pythia-12B: 11,846,072,320
    assert param_count(from_hf_config(configs["qwen3"])) == pytest.approx(8_190_735_360, rel=0.005)
    assert param_count(from_hf_config(configs["gpt_neox"])) == pytest.approx(11_846_072_320, rel=0.005)
    assert np.isfinite(kv_bytes_per_token(from_hf_config(configs["qwen3"])))


def test_each_vllm_versions_profiling_rules_term_by_term():
    # vLLM 0.12-0.16 (the sorting sampler): Llama-2-70B at TP 4 on H100 SXM with 128 sequences and a 2,048-token
    # budget: min(128, 2048) rows × 32,000 fp32 logits × 9.5 copies on every rank + 2,048 × 8,192 × 4 B + 0.05 GiB;
    # NVLink all-reduce buffers 0.55 GiB; CUDA graphs captured outside the budget
    llama2 = get_model("llama-2-70b")
    plan = Scenario(llama2, get_gpu("h100-sxm"), tp=4, max_num_seqs=128, max_num_batched_tokens=2048,
                    overheads=Overheads(vllm_version="0.15")).memory
    assert plan.activation_bytes == int(9.5 * 128 * 32_000 * 4 + 2048 * 8192 * 4 + int(0.05 * GiB))
    assert plan.non_torch_bytes == int(0.55 * GiB) and not plan.cudagraph_counted
    assert plan.kv_pool_bytes == plan.requested_bytes - plan.weights_bytes_per_gpu - plan.activation_bytes \
        - plan.non_torch_bytes
    # the sampler is not divided by TP: one rank gathers the whole vocabulary
    one = Scenario(llama2, get_gpu("h100-sxm"), tp=2, max_num_seqs=128, max_num_batched_tokens=2048,
                   overheads=Overheads(vllm_version="0.15")).memory
    assert one.activation_bytes == plan.activation_bytes
    # without peer-to-peer (PCIe A100s) vLLM disables custom all-reduce and its buffers
    pcie = Scenario(get_model("qwen2.5-7b"), get_gpu("a100-80gb-pcie"), tp=2,
                    overheads=Overheads(vllm_version="0.15")).memory
    assert pcie.non_torch_bytes == int(0.1 * GiB)
    # the FlashInfer/Triton samplers hold 3.5 copies; only vLLM >= 0.20 subtracts CUDA graphs
    llama, h100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    sort, triton = (Scenario(llama, h100, overheads=Overheads(vllm_version=v)).memory for v in ("0.15", "0.19"))
    forward = 8192 * 4096 * 4              # H100's default 8,192-token budget × hidden × 4 B
    assert sort.activation_bytes == int(9.5 * 1024 * 128_256 * 4 + forward + int(0.05 * GiB))
    assert triton.activation_bytes == int(3.5 * 1024 * 128_256 * 4 + forward + int(0.15 * GiB))
    now = Scenario(llama, h100).memory
    assert now.cudagraph_counted and not triton.cudagraph_counted
    assert triton.kv_pool_bytes - now.kv_pool_bytes == now.cudagraph_bytes
    # an explicit choice wins over the version's
    assert Scenario(llama, h100, overheads=Overheads(vllm_version="0.19", cudagraph_counted=True)).memory \
        .kv_pool_bytes == now.kv_pool_bytes
    with pytest.raises(PlannerError, match="--vllm-version '0.3'"):
        Scenario(llama, h100, overheads=Overheads(vllm_version="0.3"))       # refused when the scenario is built


def test_version_rules_reproduce_startup_logs_they_were_not_fitted_to():
    # github.com/dennislee22/vLLM-benchmarking, vLLM 0.10.1.1: Qwen2-7B on two A100-80GB without peer-to-peer,
    # TP 2, util 0.25 → "GPU KV cache size: 450,192 tokens" (the defaults before versions: 359,728)
    qwen2 = from_hf_config({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
                            "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
                            "vocab_size": 152064, "max_position_embeddings": 32768, "tie_word_embeddings": False})
    gpu = replace(get_gpu("a100-80gb-pcie"), memory_bytes=int(79.25 * GiB))
    plan = Scenario(qwen2, gpu, tp=2, gpu_memory_utilization=0.25, max_model_len=16384,
                    overheads=Overheads(vllm_version="0.10")).memory
    assert plan.kv_capacity_tokens == pytest.approx(450_192, rel=0.01)


def test_the_reports_per_gpu_table_gives_one_gpus_share_of_the_weights():
    from planner.capacity.report import memory_plan_table
    from planner.scenario import Scenario

    plan = Scenario(get_model("llama-3-70b"), get_gpu("h100-sxm"), tp=2, gpu_memory_utilization=0.95).memory
    row = dict(zip(*(lambda t: (t.columns, t.rows[0]))(memory_plan_table(plan)), strict=True))
    # 70.6e9 parameters × 2 bytes over two GPUs: 65.7 GiB each, what "where the memory goes" shows (not 131.4)
    assert row["weights GiB"] == pytest.approx(weights_bytes(get_model("llama-3-70b"), "bf16") / 2 / GiB, rel=1e-3)
    assert row["weights GiB"] == pytest.approx(plan.breakdown_gib()["weights"]) == pytest.approx(65.7, abs=0.05)
    assert row["KV bytes/token"] == 160 * 1024 and row["blocks"] == plan.num_blocks


def test_the_layers_a_config_slides_are_those_hugging_face_slides():
    base = {"model_type": "qwen2", "hidden_size": 1024, "num_hidden_layers": 32, "num_attention_heads": 16,
            "num_key_value_heads": 4, "intermediate_size": 4096, "vocab_size": 32000,
            "max_position_embeddings": 32768, "sliding_window": 4096}
    # Qwen2/3: the layers from max_window_layers on slide, and only with use_sliding_window
    assert from_hf_config({**base, "use_sliding_window": True, "max_window_layers": 28}).sliding_layers == 4
    assert from_hf_config({**base, "use_sliding_window": True}).sliding_layers == 32
    assert from_hf_config({**base, "use_sliding_window": False, "max_window_layers": 28}).sliding_window is None
    # Gemma-2 slides its even-indexed layers: 4 of 7
    gemma = {**base, "model_type": "gemma2", "num_hidden_layers": 7, "head_dim": 64}
    assert from_hf_config(gemma).sliding_layers == 4
