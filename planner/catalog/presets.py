"""Model presets and the reader of Hugging Face ``config.json`` files.

Presets are stored as the config fields their published ``config.json`` has and go through the same reader an
uploaded file does, so the reader is exercised by every preset.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from planner.catalog.models import FAMILIES, MLA, ModelSpec, MoE
from planner.errors import PlannerError
from planner.limits import MAX_COUNT

_COMMON = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_REQUIRED = {
    "llama": _COMMON + ("intermediate_size",), "mistral": _COMMON + ("intermediate_size",),
    "mixtral": _COMMON + ("intermediate_size", "num_local_experts", "num_experts_per_tok"),
    "qwen2": _COMMON + ("intermediate_size",), "qwen3": _COMMON + ("intermediate_size",),
    "gemma": _COMMON + ("intermediate_size",), "gemma2": _COMMON + ("intermediate_size",),
    "falcon": ("hidden_size", "vocab_size"),
    "opt": _COMMON + ("ffn_dim",), "gpt_neox": _COMMON + ("intermediate_size",),
    "deepseek_v3": _COMMON + ("intermediate_size", "moe_intermediate_size", "n_routed_experts", "kv_lora_rank",
                              "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_experts_per_tok"),
}
_ALIASES = {"falcon": {"num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",)}}


# whole-number fields of a config.json and the range a real model's value lies in: beyond it, the file is wrong
# (a negative width, a zero head count) and every size computed from it would be nonsense
_WIDTH, _COUNT = (1, 2**20), (1, 2**16)
_RANGES = {"hidden_size": _WIDTH, "intermediate_size": _WIDTH, "ffn_dim": _WIDTH, "ffn_hidden_size": _WIDTH,
           "moe_intermediate_size": _WIDTH, "head_dim": _WIDTH, "kv_lora_rank": _WIDTH, "q_lora_rank": _WIDTH,
           "qk_rope_head_dim": _WIDTH, "qk_nope_head_dim": _WIDTH, "v_head_dim": _WIDTH,
           "word_embed_proj_dim": _WIDTH, "num_hidden_layers": (1, 10_000), "num_attention_heads": _COUNT,
           "num_key_value_heads": _COUNT, "vocab_size": (1, 2**24), "max_position_embeddings": (1, MAX_COUNT),
           "sliding_window": (1, MAX_COUNT), "num_local_experts": _COUNT, "n_routed_experts": _COUNT,
           "num_experts_per_tok": _COUNT, "n_shared_experts": (0, 2**16), "first_k_dense_replace": (0, 10_000),
           "num_nextn_predict_layers": (0, 10_000), "max_window_layers": (0, 10_000)}


def _get(cfg: dict, key: str, *aliases: str, default=None):
    for k in (key, *aliases):
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _whole(cfg: dict, key: str, *aliases: str, default=None) -> int:
    """A whole-number field (or its first alias present), checked against :data:`_RANGES`; ``default`` where
    absent or null."""
    value = next(((k, cfg[k]) for k in (key, *aliases) if cfg.get(k) is not None), None)
    if value is None:
        return default
    name, number = value
    low, high = _RANGES.get(key, _WIDTH)
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) \
            or number != int(number) or not low <= number <= high:
        raise PlannerError(f"config.json {name} {number!r}: expected a whole number from {low:,} to {high:,}")
    return int(number)


def _fp8_block(quant) -> int | None:
    """An FP8 checkpoint's weight-block granularity, else None: ``weight_block_size`` [n, k] tiles each weight, and
    vLLM's shards must hold whole blocks both ways (the MLP's gate/up split on n, its down projection on k)."""
    block = quant.get("weight_block_size") if isinstance(quant, dict) and quant.get("quant_method") == "fp8" else None
    if block is None:
        return None
    if not isinstance(block, list) or len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
        raise PlannerError(f"config.json quantization_config.weight_block_size {block!r}: expected two positive "
                           "whole numbers such as [128, 128]")
    return math.lcm(*block)


def _flag(cfg: dict, key: str, default: bool) -> bool:
    """A true/false field; ``default`` where absent or null (a string "false" is not false, so it is refused)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PlannerError(f"config.json {key} {value!r}: expected true or false")
    return value


