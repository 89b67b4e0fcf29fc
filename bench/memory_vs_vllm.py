"""KV capacity predicted by the planner's defaults against what real vLLM servers logged at startup.

No log is fitted here: each case gives only what a user would enter (model, GPU, TP, utilization, max_model_len,
scheduler limits, weight dtype, vLLM version for the CUDA-graph rule) and the prediction is compared with the
published "GPU KV cache size" (or blocks × 16). Sources: GitHub issues and logs collected in BENCHMARKS.md.
Usage: python bench/memory_vs_vllm.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.capacity.memory import Overheads  # noqa: E402
from planner.catalog.gpus import GiB, get_gpu  # noqa: E402
from planner.catalog.presets import from_hf_config, get_model  # noqa: E402
from planner.scenario import Scenario  # noqa: E402

CODELLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32016,
                "max_position_embeddings": 16384, "tie_word_embeddings": False}
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576, "vocab_size": 256000,
            "max_position_embeddings": 8192}
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
    graphs_counted: bool        # vLLM >= 0.21 counts CUDA graphs in the budget
    logged_tokens: int
    gpu_memory_gib: float | None = None


CASES = [
    Case("Llama-3.1-8B, H100, v0.19", "llm-d-planner v0.19.0 logs (meta-llama-llama-3-1-8b--h100-80gb--16384.log)",
         get_model("llama-3.1-8b"), "h100-sxm", 1, 0.95, 16384, 1024, 8192, "bf16", False, 476_016, 79.19),
    Case("CodeLlama-7B (MHA), H100, v0.19", "llm-d-planner v0.19.0 logs (codellama-7b-h--h100-80gb--8192.log)",
         from_hf_config(CODELLAMA_7B, "codellama-7b"), "h100-sxm", 1, 0.95, 8192, 1024, 8192, "bf16", False,
         126_256, 79.19),
    Case("Gemma-7B (vocab 256k), H100, v0.19", "llm-d-planner v0.19.0 logs (google-gemma-7b--h100-80gb--8192.log)",
         from_hf_config(GEMMA_7B, "gemma-7b"), "h100-sxm", 1, 0.95, 8192, 1024, 8192, "bf16", False, 129_760, 79.19),
    Case("Qwen2.5-7B W8A8, H100, v0.19", "llm-d-planner v0.19.0 logs (w8a8-redhatai-qwen2-5-7b--8192.log)",
         get_model("qwen2.5-7b"), "h100-sxm", 1, 0.95, 8192, 1024, 8192, "int8", False, 1_210_272, 79.19),
    Case("Llama-3.3-70B FP8, 2xH100 TP2, v0.19", "llm-d-planner v0.19.0 logs (fp8dyn-llama-3-3-70b--tp2--8192.log)",
         get_model("llama-3.1-70b"), "h100-sxm", 2, 0.95, 8192, 1024, 8192, "fp8", False, 244_304, 79.19),
    Case("Llama-3.1-8B, L4, v0.11", "github.com/abinavChandar/demo_env_l4 vllm.log (GPU from the repo name)",
         get_model("llama-3.1-8b"), "l4", 1, 0.92, 32000, 128, 2048, "bf16", False, 38_944),
    Case("R1-Distill-Qwen-14B, A100-40GB (inferred), v0.8.5",
         "github.com/jayashan10/Deepseek-qwen-deployment vllm_server.log (GPU inferred from the budget)",
         from_hf_config(QWEN_14B, "qwen-14b"), "a100-40gb-sxm", 1, 0.9, 32768, 256, 2048, "bf16", False, 32_832),
    Case("Llama-3-8B, A100-80GB, V0 ~0.6.5", "markdown note quoting a V0 profile (KV 54.93 GiB; source unresolved)",
         get_model("llama-3-8b"), "a100-80gb-sxm", 1, 0.9, 8192, 256, 2048, "bf16", False,
         int(54.93 * GiB) // (16 * 131072) * 16, 79.14),
    Case("Llama-3-8B, A100-40GB, V0 (activation 9.37 GiB logged)", "vllm-project/vllm#12330",
         get_model("llama-3-8b"), "a100-40gb-sxm", 1, 0.9, 8192, 256, 8192, "bf16", False, 5691 * 16, 39.50),
]


def predict(case: Case) -> int:
    gpu = get_gpu(case.gpu)
    if case.gpu_memory_gib:
        gpu = replace(gpu, memory_bytes=int(case.gpu_memory_gib * GiB))
    plan = Scenario(case.model, gpu, tp=case.tp, gpu_memory_utilization=case.util, max_model_len=case.max_len,
                    max_num_seqs=case.seqs, max_num_batched_tokens=case.batched, weight_dtype=case.weights,
                    overheads=Overheads(cudagraph_counted=case.graphs_counted)).memory
    return plan.kv_capacity_tokens


def main() -> None:
    errors = []
    print(f"{'case':58s} {'logged':>10s} {'predicted':>10s} {'error':>8s}")
    for case in CASES:
        predicted = predict(case)
        error = predicted / case.logged_tokens - 1
        errors.append(abs(error))
        print(f"{case.label:58s} {case.logged_tokens:>10,d} {predicted:>10,d} {error:>+8.2%}")
    inliers = sorted(errors)[:-1]
    print(f"median |error| {sorted(errors)[len(errors) // 2]:.2%}; worst {max(errors):.2%}; "
          f"worst without the V0 outlier {max(inliers):.2%}")


if __name__ == "__main__":
    main()
