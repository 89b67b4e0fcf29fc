"""Model catalog: architectures as frozen dataclasses, read from presets or any Hugging Face ``config.json``.

The parameter count is computed term by term from the architecture (embeddings, an untied LM head, attention
with its biases, gated or plain MLPs, MoE experts and routers, norms), so an uploaded config gets the same
treatment as a preset; tests hold the presets within 0.5% of the published counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.errors import PlannerError

WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "falcon", "opt", "gpt_neox",
            "deepseek_v3")


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek V2/V3): the KV cache holds one latent per token per layer."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class MoE:
    """Mixture of experts: routed experts (plus shared ones) replace the dense MLP on some layers."""

    experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_experts: int = 0
    first_dense_layers: int = 0      # DeepSeek: the first k layers keep a dense MLP
    router_bias: bool = False        # DeepSeek-V3's e_score_correction_bias


@dataclass(frozen=True)
class ModelSpec:
    """What the memory math needs to know about a decoder-only transformer."""

    name: str
    hf_id: str
    family: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_position: int
    tied_embeddings: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    gated_mlp: bool = True
    norm: str = "rms"                 # "rms" (weight) or "layer" (weight + bias)
    norms_per_layer: int = 2
    qk_norm: bool = False             # Qwen3: RMSNorm over q and k per head
    learned_positions: int = 0        # OPT: learned position embeddings (max_position + 2 rows)
    sliding_window: int | None = None
    sliding_layers: int = 0           # how many layers use the window
    # tensor-parallel all-reduces per layer: attention's and the MLP's, but one where they run side by side and
    # are summed first (Falcon's parallel attention: vllm/model_executor/models/falcon.py)
    allreduces_per_layer: int = 2
    mla: MLA | None = None
    moe: MoE | None = None
    mtp_layers: int = 0               # DeepSeek multi-token-prediction layers (not counted in the main model)
    published_params: int | None = None
    weight_dtype: str = "bf16"        # as published: DeepSeek-V3 ships FP8 weights
    # the FP8 checkpoint's weight blocks (quantization_config.weight_block_size: DeepSeek-V3's 128 x 128), each
    # scaled alone: a rank's shard of a linear layer must hold whole blocks
    fp8_block: int | None = None
    help: str = field(default="", compare=False)
    config_path: str = field(default="", compare=False)     # the config.json read (empty for a preset)
    serve_path: str = field(default="", compare=False)      # the folder vllm serve takes: a config.json's own

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


def _norm_params(spec: ModelSpec, width: int) -> int:
    return width * (2 if spec.norm == "layer" else 1)


def _attention_params(spec: ModelSpec) -> int:
    h = spec.hidden
    if spec.mla:
        m = spec.mla
        q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * spec.heads * q_head) if m.q_lora_rank \
            else h * spec.heads * q_head
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank \
            + m.kv_lora_rank * spec.heads * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + spec.heads * m.v_head_dim * h
    q_dim, kv_dim = spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    params = h * (q_dim + 2 * kv_dim) + q_dim * h
    if spec.qkv_bias:
        params += q_dim + 2 * kv_dim
    if spec.out_bias:
        params += h
    return params


def _mlp_params(spec: ModelSpec, intermediate: int) -> int:
    h = spec.hidden
    if spec.gated_mlp:
        return 3 * h * intermediate + (2 * intermediate + h if spec.mlp_bias else 0)
    return 2 * h * intermediate + (intermediate + h if spec.mlp_bias else 0)


def _moe_layer_params(spec: ModelSpec) -> int:
    moe = spec.moe
    router = spec.hidden * moe.experts + (moe.experts if moe.router_bias else 0)
    return router + (moe.experts + moe.shared_experts) * _mlp_params(spec, moe.expert_intermediate)


def param_count(spec: ModelSpec, include_mtp: bool = False) -> int:
    """Parameters of one replica, from the architecture.

    Parameters
    ----------
    include_mtp : bool
        Add DeepSeek's multi-token-prediction layers (each a full layer plus its projection and norms).
    """
    h = spec.hidden
    embeddings = spec.vocab * h + (spec.learned_positions * h)
    head = 0 if spec.tied_embeddings else spec.vocab * h
    dense_layers = spec.layers if spec.moe is None else spec.moe.first_dense_layers
    moe_layers = spec.layers - dense_layers
    per_layer_common = _attention_params(spec) + spec.norms_per_layer * _norm_params(spec, h) \
        + spec.qk_norm * 2 * spec.head_dim
    total = embeddings + head + _norm_params(spec, h) + spec.layers * per_layer_common
    total += dense_layers * _mlp_params(spec, spec.intermediate)
    if moe_layers:
        total += moe_layers * _moe_layer_params(spec)
    if include_mtp and spec.mtp_layers:
        # as the checkpoint stores it: a full layer, the 2h -> h projection, three norms, and its own copies of
        # the embedding and output head
        mtp_layer = per_layer_common + (_moe_layer_params(spec) if spec.moe else _mlp_params(spec, spec.intermediate))
        total += spec.mtp_layers * (mtp_layer + 2 * h * h + 3 * _norm_params(spec, h) + 2 * spec.vocab * h)
    return int(total)


def routed_expert_param_count(spec: ModelSpec) -> int:
    """Parameters of the routed experts over all MoE layers (0 for a dense model): what a step reads only where
    its tokens are routed."""
    if spec.moe is None:
        return 0
    moe = spec.moe
    return (spec.layers - moe.first_dense_layers) * moe.experts * _mlp_params(spec, moe.expert_intermediate)


def active_param_count(spec: ModelSpec) -> int:
    """Parameters touched per token (MoE: only the routed experts a token visits)."""
    if spec.moe is None:
        return param_count(spec)
    moe = spec.moe
    idle = (moe.experts - moe.experts_per_token) * _mlp_params(spec, moe.expert_intermediate)
    return param_count(spec) - (spec.layers - moe.first_dense_layers) * idle


def weights_bytes(spec: ModelSpec, weight_dtype: str = "bf16") -> int:
    """Bytes of the weights of one replica.

    Quantized checkpoints (fp8, int8, 4-bit) keep the embedding and the output head in 16 bits, as vLLM loads
    them; 4-bit formats add an fp16 scale per 128-weight group.
    """
    if weight_dtype not in WEIGHT_BYTES:
        raise PlannerError(f"unknown weight dtype {weight_dtype!r}: expected one of {', '.join(WEIGHT_BYTES)}")
    params = param_count(spec)
    per_param = WEIGHT_BYTES[weight_dtype] + (2.0 / 128 if weight_dtype == "int4" else 0.0)
    if per_param >= 2:
        return int(params * per_param)
    sixteen_bit = spec.vocab * spec.hidden * (1 if spec.tied_embeddings else 2)
    return int((params - sixteen_bit) * per_param + sixteen_bit * 2)


def replicated_param_count(spec: ModelSpec) -> int:
    """Parameters every tensor-parallel rank holds whole, vLLM's ReplicatedLinear layers: MLA's projections down to
    the query and KV latents (``q_a_proj``, ``kv_a_proj_with_mqa``; vllm/model_executor/models/deepseek_v2.py) and
    an MoE router's gate (mixtral.py, deepseek_v2.py). DeepSeek-V3: 1.03 billion, 0.96 GiB in FP8 on every rank,
    0.84 GiB more per rank at TP 8 than an even split (norms, also whole, are left out: 0.1% of a layer)."""
    params = 0
    if spec.mla is not None:
        m = spec.mla
        params += spec.layers * spec.hidden * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)
    if spec.moe is not None:
        params += (spec.layers - spec.moe.first_dense_layers) * spec.hidden * spec.moe.experts
    return params


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: split across ranks, replicated once TP exceeds their number.

    MLA stores one latent, whole, on every rank.
    """
    if model.mla:
        return 1
    return max(1, model.kv_heads // tp)


def kv_replica_param_count(spec: ModelSpec, tp: int) -> int:
    """Parameters the ``tp`` ranks hold together past an even split where they outnumber the KV heads: vLLM's
    ``QKVParallelLinear`` gives each rank one whole KV head's K and V projections, replicated over ``tp /
    kv_heads`` ranks (vllm/model_executor/layers/linear.py, ``num_kv_head_replicas``; :func:`kv_heads_per_rank`).
    Llama-3-70B at TP 16: each rank holds 335 MB of them, not an even split's 168 MB."""
    if spec.mla is not None:
        return 0
    per_head = spec.layers * 2 * spec.head_dim * (spec.hidden + (1 if spec.qkv_bias else 0))
    return per_head * (kv_heads_per_rank(spec, tp) * tp - spec.kv_heads)


def weights_bytes_per_gpu(spec: ModelSpec, weight_dtype: str, tp: int) -> int:
    """Bytes of the weights one of ``tp`` tensor-parallel ranks holds: :func:`weights_bytes` split evenly, but for
    the :func:`replicated_param_count` parameters every rank holds whole and the KV heads ranks past their count
    repeat (:func:`kv_replica_param_count`), at the weights' bytes per parameter."""
    total = weights_bytes(spec, weight_dtype)
    whole = int(replicated_param_count(spec) * WEIGHT_BYTES[weight_dtype])
    repeated = int(kv_replica_param_count(spec, tp) * WEIGHT_BYTES[weight_dtype])
    return math.ceil((total - whole + repeated) / tp) + whole
