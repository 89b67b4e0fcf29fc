"""The serving scenario every capacity page shares, bound to the URL: one set of widgets, one Scenario."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import streamlit as st

from pages._calibration import cost_params, show_warning
from pages._link import given_int
from planner.capacity.memory import Overheads
from planner.capacity.vllm_log import overheads_from_log
from planner.catalog.gpus import GPUS, GiB
from planner.catalog.models import WEIGHT_BYTES
from planner.catalog.presets import get_model, load_config, preset_names
from planner.catalog.releases import VLLM_VERSIONS
from planner.errors import PlannerError
from planner.scenario import Scenario, defaults
from planner.sim.engines import ENGINES

URL = {"bind": "query-params", "persist_state": "page"}
# drawn by the frame (app.py) above these pages: the scenario on each, the recommendation search on the last two
SCENARIO_PAGES = ("memory", "simulate", "recommend", "report")
SEARCH_PAGES = ("recommend", "report")
# kept for the session too: a page that does not draw them (Overview) drops them from the URL, and the next page that
# does restores them from the session and writes them back to the URL
SHARED = {"bind": "query-params", "persist_state": "session"}
UPLOADED = "uploaded config.json"
REMEDIES = {"none": {}, "reserve predicted p75": {"reserve_quantile": 0.75},
            "reserve predicted p95": {"reserve_quantile": 0.95},
            "shortest predicted first": {"priority": "shortest-predicted"}}
ASYNC = {"as the release does": None, "on": True, "off": False}


def model_choice():
    """A preset or an uploaded Hugging Face config.json (its spec kept in the session)."""
    names = preset_names() + [UPLOADED]
    choice = st.selectbox("Model", names, key="model", **SHARED,
                          help="A preset, or upload any Hugging Face config.json (llama, mistral, mixtral, qwen2, "
                               "qwen3, gemma2, falcon, opt, gpt_neox, deepseek_v3)")
    if choice != UPLOADED:
        return get_model(choice)
    upload = st.file_uploader("config.json", type=["json"], key="model_config")
    if upload is None:
        st.info("Upload a config.json to size a model of your own.")
        st.stop()
    with tempfile.TemporaryDirectory() as tmp:
        stem = Path(upload.name).stem       # an upload's file name names the model; "config" or dots name none
        path = Path(tmp) / (stem if stem.strip(".") and stem != "config" else "uploaded-model") / "config.json"
        path.parent.mkdir()
        path.write_bytes(upload.getvalue())
        try:
            return load_config(path, kept=False)      # the copy goes with the folder
        except (PlannerError, json.JSONDecodeError) as exc:
            st.error(str(exc))
            st.stop()


def set_current(scenario_: Scenario, options=None) -> None:
    """Hand the frame's scenario (and search options) to the page it runs next, in this run."""
    st.session_state["current_scenario"] = (scenario_, options)


def current(search: bool = False):
    """``(Scenario, RecommendOptions or None)`` the frame built for this run; a page run without the frame
    (Streamlit's AppTest runs pages alone) draws the same widgets itself."""
    handed = st.session_state.pop("current_scenario", None)
    if handed is not None:
        return handed
    if not search:
        return scenario(), None
    from pages._search import search_controls

    return scenario(), search_controls()


def _gib(value: float | None) -> int | None:
    return None if value is None else int(round(value * GiB))