def from_hf_config(cfg: dict, name: str | None = None, published_params: int | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` dict.

    Raises
    ------
    PlannerError
        For an unsupported ``model_type``, missing fields, or a field of the wrong type or outside the range a
        model's value lies in (:data:`_RANGES`), naming it.
    """
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type in ("refinedweb", "refinedwebmodel"):
        model_type = "falcon"
    if not model_type:
        raise PlannerError("config.json has no model_type: expected a Hugging Face model config, whose model_type "
                           f"names its architecture (one of {', '.join(FAMILIES)})")
    if model_type not in FAMILIES:
        raise PlannerError(f"config.json model_type {cfg.get('model_type')!r} is not supported: expected one of "
                           f"{', '.join(FAMILIES)}")
    aliases = _ALIASES.get(model_type, {})
    missing = [k for k in _REQUIRED[model_type] if _get(cfg, k, *aliases.get(k, ())) is None]
    if model_type == "falcon":
        missing += [k for k in ("num_hidden_layers", "num_attention_heads")
                    if _get(cfg, k, *aliases.get(k, ())) is None]
    if missing:
        raise PlannerError(f"config.json ({model_type}) lacks {', '.join(missing)}: these fields are needed to size "
                           "the weights and the KV cache")
    hidden = _whole(cfg, "hidden_size")
    layers = _whole(cfg, "num_hidden_layers", "n_layer")
    heads = _whole(cfg, "num_attention_heads", "n_head")
    kv_heads = _whole(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    if heads % kv_heads:
        raise PlannerError(f"config.json num_key_value_heads {kv_heads}: expected a divisor of num_attention_heads "
                           f"({heads}), each KV head serving the same number of query heads")
    if cfg.get("head_dim") is None and hidden % heads:
        raise PlannerError(f"config.json num_attention_heads {heads}: expected a divisor of hidden_size ({hidden}), "
                           "or a head_dim field")
    head_dim = _whole(cfg, "head_dim", default=hidden // heads)
    quant = cfg.get("quantization_config") or {}
    base = dict(name=name or cfg.get("_name_or_path") or model_type, hf_id=str(cfg.get("_name_or_path", "")),
                family=model_type, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                intermediate=_whole(cfg, "intermediate_size", "ffn_dim", "ffn_hidden_size", default=4 * hidden),
                vocab=_whole(cfg, "vocab_size"),
                max_position=_whole(cfg, "max_position_embeddings", "n_positions", default=2048),
                tied_embeddings=_flag(cfg, "tie_word_embeddings", model_type in ("gemma", "gemma2", "falcon", "opt")),
                published_params=published_params,
                weight_dtype="fp8" if isinstance(quant, dict) and quant.get("quant_method") == "fp8" else "bf16",
                fp8_block=_fp8_block(quant))
    if model_type in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma"):
        bias = _flag(cfg, "attention_bias", model_type == "qwen2")
        base.update(qkv_bias=bias, out_bias=_flag(cfg, "attention_bias", False), mlp_bias=_flag(cfg, "mlp_bias", False),
                    qk_norm=model_type == "qwen3")
        window = _whole(cfg, "sliding_window")
        if window and (model_type == "mistral" or _flag(cfg, "use_sliding_window", False)):
            # Qwen2/3 slide only the layers from max_window_layers on (Hugging Face's layer_types); Mistral all
            below = _whole(cfg, "max_window_layers", default=0) if model_type != "mistral" else 0
            base.update(sliding_window=window, sliding_layers=max(layers - below, 0))
        if model_type == "mixtral":
            base["moe"] = _moe(cfg, "num_local_experts", _whole(cfg, "intermediate_size"))
    elif model_type == "gemma2":
        base.update(norms_per_layer=4, sliding_window=_whole(cfg, "sliding_window", default=4096),
                    sliding_layers=(layers + 1) // 2)   # the even-indexed layers slide, the odd attend globally
    elif model_type == "falcon":
        new_arch = _flag(cfg, "new_decoder_architecture", False)
        if not new_arch and not _flag(cfg, "multi_query", True):
            kv_heads = heads
        elif not new_arch:
            kv_heads = 1
        bias = _flag(cfg, "bias", False)
        base.update(kv_heads=kv_heads, gated_mlp=False, norm="layer", qkv_bias=bias, out_bias=bias, mlp_bias=bias,
                    norms_per_layer=2 if new_arch else 1,
                    allreduces_per_layer=1 if new_arch or _flag(cfg, "parallel_attn", True) else 2,
                    intermediate=_whole(cfg, "ffn_hidden_size", default=4 * hidden))
    elif model_type == "opt":
        enable_bias = _flag(cfg, "enable_bias", True)
        base.update(gated_mlp=False, norm="layer", qkv_bias=enable_bias, out_bias=enable_bias, mlp_bias=enable_bias,
                    learned_positions=base["max_position"] + 2, intermediate=_whole(cfg, "ffn_dim"))
        if _whole(cfg, "word_embed_proj_dim", default=hidden) != hidden:
            raise PlannerError("config.json (opt) has word_embed_proj_dim != hidden_size (OPT-350m's projections): "
                               "not supported")
    elif model_type == "gpt_neox":
        base.update(gated_mlp=False, norm="layer", qkv_bias=True, out_bias=True, mlp_bias=True)
    elif model_type == "deepseek_v3":
        rope, nope = _whole(cfg, "qk_rope_head_dim"), _whole(cfg, "qk_nope_head_dim")
        base.update(mla=MLA(_whole(cfg, "q_lora_rank"), _whole(cfg, "kv_lora_rank"), rope, nope,
                            _whole(cfg, "v_head_dim")),
                    moe=_moe(cfg, "n_routed_experts", _whole(cfg, "moe_intermediate_size"),
                             shared_experts=_whole(cfg, "n_shared_experts", default=0),
                             first_dense_layers=min(_whole(cfg, "first_k_dense_replace", default=0), layers),
                             router_bias=True),
                    kv_heads=heads, head_dim=nope + rope, mtp_layers=_whole(cfg, "num_nextn_predict_layers", default=0))
    return ModelSpec(**base)


def _moe(cfg: dict, experts_key: str, expert_intermediate: int, **extra) -> MoE:
    experts, top_k = _whole(cfg, experts_key), _whole(cfg, "num_experts_per_tok")
    if top_k > experts:
        raise PlannerError(f"config.json num_experts_per_tok {top_k}: expected at most {experts_key} ({experts})")
    return MoE(experts, top_k, expert_intermediate, **extra)


def load_config(path: str | Path, kept: bool = True) -> ModelSpec:
    """A model from a ``config.json`` file on disk, named after its folder (after the file, for a file of another
    name) and rebuilt from the path as given (:func:`model_ref`); a file named ``config.json`` is served from its
    folder (``vllm serve /abs/FOLDER``: the weights sit beside it), another by its Hugging Face id or name. Where the
    file is not ``kept`` (an upload's temporary copy) it is rebuilt and served by its name."""
    try:
        cfg = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise PlannerError(f"{path}: no such file; expected a model preset name or a path to a config.json") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PlannerError(f"{path}: not a JSON config.json ({exc})") from exc
    if not isinstance(cfg, dict):
        raise PlannerError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    path = Path(path)
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    spec = from_hf_config(cfg, name=name)
    if not kept:
        return spec
    return replace(spec, config_path=str(path),
                   serve_path=str(path.resolve().parent) if path.name == "config.json" else "")


def _llama(hidden, layers, heads, kv, inter, vocab, ctx, **extra):
    return {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
            "max_position_embeddings": ctx, "tie_word_embeddings": False, **extra}


# name: (hf id, config fields, published parameter count, help). OPT's counts are the paper's rounded 13B / 66B /
# 175B (no exact total is published); the others are the Hugging Face safetensors totals.
_PRESETS = {
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B", _llama(4096, 32, 32, 8, 14336, 128256, 8192), 8_030_261_248,
                   "Llama 3 8B: GQA 8 KV heads, 128 KiB/token in bf16"),
    "llama-3-70b": ("meta-llama/Meta-Llama-3-70B", _llama(8192, 80, 64, 8, 28672, 128256, 8192), 70_553_706_496,
                    "Llama 3 70B: 320 KiB/token; needs TP ≥ 2 on 80 GB GPUs"),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", _llama(4096, 32, 32, 8, 14336, 128256, 131072), 8_030_261_248,
                     "Llama 3.1 8B: Llama 3 8B's architecture with a 128k context"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B", _llama(8192, 80, 64, 8, 28672, 128256, 131072), 70_553_706_496,
                      "Llama 3.1 70B (and 3.3 70B): Llama 3 70B's architecture with a 128k context"),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", _llama(16384, 126, 128, 8, 53248, 128256, 131072),
                       405_853_388_800, "Llama 3.1 405B: fp8 or multi-node"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", _llama(8192, 80, 64, 8, 28672, 32000, 4096), 68_976_648_192,
                    "Llama 2 70B: GQA 8 KV heads, 320 KiB/token, 4k context, 32k vocabulary"),
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", _llama(4096, 32, 32, 32, 11008, 32000, 4096), 6_738_415_616,
                   "Llama 2 7B: multi-head attention (512 KiB/token), 4k context"),
    "codellama-34b": ("codellama/CodeLlama-34b-Instruct-hf", _llama(8192, 48, 64, 8, 22016, 32000, 16384),
                      33_743_970_304, "Code Llama 34B: GQA 8 KV heads, 192 KiB/token, 16k context"),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1",
                   {**_llama(4096, 32, 32, 8, 14336, 32000, 32768), "model_type": "mistral", "sliding_window": 4096},
                   7_241_732_096, "Mistral 7B v0.1: sliding window 4096 on every layer"),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1",
                     {**_llama(4096, 32, 32, 8, 14336, 32000, 32768), "model_type": "mixtral",
                      "num_local_experts": 8, "num_experts_per_tok": 2}, 46_702_792_704,
                     "Mixtral 8x7B: 8 experts, top-2; 12.9B active"),
    "mixtral-8x22b": ("mistralai/Mixtral-8x22B-Instruct-v0.1",
                      {**_llama(6144, 56, 48, 8, 16384, 32768, 65536), "model_type": "mixtral",
                       "num_local_experts": 8, "num_experts_per_tok": 2}, 140_630_071_296,
                      "Mixtral 8x22B Instruct v0.1: 8 experts, top-2; 39B active (its 32,768-token vocabulary; the "
                      "base v0.1 has 32,000)"),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B", {**_llama(3584, 28, 28, 4, 18944, 152064, 131072), "model_type": "qwen2"},
                   7_615_616_512, "Qwen2.5 7B: 4 KV heads (56 KiB/token), q/k/v biases"),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B", {**_llama(8192, 80, 64, 8, 29568, 152064, 131072), "model_type": "qwen2"},
                    72_706_203_648, "Qwen2.5 72B: q/k/v biases"),
    "qwen3-14b": ("Qwen/Qwen3-14B", {**_llama(5120, 40, 40, 8, 17408, 151936, 40960), "model_type": "qwen3",
                                     "head_dim": 128}, 14_768_307_200,
                  "Qwen3 14B: 8 KV heads (160 KiB/token), q/k norms, no q/k/v biases"),
    "yi-34b": ("01-ai/Yi-34B", _llama(7168, 60, 56, 8, 20480, 64000, 4096), 34_388_917_248,
               "Yi 34B: Llama architecture, 240 KiB/token"),
    "falcon-180b": ("tiiuae/falcon-180B",
                    {"model_type": "falcon", "hidden_size": 14848, "num_hidden_layers": 80, "num_attention_heads": 232,
                     "num_kv_heads": 8, "vocab_size": 65024, "new_decoder_architecture": True, "bias": False,
                     "parallel_attn": True, "max_position_embeddings": 2048, "tie_word_embeddings": False},
                    179_522_565_120,
                    "Falcon 180B: parallel attention, 8 KV groups of head_dim 64, LayerNorm; output head stored apart"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3",
                    {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
                     "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                     "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                     "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536,
                     "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                     "vocab_size": 129280, "max_position_embeddings": 163840, "num_nextn_predict_layers": 1,
                     "tie_word_embeddings": False,
                     "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, 671_026_419_200,
                    "DeepSeek-V3: MLA (576-wide latent per token per layer, held whole by every TP rank), "
                    "256 routed + 1 shared experts, 37B active"),
    "gemma-2-9b": ("google/gemma-2-9b",
                   {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
                    "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
                    "max_position_embeddings": 8192, "sliding_window": 4096, "tie_word_embeddings": True},
                   9_241_705_984, "Gemma 2 9B: alternate layers use a 4096-token window; head_dim 256"),
    "opt-13b": ("facebook/opt-13b",
                {"model_type": "opt", "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
                 "ffn_dim": 20480, "vocab_size": 50272, "max_position_embeddings": 2048}, 13_000_000_000,
                "OPT 13B: multi-head attention (800 KiB/token), LayerNorm, learned positions"),
    "opt-66b": ("facebook/opt-66b",
                {"model_type": "opt", "hidden_size": 9216, "num_hidden_layers": 64, "num_attention_heads": 72,
                 "ffn_dim": 36864, "vocab_size": 50272, "max_position_embeddings": 2048}, 66_000_000_000,
                "OPT 66B: multi-head attention"),
    "opt-175b": ("facebook/opt-175b (metaseq; no public HF weights)",
                 {"model_type": "opt", "hidden_size": 12288, "num_hidden_layers": 96, "num_attention_heads": 96,
                  "ffn_dim": 49152, "vocab_size": 50272, "max_position_embeddings": 2048}, 175_000_000_000,
                 "OPT 175B: GPT-3-sized, multi-head attention (4.5 MiB/token)"),
}


# Fine-tunes published with their base's config.json (the same shapes, vocabulary and context), by Hugging Face id:
# a trace logs the id its server was started with, most often a chat or instruct one, and these are the preset's
# model. Left out where the config differs: Qwen2.5-*-Instruct (a 32,768-token context, not 131,072),
# Mistral-7B-Instruct-v0.2 and later (no sliding window, a 32,768 vocabulary in v0.3), Mixtral-8x22B-v0.1 (a
# 32,000 vocabulary: its preset is the Instruct's), FP8 checkpoints (another weight dtype: give --weight-dtype fp8).
FINE_TUNES: dict[str, tuple[str, ...]] = {
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B-Instruct",),
    "llama-3-70b": ("meta-llama/Meta-Llama-3-70B-Instruct",),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B",
                     "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B",
                      "meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B-Instruct", "meta-llama/Meta-Llama-3.1-405B",
                       "meta-llama/Meta-Llama-3.1-405B-Instruct"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-chat-hf",),
    "llama-2-7b": ("meta-llama/Llama-2-7b-chat-hf",),
    "codellama-34b": ("codellama/CodeLlama-34b-hf", "codellama/CodeLlama-34b-Python-hf"),
    "mistral-7b": ("mistralai/Mistral-7B-Instruct-v0.1",),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-Instruct-v0.1",),
    "yi-34b": ("01-ai/Yi-34B-Chat",),
    "falcon-180b": ("tiiuae/falcon-180B-chat",),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"),
    "gemma-2-9b": ("google/gemma-2-9b-it",),
}


# a preset's Hugging Face id and its fine-tunes' ids, in lower case -> the preset
_BY_HF_ID = {hf_id.lower(): name for name, (own, *_) in _PRESETS.items() for hf_id in (own, *FINE_TUNES.get(name, ()))}


def preset_names() -> list[str]:
    return list(_PRESETS)


def preset_name(ref: str) -> str | None:
    """The preset ``ref`` names, by its name, its Hugging Face id or the id of one of its :data:`FINE_TUNES` (either
    case); None for any other name."""
    key = ref.strip().lower()
    return key if key in _PRESETS else _BY_HF_ID.get(key)


def model_ref(spec: ModelSpec) -> str:
    """What ``--model`` takes to rebuild ``spec``: the config.json it was read from, as given, else its preset's
    name, else a config.json in a folder of its name. The bare name of a model read from a file was refused as
    unknown, or, where the folder bore a preset's name, rebuilt that preset instead."""
    if spec.config_path:
        return spec.config_path
    key = preset_name(spec.name)
    return spec.name if key is not None and get_model(key) == spec else f"{spec.name}/config.json"


def get_model(ref: str) -> ModelSpec:
    """A preset by name, by its Hugging Face id (``Qwen/Qwen3-14B``) or by the id of one of its
    :data:`FINE_TUNES` (``meta-llama/Llama-3.1-8B-Instruct``); or a model read from a path to a ``config.json``."""
    key = preset_name(ref)
    if key is not None:
        hf_id, cfg, published, help_text = _PRESETS[key]
        spec = from_hf_config(cfg, name=key, published_params=published)
        return replace(spec, hf_id=hf_id, help=help_text)
    if ref.endswith(".json") or Path(ref).is_file():
        return load_config(ref)
    raise PlannerError(f"unknown model {ref!r}: expected a preset ({', '.join(_PRESETS)}), a preset's Hugging "
                       "Face id or a path to a Hugging Face config.json")
