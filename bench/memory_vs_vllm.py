"""KV capacity predicted by the planner's defaults against what real vLLM servers logged at startup.

No log is fitted here: each case gives only what a user would enter (model, GPU, TP, utilization, max_model_len,
scheduler limits, weight dtype, the vLLM version: ``--vllm-version``'s profiling rules) and the prediction is
compared with the published "GPU KV cache size" (or blocks × 16). Sources: GitHub issues and logs collected in
BENCHMARKS.md; the version rules come from vLLM's source per release (planner.catalog.releases.VLLM_VERSIONS).
Usage: python bench/memory_vs_vllm.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.capacity.memory import Overheads  # noqa: E402
from planner.catalog.gpus import GiB, get_gpu  # noqa: E402
from planner.catalog.presets import from_hf_config, get_model  # noqa: E402
from planner.catalog.releases import vllm_release  # noqa: E402
from planner.scenario import Scenario  # noqa: E402

CODELLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32016,
                "max_position_embeddings": 16384, "tie_word_embeddings": False}
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576, "vocab_size": 256000,
            "max_position_embeddings": 8192}
QWEN2_7B = from_hf_config({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
                           "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                           "max_position_embeddings": 32768, "tie_word_embeddings": False}, "qwen2-7b")
QWEN_14B = {"model_type": "qwen2", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "intermediate_size": 13824, "vocab_size": 152064,
            "max_position_embeddings": 131072, "tie_word_embeddings": False}


@dataclass(frozen=True)
class Case:
    label: str
    source: str
    model: object
    gpu: str
    tp: int
    util: float
    max_len: int
    seqs: int
    batched: int
    weights: str
    version: str                # a key of VLLM_VERSIONS
    logged_tokens: int
    gpu_memory_gib: float | None = None


CASES = [
    Case("Llama-3.1-8B, H100, v0.19", "llm-d-planner v0.19.0 logs (meta-llama-llama-3-1-8b--h100-80gb--16384.log)",
         get_model("llama-3.1-8b"), "h100-sxm", 1, 0.95, 16384, 1024, 8192, "bf16", "0.19", 476_016, 79.19),
    Case("CodeLlama-7B (MHA), H100, v0.19", "llm-d-planner v0.19.0 logs (codellama-7b-h--h100-80gb--8192.log)",
         from_hf_config(CODELLAMA_7B, "codellama-7b"), "h100-sxm", 1, 0.95, 8192, 1024, 8192, "bf16", "0.19",
         126_256, 79.19),
    Case("Gemma-7B (vocab 256k), H100, v0.19", "llm-d-planner v0.19.0 logs (google-gemma-7b--h100-80gb--8192.log)",
         from_hf_config(GEMMA_7B, "gemma-7b"), "h100-sxm", 1, 0.95, 8192, 1024, 8192, "bf16", "0.19", 129_760, 79.19),
    Case("Qwen2.5-7B W8A8, H100, v0.19", "llm-d-planner v0.19.0 logs (w8a8-redhatai-qwen2-5-7b--8192.log)",
         get_model("qwen2.5-7b"), "h100-sxm", 1, 0.95, 8192, 1024, 8192, "int8", "0.19", 1_210_272, 79.19),
    Case("Llama-3.3-70B FP8, 2xH100 TP2, v0.19", "llm-d-planner v0.19.0 logs (fp8dyn-llama-3-3-70b--tp2--8192.log)",
         get_model("llama-3.1-70b"), "h100-sxm", 2, 0.95, 8192, 1024, 8192, "fp8", "0.19", 244_304, 79.19),
    Case("Llama-3.1-8B, L4, v0.11", "github.com/abinavChandar/demo_env_l4 vllm.log (GPU from the repo name)",
         get_model("llama-3.1-8b"), "l4", 1, 0.92, 32000, 128, 2048, "bf16", "0.11", 38_944),
    Case("R1-Distill-Qwen-14B, A100-40GB (inferred), v0.8.5",
         "github.com/jayashan10/Deepseek-qwen-deployment vllm_server.log (GPU inferred from the budget)",
         from_hf_config(QWEN_14B, "qwen-14b"), "a100-40gb-sxm", 1, 0.9, 32768, 256, 2048, "bf16", "0.8", 32_832),
    Case("Llama-3-8B, A100-80GB, V0 ~0.6.5", "markdown note quoting a V0 profile (KV 54.93 GiB; source unresolved)",
         get_model("llama-3-8b"), "a100-80gb-sxm", 1, 0.9, 8192, 256, 8192, "bf16", "0.6",
         int(54.93 * GiB) // (16 * 131072) * 16, 79.14),
    Case("Llama-3-8B, A100-40GB, V0 0.6.6, 2,048 sequences (inferred)",
         "vllm-project/vllm#12330 (its user raised the concurrency limit; 9.37 GiB activation = 2,048 rows)",
         get_model("llama-3-8b"), "a100-40gb-sxm", 1, 0.9, 8192, 2048, 8192, "bf16", "0.6", 5691 * 16, 39.50),
    *(Case(f"Qwen2-7B, {label}, v0.10.1", f"github.com/dennislee22/vLLM-benchmarking {log}", QWEN2_7B, gpu, tp, util,
           16384, 256, 2048, "bf16", "0.10", tokens, memory)
      for label, log, gpu, tp, util, tokens, memory in (
          ("A100-80GB, util 0.25", "log/vllm-7B-1gpuA10080GB-0.25GRAM.log", "a100-80gb-pcie", 1, 0.25, 93_872, 79.25),
          ("A100-80GB, util 0.5", "log/vllm-7B-1gpuA10080GB-0.5GRAM.log", "a100-80gb-pcie", 1, 0.5, 464_848, 79.25),
          ("2xA100-80GB no P2P, TP2, util 0.25", "vllm-7B-2gpuA10080GB-same-node.log", "a100-80gb-pcie", 2, 0.25,
           450_192, 79.25),
          ("2xA100-80GB no P2P, TP2, util 0.5", "log/vllm-7B-2gpuA10080GB-0.5GRAM-same-node.log", "a100-80gb-pcie",
           2, 0.5, 1_192_160, 79.25))),
    # inference-sim/training c4f03409 replay_data: kv_blocks_total_gpu of the seven runs bench/fidelity_v1.py replays
    *(Case(f"{label}, H100, v0.15.1", "inference-sim/training replay_data (kv_blocks_total_gpu)", get_model(preset),
           "h100-sxm", tp, 0.9, 4096, 128, 2048, "bf16", "0.15", blocks * 16)
      for label, preset, tp, blocks in (("CodeLlama-34B TP2", "codellama-34b", 2, 26_602),
                                        ("Llama-2-70B TP4", "llama-2-70b", 4, 31_356),
                                        ("Mixtral-8x7B TP2", "mixtral-8x7b", 2, 27_510))),
]


def predict(case: Case) -> int:
    gpu = get_gpu(case.gpu)
    if case.gpu_memory_gib:
        gpu = replace(gpu, memory_bytes=int(case.gpu_memory_gib * GiB))
    plan = Scenario(case.model, gpu, tp=case.tp, gpu_memory_utilization=case.util, max_model_len=case.max_len,
                    max_num_seqs=case.seqs, max_num_batched_tokens=case.batched, weight_dtype=case.weights,
                    overheads=Overheads(vllm_version=case.version), engine=vllm_release(case.version).engine).memory
    return plan.kv_capacity_tokens


def main() -> None:
    errors = []
    print(f"{'case':58s} {'logged':>10s} {'predicted':>10s} {'error':>8s}")
    for case in CASES:
        predicted = predict(case)
        error = predicted / case.logged_tokens - 1
        errors.append(abs(error))
        print(f"{case.label:58s} {case.logged_tokens:>10,d} {predicted:>10,d} {error:>+8.2%}")
    print(f"{len(errors)} logs: median |error| {float(np.median(errors)):.2%}; worst {max(errors):.2%}")


if __name__ == "__main__":
    main()
