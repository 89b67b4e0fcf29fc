"""The serving scenario every capacity page shares: model, GPU, TP and vLLM's memory flags, bound to the URL."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import streamlit as st

from planner.catalog.gpus import GPUS
from planner.catalog.models import WEIGHT_BYTES
from planner.catalog.presets import get_model, load_config, preset_names
from planner.errors import PlannerError

URL = {"bind": "query-params", "persist_state": "page"}
UPLOADED = "uploaded config.json"


def model_choice():
    """A preset or an uploaded Hugging Face config.json (its spec kept in the session)."""
    names = preset_names() + [UPLOADED]
    choice = st.selectbox("Model", names, key="model", **URL,
                          help="A preset, or upload any Hugging Face config.json (llama, mistral, mixtral, qwen2, "
                               "qwen3, gemma2, falcon, opt, gpt_neox, deepseek_v3)")
    if choice != UPLOADED:
        return get_model(choice)
    upload = st.file_uploader("config.json", type=["json"], key="model_config")
    if upload is None:
        st.info("Upload a config.json to size a model of your own.")
        st.stop()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(upload.name).stem / "config.json"
        path.parent.mkdir()
        path.write_bytes(upload.getvalue())
        try:
            return load_config(path)
        except (PlannerError, json.JSONDecodeError) as exc:
            st.error(str(exc))
            st.stop()


def scenario() -> dict:
    """Model, GPU and vLLM memory settings from the widgets (defaults are vLLM's own)."""
    c = st.columns(4)
    with c[0]:
        model = model_choice()
    # no format_func: a bound widget writes its displayed label to the URL, and links should carry preset names
    gpu_name = c[1].selectbox("GPU", list(GPUS), key="gpu", **URL)
    tp = c[2].selectbox("Tensor parallel", [1, 2, 4, 8, 16], key="tp", **URL,
                        help="GPUs per replica; KV heads split across them, replicated beyond their number")
    util = c[3].number_input("gpu_memory_utilization", 0.05, 1.0, 0.9, 0.01, key="util", **URL,
                             help="Fraction of the memory CUDA reports that vLLM may use")
    c = st.columns(5)
    max_len = c[0].number_input("max_model_len", 0, 10_000_000, 0, 1024, key="max_len", **URL,
                                help="0: the model's max_position_embeddings")
    kv_dtype = c[1].selectbox("KV cache dtype", ["auto", "fp8"], key="kv_dtype", **URL)
    weight_dtype = c[2].selectbox("Weights", ["model default"] + list(WEIGHT_BYTES), key="weights", **URL)
    block = c[3].selectbox("Block size", [16, 32, 64], key="block", **URL)
    price = c[4].number_input("$ per GPU-hour", 0.0, 1000.0, GPUS[gpu_name].price_per_hour, 0.05, key="price",
                              **URL, help="Your price; the default is a typical on-demand cloud rate")
    gpu = GPUS[gpu_name].with_price(price)
    st.caption(f"{gpu.label}: {gpu.memory_gib:.2f} GiB as CUDA reports it, {gpu.hbm_bw_bytes_s / 1e12:.2f} TB/s, "
               f"{gpu.bf16_flops / 1e12:.0f} TFLOPS BF16 dense, GPU link {gpu.gpu_link_bytes_s / 1e9:.0f} GB/s, "
               f"host {gpu.pcie_bytes_s / 1e9:.1f} GB/s, {gpu.power_w or '?'} W; ${gpu.price_per_hour * tp:.2f}/hour "
               f"per replica of {tp}. {gpu.help}")
    return {"model": model, "gpu": gpu, "tp": int(tp), "gpu_memory_utilization": float(util),
            "max_model_len": int(max_len) or None, "kv_cache_dtype": kv_dtype, "block_size": int(block),
            "weight_dtype": model.weight_dtype if weight_dtype == "model default" else weight_dtype}


def search_controls(s: dict) -> dict:
    """SLO classes, headroom, engine and the compared options of a recommendation (Recommend and Report pages
    share them, and the URL): the ``params`` :func:`pages._shared.recommendation` caches on. A malformed SLO class
    or TP list is shown as an error and stops the page, before any search runs."""
    from planner.recommend.search import parse_slo
    from planner.sim.engines import ENGINES

    c = st.columns([3, 1])
    slo_text = c[0].text_input("SLO classes", "ttft:ttft_p99<200; tpot:tpot_p99<50", key="slos", **URL,
                               help="Separated by ';': NAME:METRIC<VALUE (METRIC ttft_pNN, tpot_pNN or e2e_pNN, in "
                                    "ms), or an attainment share such as chat:ttft<200,tpot<50@90% (90% of "
                                    "requests meet both); a throughput class (no latency bound) is always added")
    headroom = c[1].number_input("Peak headroom ×", 1.0, 5.0, 1.0, 0.1, key="headroom", **URL)
    c = st.columns(3)
    engine = c[0].selectbox("Engine", list(ENGINES), key="engine", **URL,
                            help="; ".join(f"{e.name}: {e.label}" for e in ENGINES.values())
                            + ". vllm-v0 also compares recompute and swap preemption.")
    tp_text = c[1].text_input("Compare TP degrees", "", key="tp_search", placeholder="e.g. 1,2,4", **URL,
                              help="by requests/s per GPU; empty: the scenario's TP")
    caps_text = c[2].text_input("Compare max_new_tokens caps", "", key="caps", placeholder="e.g. none,p95", **URL,
                                help="none, integers, or pNN percentiles of the trace's output lengths")
    slos = tuple(t.strip() for t in slo_text.split(";") if t.strip()) + ("throughput:throughput",)
    try:
        for text in slos:
            parse_slo(text)
        tp_options = tuple(int(t) for t in tp_text.replace(" ", "").split(",") if t)
    except PlannerError as exc:
        st.error(str(exc))
        st.stop()
    except ValueError:
        st.error(f"Compare TP degrees {tp_text!r}: expected integers such as 1,2,4")
        st.stop()
    return {"model": repr(s["model"]), "gpu": repr(s["gpu"]), "tp": s["tp"], "util": s["gpu_memory_utilization"],
            "max_len": s["max_model_len"], "kv_dtype": s["kv_cache_dtype"], "slos": slos, "headroom": headroom,
            "engine": engine, "tp_options": tp_options,
            "caps": tuple(t.strip() for t in caps_text.split(",") if t.strip())}
