"""KV-cache memory the way vLLM V1 computes it: bytes per token, the memory budget term by term, blocks,
KV capacity and "Maximum concurrency for max_model_len tokens per request".

Every overhead is an editable default (``Overheads``); :mod:`planner.capacity.vllm_log` fits them from a pasted vLLM
startup log. The seed article's simplified arithmetic is kept beside it, labelled, as :func:`seed_pool_sequences`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from planner.catalog.gpus import GPU, GiB
from planner.catalog.models import (WEIGHT_BYTES, ModelSpec, kv_heads_per_rank, param_count, weights_bytes,
                                    weights_bytes_per_gpu)
from planner.catalog.releases import VllmRelease, vllm_release
from planner.errors import PlannerError

if TYPE_CHECKING:
    from planner.scenario import Scenario

KV_DTYPE_BYTES = {"auto": None, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int = 2) -> int:
    """Bytes per KV element: ``auto`` is the model's dtype (bf16: 2), fp8 variants 1."""
    if kv_cache_dtype not in KV_DTYPE_BYTES:
        raise PlannerError(f"unknown --kv-cache-dtype {kv_cache_dtype!r}: expected one of {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[kv_cache_dtype] or model_dtype_bytes


def kv_bytes_per_token_per_layer(model: ModelSpec, dtype_bytes: int, tp: int = 1) -> int:
    """One token, one layer, one rank: ``2 · kv_heads · head_dim · bytes``; MLA ``(kv_lora_rank + rope) · bytes``."""
    if model.mla:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * dtype_bytes
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * dtype_bytes


def kv_bytes_per_token(model: ModelSpec, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """KV bytes of one token over all layers on one rank (``tp=1``: the whole replica).

    A sliding-window layer counts like a full-attention one, as it does for contexts shorter than its window.
    """
    return model.layers * kv_bytes_per_token_per_layer(model, kv_dtype_bytes(kv_cache_dtype), tp)


LOG_SOURCE = "fitted from log"      # Overheads.source of overheads fitted to a vLLM startup log


@dataclass(frozen=True)
class Overheads:
    """What vLLM subtracts from ``gpu_memory_utilization × total`` besides the weights (bytes; None: estimate).

    Attributes
    ----------
    activation_bytes : int or None
        Torch activation peak of the profiling run; grows with ``max_num_batched_tokens``.
    non_torch_bytes : int or None
        CUDA context growth, NCCL and custom all-reduce buffers (more under tensor parallelism).
    cudagraph_bytes : int or None
        Memory CUDA graph capture takes (None: estimated from layers and ``max_num_seqs``).
    cudagraph_counted : bool or None
        Whether CUDA-graph memory comes out of the budget; None: as ``vllm_version`` does (vLLM ≥ 0.20 estimates
        graphs before sizing the KV cache and subtracts them; earlier versions captured them afterwards, outside
        the budget, where users lowered ``gpu_memory_utilization``).
    weights_bytes : int or None
        Weights per GPU as loaded ("Model loading took"); None: computed from the architecture.
    vllm_version : str or None
        The vLLM release range whose profiling rules estimate what is not given
        (:data:`planner.catalog.releases.VLLM_VERSIONS`); its runtime defaults apply to the scenario too. None: as
        the scenario's engine is served today (:func:`planner.catalog.releases.default_version`), which the
        scenario resolves.
    """

    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None
    cudagraph_counted: bool | None = None
    weights_bytes: int | None = None
    vllm_version: str | None = None
    source: str = field(default="defaults", compare=False)

    @property
    def release(self) -> VllmRelease:
        return vllm_release(self.vllm_version)

    @property
    def graphs_counted(self) -> bool:
        """Whether CUDA graphs come out of the budget: as entered, else as the version does."""
        return self.release.cudagraphs_counted if self.cudagraph_counted is None else self.cudagraph_counted

    def with_entered(self, **entered_bytes: int | None) -> Overheads:
        """These overheads (estimated, or fitted from a startup log) with the values a user entered in their place
        (bytes by field; None: not entered), as the CLI's flags and the pages' fields both apply them."""
        given = {name: value for name, value in entered_bytes.items() if value is not None}
        if not given:
            return self
        return replace(self, **given, source="entered" if self.source == "defaults" else self.source)


def activation_peak_bytes(model: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int,
                          release: VllmRelease) -> int:
    """Estimated torch activation peak of vLLM's profiling run: a forward over ``max_num_batched_tokens`` tokens
    and a dummy sampler over ``min(max_num_seqs, max_num_batched_tokens)`` rows of full-vocabulary fp32 logits
    (:class:`planner.catalog.releases.VllmRelease`), the same on every rank."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    sampler = release.sampler_copies * rows * model.vocab * 4
    forward = max_num_batched_tokens * model.hidden * release.forward_bytes_per_token_hidden
    return int(sampler + forward + release.floor_bytes)


def cudagraph_bytes(model: ModelSpec, max_num_seqs: int) -> int:
    """Estimated CUDA-graph memory: v0.19 logs estimate 0.55-0.84 GiB for 28-32-layer models at 1,024 sequences
    and 1.82 GiB per GPU for an 80-layer one; fewer captured batch sizes below 512 sequences take less."""
    return int((0.1 + 0.023 * model.layers) * (0.5 + 0.5 * min(max_num_seqs, 512) / 512) * GiB)


def non_torch_bytes(tp: int, gpu: GPU, release: VllmRelease) -> int:
    """Default non-torch growth: one GPU's, or under TP the all-reduce buffers' over NVLink or without it."""
    if tp == 1:
        return release.non_torch_single_bytes
    return release.non_torch_pcie_bytes if gpu.pcie_peers else release.non_torch_nvlink_bytes


def default_batched_tokens(gpu: GPU) -> int:
    """``vllm serve``'s ``max_num_batched_tokens``: 2048 on A100 and GPUs under 70 GiB, 8192 on larger ones."""
    return 8192 if gpu.vllm_large_defaults else 2048


def default_max_num_seqs(gpu: GPU) -> int:
    """``vllm serve``'s ``max_num_seqs``: 256, or 1024 on H100/H200/MI300X."""
    return 1024 if gpu.vllm_large_defaults else 256


@dataclass(frozen=True)
class MemoryPlan:
    """The budget of one GPU of a tensor-parallel group, term by term (bytes), and what it holds."""

    param_count: int
    weights_bytes: int                 # one replica
    weights_bytes_per_gpu: int
    total_bytes: int
    requested_bytes: int               # ceil(util × total)
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    cudagraph_counted: bool
    kv_pool_bytes: int                 # what vLLM logs as "Available KV cache memory"
    kv_bytes_per_token: int            # one replica, all layers
    kv_bytes_per_token_per_gpu: int
    block_size: int
    num_blocks: int
    kv_capacity_tokens: int            # per GPU, as vLLM logs "GPU KV cache size"
    max_model_len: int
    blocks_per_max_len_request: float  # whole blocks, but for a hybrid model's share of sliding layers
    max_concurrency: float             # vLLM's "Maximum concurrency for max_model_len tokens per request"
    max_num_batched_tokens: int
    max_num_seqs: int
    overheads_source: str
    gpu_blocks: int = 0                # what the KV pool holds; num_blocks differs under --num-gpu-blocks

    @property
    def override_warning(self) -> str | None:
        """A what-if's note: ``--num-gpu-blocks`` above what the GPU's memory holds (vLLM's override allows it, and
        the server then runs out of memory); None otherwise."""
        if self.num_blocks <= self.gpu_blocks:
            return None
        return (f"--num-gpu-blocks {self.num_blocks:,} exceeds the {self.gpu_blocks:,} blocks this GPU's memory "
                f"holds ({self.num_blocks / max(self.gpu_blocks, 1):.1f}x): a what-if (vLLM's override allows it; a "
                "real server would run out of memory), e.g. for KV offloaded to the host")

    def to_dict(self) -> dict:
        """The JSON twin: every term (the ``plan`` object of ``memory --json``)."""
        return dict(self.__dict__)

    def breakdown_gib(self) -> dict[str, float]:
        """Where one GPU's memory goes (GiB): weights, activation peak, non-torch, CUDA graphs, KV cache, and what
        lies outside the budget (``1 − gpu_memory_utilization``, plus graphs captured outside it)."""
        unused = self.total_bytes - self.requested_bytes
        return {"weights": self.weights_bytes_per_gpu / GiB, "activation": self.activation_bytes / GiB,
                "non_torch": self.non_torch_bytes / GiB, "cuda_graphs": self.cudagraph_bytes / GiB,
                "kv_cache": max(self.kv_pool_bytes, 0) / GiB,
                "outside_budget": (unused - (0 if self.cudagraph_counted else self.cudagraph_bytes)) / GiB}


def blocks_per_request(model: ModelSpec, max_model_len: int, block_size: int, max_num_batched_tokens: int) -> float:
    """KV blocks (of the pool's, which span every layer) a request of ``max_model_len`` tokens needs, as vLLM's
    concurrency line counts: a sliding-window layer holds only its window and a step's new tokens, plus one block
    the window may straddle, even past the request's own length (``SlidingWindowSpec.max_memory_usage_bytes``).
    vLLM V1 keeps one KV cache group per kind of layer, each block spanning one group's layers, so a hybrid model
    (Gemma-2: half its layers sliding) needs each kind's blocks over that kind's share of the layers: counting whole
    blocks for both kinds halved Gemma-2's concurrency against vLLM's log."""
    full = math.ceil(max_model_len / block_size)
    if not model.sliding_window or not model.sliding_layers:
        return full
    window = math.ceil(min(model.sliding_window - 1 + max_num_batched_tokens, max_model_len) / block_size) + 1
    if model.sliding_layers >= model.layers:
        return window
    sliding_share = model.sliding_layers / model.layers
    return window * sliding_share + full * (1 - sliding_share)


def startup_problems(scenario: Scenario) -> tuple[str, ...]:
    """Why vLLM would not start with the scenario's memory plan, one sentence each; empty when it would: no memory
    left for the KV cache, or (vLLM V1's startup check) a pool too small for one request of ``max_model_len``."""
    plan, where = scenario.memory, f"{scenario.model.name} on {scenario.tp}x {scenario.gpu.label}"
    if plan.num_blocks <= 0:
        lighter = ", or use --weight-dtype fp8" if WEIGHT_BYTES[scenario.weight_dtype] > WEIGHT_BYTES["fp8"] else ""
        return (f"{where}: no memory left for the KV cache ({plan.kv_pool_bytes / GiB:.1f} GiB); raise --tp or "
                f"--gpu-mem-util{lighter}",)
    if scenario.engine_spec.v1_runtime and plan.max_concurrency < 1:
        return (f"{where}: the KV cache holds {plan.num_blocks:,} blocks, fewer than the "
                f"{plan.blocks_per_max_len_request:,} one request of max_model_len {plan.max_model_len:,} needs "
                "(maximum concurrency below 1), and vLLM refuses to start so; lower --max-model-len, or raise "
                "--gpu-mem-util or --tp",)
    return ()


def plan_memory(scenario: Scenario) -> MemoryPlan:
    """vLLM V1's KV budget for one GPU of the scenario's tensor-parallel group.

    ``requested = ceil(util × total)``; ``kv_pool = requested − weights/TP − activation − non_torch
    [− cudagraph]``; ``num_blocks = kv_pool // (block_size × KV bytes per token per layer per rank × layers)``
    (``num_gpu_blocks`` overrides it, as ``--num-gpu-blocks-override`` does); ``max_concurrency =
    num_blocks / blocks a max_model_len request needs``. Take it as :attr:`Scenario.memory`.
    """
    s, model, gpu, overheads = scenario, scenario.model, scenario.gpu, scenario.overheads
    weights = weights_bytes(model, s.weight_dtype)
    weights_per_gpu = (overheads.weights_bytes if overheads.weights_bytes is not None
                       else weights_bytes_per_gpu(model, s.weight_dtype, s.tp))
    activation = (overheads.activation_bytes if overheads.activation_bytes is not None
                  else activation_peak_bytes(model, s.max_num_batched_tokens, s.max_num_seqs, overheads.release))
    non_torch = (overheads.non_torch_bytes if overheads.non_torch_bytes is not None
                 else non_torch_bytes(s.tp, gpu, overheads.release))
    requested = math.ceil(gpu.memory_bytes * s.gpu_memory_utilization)
    graphs = (overheads.cudagraph_bytes if overheads.cudagraph_bytes is not None
              else cudagraph_bytes(model, s.max_num_seqs))
    cudagraph = graphs if overheads.graphs_counted else 0
    pool = requested - weights_per_gpu - activation - non_torch - cudagraph
    per_token_gpu = kv_bytes_per_token(model, s.kv_cache_dtype, s.tp)
    fits = max(0, pool) // (s.block_size * per_token_gpu) if per_token_gpu else 0
    blocks = s.num_gpu_blocks if s.num_gpu_blocks is not None else fits
    per_request = blocks_per_request(model, s.max_model_len, s.block_size, s.max_num_batched_tokens)
    return MemoryPlan(
        param_count=param_count(model), weights_bytes=weights, weights_bytes_per_gpu=int(weights_per_gpu),
        total_bytes=gpu.memory_bytes, requested_bytes=requested, activation_bytes=int(activation),
        non_torch_bytes=int(non_torch), cudagraph_bytes=int(graphs),
        cudagraph_counted=overheads.graphs_counted, kv_pool_bytes=int(pool),
        kv_bytes_per_token=kv_bytes_per_token(model, s.kv_cache_dtype), kv_bytes_per_token_per_gpu=per_token_gpu,
        block_size=s.block_size, num_blocks=int(blocks), kv_capacity_tokens=int(blocks * s.block_size),
        max_model_len=s.max_model_len, blocks_per_max_len_request=per_request,
        max_concurrency=blocks / per_request if per_request else 0.0,
        max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=s.max_num_seqs,
        overheads_source=overheads.source, gpu_blocks=int(fits))


def seed_pool_sequences(total_gb: float, utilization: float, weights_gb: float, kv_bytes_per_token_: int,
                        context_tokens: int, binary: bool = True) -> float:
    """The seed article's simplified arithmetic (seed 003), labelled as such: ``(total × util − weights) /
    (KV per token × context)``, with no activation, non-torch or CUDA-graph memory.

    The article writes "GB" for the pool and "KB" (1,024 B) for the KV per token; ``binary`` reads its GB as GiB,
    otherwise as 10⁹ B. Its quoted ≈109 / ≈54 / ≈116 sequences lie between the two readings.
    """
    unit = GiB if binary else 10**9
    return (total_gb * utilization - weights_gb) * unit / (kv_bytes_per_token_ * context_tokens)