def scenario() -> Scenario:
    """Model, GPU, TP, dtypes, vLLM's memory flags and overheads (or a pasted startup log), the engine and its
    settings and the cost model, from the widgets; a value ``vllm serve`` would refuse is shown as the error and
    stops the page. Inputs left empty take the value shown as "auto", which is what applies."""
    c = st.columns(4)
    with c[0]:
        model = model_choice()
    # no format_func: a bound widget writes its displayed label to the URL, and links should carry preset names
    gpu_name = c[1].selectbox("GPU", list(GPUS), key="gpu", **SHARED)
    tp = c[2].selectbox("Tensor parallel", [1, 2, 4, 8, 16], key="tp", **SHARED,
                        help="GPUs per replica; KV heads split across them, replicated beyond their number")
    # %g: a linked 0.855 shows as such (the default two decimals showed 0.85 while 0.855 sized the pool)
    util = c[3].number_input("gpu_memory_utilization", 0.05, 1.0, 0.9, 0.01, format="%g", key="util", **SHARED,
                             help="Fraction of the memory CUDA reports that vLLM may use: vllm serve's default "
                                  "was 0.9 and is 0.92 from 0.20 (vllm PR #38284); give your server's")
    shown = defaults(model, GPUS[gpu_name])
    c = st.columns(5)
    max_len = c[0].number_input("max_model_len", 1, 10_000_000, None, 1024, key="max_len", **SHARED,
                                placeholder=f"auto: {shown['max_model_len']:,}",
                                help="Empty: the model's max_position_embeddings")
    kv_dtype = c[1].selectbox("KV cache dtype", ["auto", "fp8"], key="kv_dtype", **SHARED)
    weight_dtype = c[2].selectbox("Weights", ["model default"] + list(WEIGHT_BYTES), key="weights", **SHARED,
                                  help=f"model default: {shown['weight_dtype']}")
    block = c[3].selectbox("Block size", ["auto", 16, 32, 64, 128], key="block", **SHARED,
                           help="vLLM's --block-size. auto: 16, or 64 for an MLA model (DeepSeek) on Hopper, where "
                                "vLLM's FlashMLA backend forces multiples of 64 (it raises a smaller size to 64)")
    # empty by default: a GPU's own rate as default stayed the old GPU's after a switch (a keyed widget's state)
    price = c[4].number_input("$ per GPU-hour", 0.0, 1000.0, None, 0.05, format="%g", key="price", **SHARED,
                              placeholder=f"auto: {GPUS[gpu_name].price_per_hour:g}",
                              help="Your price; empty: a typical on-demand cloud rate for the GPU")
    gpu = GPUS[gpu_name] if price is None else GPUS[gpu_name].with_price(price)
    with st.expander("Engine and scheduler limits"):
        c = st.columns(4)
        engine = c[0].selectbox("Engine", list(ENGINES), key="engine", **SHARED,
                                help=" ".join(f"{e.label}: {e.help}" for e in ENGINES.values()))
        chunked = c[1].toggle("Chunked prefill", True, key="chunked", **SHARED)
        # each limit's default follows the other's given value (a budget of 512 serves 512 sequences)
        auto = defaults(model, gpu, max_len, chunked, given_int("seqs"), given_int("batched"), engine)
        seqs = c[2].number_input("max_num_seqs", 1, 100_000, None, 8, key="seqs", **SHARED,
                                 placeholder=f"auto: {auto['max_num_seqs']:,}", help="Empty: vllm serve's default here")
        batched = c[3].number_input("max_num_batched_tokens", 1, 1_000_000, None, 256, key="batched", **SHARED,
                                    placeholder=f"auto: {auto['max_num_batched_tokens']:,}",
                                    help="Empty: vllm serve's default here")
        c = st.columns(4)
        max_new = c[0].number_input("max_new_tokens", 1, 1_000_000, None, 64, key="max_new", **SHARED,
                                    placeholder="no cap", help="Empty: no cap; reserving engines then reserve up to "
                                                               "max_model_len")
        preemption = c[1].selectbox("Preemption (vLLM V0)", ["recompute", "swap"], key="preemption", **SHARED,
                                    disabled=len(ENGINES[engine].preemption_modes) < 2,
                                    help="vLLM V1 and the reserving engines always recompute")
        remedy = c[2].selectbox("Remedy (vLLM V1)", list(REMEDIES), key="remedy", **SHARED,
                                disabled=engine != "vllm-v1")
        caching = c[3].toggle("Prefix caching", True, key="prefix_caching", **SHARED,
                              disabled=ENGINES[engine].prefix_caching is None,
                              help="vLLM V1 caches prefixes by default (--no-enable-prefix-caching turns it off). "
                                   + ENGINES[engine].label + ": " + ENGINES[engine].prefix_cache_note)
        c = st.columns(2)
        # "auto" resolves by engine, and a keyed selectbox keeps its first labels: the caption below names it
        version = c[0].selectbox("vLLM version", ["auto", *VLLM_VERSIONS], key="vllm_version", **SHARED,
                                 format_func=lambda v: f"{v}: {VLLM_VERSIONS[v].label}" if v != "auto"
                                 else "auto: the engine's newest release",
                                 help="Releases profile activation and non-torch memory differently (≥ 0.20 "
                                      "subtracts CUDA-graph memory before sizing the KV cache); ≥ 0.11 replays full "
                                      "CUDA graphs for decode steps, ≥ 0.14 schedules asynchronously by default")
        lagged = c[1].selectbox("Async scheduling (vLLM V1)", list(ASYNC), key="async", **SHARED,
                                disabled=engine != "vllm-v1",
                                help="A step's batch fixed while the step before it runs: a new request joins one "
                                     "step later (TTFT), the GPU never waits for the scheduler. vllm serve does it "
                                     "by default from 0.14 (--no-async-scheduling), opt-in before (--async-scheduling)")
    with st.expander("Memory overheads, startup log and cost model"):
        c = st.columns(4)
        activation = c[0].number_input("Activation peak (GiB)", 0.0, 100.0, None, 0.1, key="act", **SHARED,
                                       placeholder="estimated", help="Empty: estimated from the scheduler limits")
        non_torch = c[1].number_input("Non-torch (GiB)", 0.0, 50.0, None, 0.1, key="nontorch", **SHARED,
                                      placeholder="estimated", help="Empty: 0.25 GiB, 2.1 GiB with NCCL under TP")
        graphs = c[2].number_input("CUDA graphs (GiB)", 0.0, 20.0, None, 0.1, key="graphs", **SHARED,
                                   placeholder="estimated", help="Empty: estimated from the layers and max_num_seqs")
        override = c[3].number_input("num_gpu_blocks override", 1, 100_000_000, None, 1024, key="blocks", **SHARED,
                                     placeholder="computed")
        log_text = st.text_area("vLLM startup log", key="vllm_log", height=120, persist_state="session",
                                placeholder="Model loading took 14.99 GiB …\nAvailable KV cache memory: 54.49 GiB …",
                                help="Fits the overheads (and the GPU's memory) so the plan reproduces this server; "
                                     "kept while you switch pages, but not carried by a link (too long for one)")
        cost = cost_params()
    overheads = Overheads(vllm_version=None if version == "auto" else version)
    try:
        if log_text.strip():
            gpu, overheads = overheads_from_log(log_text, gpu, util, overheads.vllm_version)
        # entered values replace the log's fits too, as the CLI's flags do
        overheads = overheads.with_entered(activation_bytes=_gib(activation), non_torch_bytes=_gib(non_torch),
                                           cudagraph_bytes=_gib(graphs))
        out = Scenario(model, gpu, tp=int(tp), weight_dtype=None if weight_dtype == "model default" else weight_dtype,
                       kv_cache_dtype=kv_dtype, gpu_memory_utilization=float(util), max_model_len=max_len,
                       block_size=None if block == "auto" else int(block), num_gpu_blocks=override, max_num_seqs=seqs,
                       max_num_batched_tokens=batched, overheads=overheads, engine=engine, chunked_prefill=chunked,
                       prefix_caching=caching, async_scheduling=ASYNC[lagged] if engine == "vllm-v1" else None,
                       preemption=preemption if len(ENGINES[engine].preemption_modes) > 1 else "recompute",
                       max_new_tokens=max_new, cost=cost, **(REMEDIES[remedy] if engine == "vllm-v1" else {}))
    except PlannerError as exc:
        st.error(str(exc))
        st.stop()
    if log_text.strip():
        o = out.overheads
        st.success(f"Overheads fitted from the log: weights {o.weights_bytes / GiB:.2f} GiB per GPU, activation "
                   f"{o.activation_bytes / GiB:.2f} GiB, non-torch {o.non_torch_bytes / GiB:.2f} GiB, CUDA graphs "
                   f"{o.cudagraph_bytes / GiB:.2f} GiB (outside the budget), GPU memory {gpu.memory_gib:.2f} GiB.")
    for warning in out.calibration_warnings:
        show_warning(warning)
    applied = out.cost.resolved(out)
    st.caption(f"{gpu.label}: {gpu.memory_gib:.2f} GiB as CUDA reports it, {gpu.hbm_bw_bytes_s / 1e12:.2f} TB/s, "
               f"{gpu.bf16_flops / 1e12:.0f} TFLOPS BF16 dense, GPU link {gpu.gpu_link_bytes_s / 1e9:.0f} GB/s, "
               f"host {gpu.pcie_bytes_s / 1e9:.1f} GB/s, {gpu.power_w or '?'} W; "
               f"${out.price_per_replica_hour:.2f}/hour per replica of {out.tp}; served as vLLM {out.release.label}; "
               f"step costs at MFU {applied.mfu:.3g}, MBU {applied.mbu:.3g}, roofline knee p {applied.roofline_p:g}. "
               f"{gpu.help}")
    return out
