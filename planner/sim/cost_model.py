"""Step-time cost model: the time of one engine iteration on a GPU, from FLOPs and bytes (a roofline).

One iteration runs prefill chunks (each after some earlier context) and decoding sequences (each with its context)
together. Its time is two rooflines, one after the other, plus TP all-reduces and a per-step and a per-sequence
overhead: the linear layers' ``max(FLOPs / (MFU · peak), weight bytes / (MBU · bandwidth))`` and attention's
``max(FLOPs / (MFU · peak), KV bytes / (MBU · bandwidth))``, each ``max`` smoothed near its ridge point
(``roofline_p``). They are apart because the GPU runs them apart: each layer's attention kernel starts when its QKV
GEMM ends and the output GEMM waits for it, so a mixed step's KV reads do not hide under its GEMMs' compute (Vidur
sums its operators' times the same way; a single ``max`` over the step, BLIS's, lets them overlap).
Linear layers cost ``2 · active parameters`` FLOPs per token (those every rank holds whole, on every rank), the
logits ``2 · vocab · hidden`` per sequence; causal attention ``2 · layers · heads · (qk + v head widths)`` per
(query, key) pair (``4 · layers · heads · head_dim`` but for MLA), averaged over the layers where some slide a window
(:func:`planner.sim.step_spec.window_skips`); each kind at the tensor peak it runs at
(an 8-bit checkpoint's linear layers at the 8-bit one, attention and the logits in 16 bits). The linear layers
stream the weights (the experts an MoE step's tokens touch); attention reads the KV cache of the batch's context
and writes its new tokens'. Defaults and their sources:
``../shared/reference/performance-models.md`` §2–3; :mod:`planner.sim.calibration` fits them to measurements.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING

import numba
import numpy as np

from planner.capacity.memory import kv_bytes_per_token
from planner.catalog.models import (active_param_count, kv_replica_param_count, param_count, replicated_param_count,
                                    routed_expert_param_count, weights_bytes_per_gpu)
from planner.errors import PlannerError
from planner.sim.step_spec import batch_aggregates, check_step

if TYPE_CHECKING:
    from planner.scenario import Scenario

@dataclass(frozen=True)
class FittedOn:
    """The server a calibration was measured on: the parameters it fitted are that server's.

    Attributes
    ----------
    model, gpu, tp : str, str, int
        Catalog names (a config.json model by the name it was given) and the tensor-parallel degree.
    engine, weight_dtype, kv_cache_dtype : str or None
        Its engine and dtypes; None in calibration files written before they were recorded.
    fitted : tuple of str
        The parameters the measurements set; the rest were left to the scenario they are applied to.
    fit_notes : tuple of str
        What the file says of its own fit (errors in sample and held out, warnings), for a report to repeat.
    """

    model: str
    gpu: str
    tp: int
    engine: str | None
    fitted: tuple[str, ...]
    weight_dtype: str | None = None
    kv_cache_dtype: str | None = None
    fit_notes: tuple[str, ...] = ()


def _same_precision(fitted: str | None, applied: str) -> bool:
    """Whether a dtype the calibration was measured with runs as ``applied`` does (the 16-bit ones, and the KV
    cache's "auto" for a 16-bit model, alike); unrecorded (None) counts as the same."""
    sixteen = {"bf16", "fp16", "auto"}
    return fitted is None or fitted == applied or {fitted, applied} <= sixteen


# The values each parameter may take, from defaults, a calibration file or a hand edit of one: a fit searches
# inside them (planner.sim.calibration) and a scenario refuses a value outside them. A GPU below 2% of its peak
# is broken, not slow. The overheads' ceilings are rails against a unit slip, not measurements: 50 ms per step
# (330x the default 150 µs), 1 ms per sequence (250x BLIS's 4 µs), 1 ms per all-reduce (40x an eager NCCL call's
# 25 µs), 50 ms per TP step (7x vLLM V0's Ray hand-over), 1 ms per piecewise layer (60x the default), 1 s of
# frontend per request (170x the default 6 ms). The knee runs from 1 (the two bounds added) up: any p from
# SHARPEST_KNEE is their max, so a file may give more, and a fit searches no higher.
SHARPEST_KNEE = 64.0
PARAM_RANGES = {"mfu": (0.02, 1.0), "mbu": (0.02, 1.0), "link_efficiency": (0.01, 1.0), "roofline_p": (1.0, math.inf),
                "step_overhead_s": (0.0, 0.05), "seq_overhead_s": (0.0, 1e-3), "allreduce_latency_s": (0.0, 1e-3),
                "tp_step_overhead_s": (0.0, 0.05), "piecewise_layer_s": (0.0, 1e-3), "frontend_s": (0.0, 1.0)}


@dataclass(frozen=True)
class CostParams:
    """Efficiencies and overheads of the roofline (calibratable).

    Attributes
    ----------
    mfu : float or None
        Fraction of peak FLOP/s a prefill-heavy step reaches (Vidur-measured A100 GEMMs 0.69-0.80; end-to-end
        prefill 0.4-0.5, BLIS 0.38). None: the GPU's (:attr:`planner.catalog.gpus.GPU.mfu`: 0.55 on A100 and
        H100, scaled by measured GEMMs on H200 and L40S).
    mbu : float or None
        Fraction of peak memory bandwidth a decode step streams at (vLLM/TRT-LLM 0.6-0.85; A100 GEMV 0.81).
        None: the GPU's (:attr:`planner.catalog.gpus.GPU.mbu`: 0.80 on A100 and H100).
    step_overhead_s : float
        Scheduler, sampler and launch time per iteration (0.1-0.2 ms with CUDA graphs).
    seq_overhead_s : float
        Extra time per sequence in the batch (BLIS: 4 µs per request).
    allreduce_latency_s : float or None
        Floor of one all-reduce between two ranks; it grows with ``log2(tp)`` (tree and two-shot all-reduces take
        ``log2`` rounds). That growth is a modelling choice, set with the H100's 10 µs on the TP 2 and TP 4 runs of
        bench/fidelity_v1.py: vLLM 0.14's graph-captured kernels alone grow less from TP 2 to 8 (H100: 4.4 to
        4.9 µs at 4K elements, 12.5 to 20.9 µs at 1M; AIConfigurator's comm tables, commit 095f58a5), the
        floor also holding what an all-reduce costs the layer around it. None: the GPU's for the engine
        (:meth:`planner.catalog.gpus.GPU.allreduce_floor_s`: H100 NVLink 10 µs and A100 NVLink 12.8 µs under
        vLLM V1's graph-captured custom all-reduce; 25 µs for engines that call NCCL eagerly, and on GPUs without
        a graph floor of their own).
    tp_step_overhead_s : float or None
        Extra time per step under tensor parallelism: the driver handing each step's batch to the other ranks'
        workers. None: the engine's (vLLM V0 over Ray 7 ms; vLLM V1's shared-memory broadcast 0).
    link_efficiency : float or None
        Effective over nominal GPU-link bandwidth for all-reduce. None: the GPU's
        (:attr:`planner.catalog.gpus.GPU.link_efficiency`: 0.4 over NVLink, 0.7 over PCIe, from Vidur's A100 tables).
    piecewise_layer_s : float
        What a step holding prefill tokens pays per layer over a decode-only one: vLLM V1 replays one full CUDA
        graph for a decode batch, but splits a mixed batch's graph around attention (piecewise), launching
        attention eagerly per layer: ~16 µs per layer (vllm PR #16072: full graphs cut TPOT ~7%). vLLM V1 only;
        releases before 0.11 (``--vllm-version`` 0.8, 0.10) ran decode steps piecewise too and pay it every step.
    frontend_s : float
        Per-request latency outside the engine core that both TTFT and E2E carry: HTTP, tokenization (~1 µs per
        token, vllm PR #10635), the API server's queues and streaming the first chunk back. vLLM V1 only: its API
        server is a process apart from the engine core (other engines' frontends are not modelled). 6 ms: what
        steps leave unexplained in the TTFT of the dense runs among inference-sim's seven vLLM v0.15.1 H100 runs
        (the development data of bench/fidelity_v1.py); BLIS fits a 15.6 ms lump on the same study, which also
        holds async scheduling's extra step (inference-sim defaults.yaml, alpha_coeffs[0]).
    roofline_p : float or None
        How sharply each of a step's two rooflines (linear layers, attention) turns from memory- to compute-bound:
        busy time ``(compute^p + memory^p)^(1/p)``. Large p is the ideal roofline ``max``; 1 adds the two. None: the
        GPU's (:attr:`planner.catalog.gpus.GPU.roofline_p`), the p whose ramp from 1 to 16-512 tokens matches its
        family's measured GEMMs at its default MFU and MBU: A100 8 (Vidur's Llama-3-8B ``mlp_up_proj`` at 128
        tokens takes 1.30x its 1-token time; 8 gives 1.26x, 2 gives 1.59x), H100 SXM 4, H200 64, L40S 2; 2 on a
        GPU whose GEMMs were not measured, the smoothest, so it errs slow near the ridge. ``calibrate --points``
        fits it where six or more distinct steps allow (:func:`planner.sim.calibration.point_params`).
    source : str
        Where the values come from (defaults, or the calibration file).
    fitted_on : FittedOn or None
        The server a calibration measured; None for the defaults. Applied to another server, the parameters are
        used as they are, and :meth:`transfer_warnings` says what does not carry over.
    """

    mfu: float | None = None
    mbu: float | None = None
    step_overhead_s: float = 150e-6
    seq_overhead_s: float = 4e-6
    allreduce_latency_s: float | None = None
    tp_step_overhead_s: float | None = None
    link_efficiency: float | None = None
    roofline_p: float | None = None
    piecewise_layer_s: float = 16e-6
    frontend_s: float = 6e-3
    source: str = "defaults (reference/performance-models.md)"
    fitted_on: FittedOn | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def transfer_warnings(self, scenario: Scenario) -> tuple[str, ...]:
        """What does not carry over when these calibrated parameters are applied to ``scenario``: one sentence per
        difference between it and the server they were fitted on (GPU, engine, TP, dtypes, model); none for defaults or
        for the measured server itself. Take it as :attr:`Scenario.calibration_warnings`."""
        on = self.fitted_on
        if on is None:
            return ()
        fitted = ", ".join(on.fitted) or "efficiencies and overheads"
        out = []
        if on.gpu != scenario.gpu.name:
            out.append(f"the calibration was fitted on {on.gpu} and is applied to {scenario.gpu.name}: its {fitted} "
                       "are that GPU's (each GPU family reaches its own share of peak FLOP/s and bandwidth); "
                       "calibrate on this GPU, or leave --calibration out for this GPU's defaults")
        if on.engine is not None and on.engine != scenario.engine:
            out.append(f"the calibration was fitted under {on.engine} and is applied to {scenario.engine}: the "
                       "engines' runtimes differ in per-step cost (CUDA-graph replay, eager launches, scheduling), "
                       f"which its {fitted} absorbed; calibrate under this engine")
        if on.tp != scenario.tp:
            out.append(f"the calibration was fitted at TP {on.tp} and is applied at TP {scenario.tp}: what tensor "
                       "parallelism changes (all-reduces, handing each step to the other ranks, narrower GEMMs) "
                       "was not measured, so those terms are defaults (calibrated on six TP 1 iterations of "
                       "DistServe's A100 profiles, the planner misses their TP 2 and TP 4 steps by up to 32%: "
                       "bench/calibrate_points.py); calibrate on iterations or a trace measured at this TP")
        for what, was, now, why in (
                ("weights", on.weight_dtype, scenario.weight_dtype, "an 8-bit checkpoint's GEMMs reach their own "
                 "share of the 8-bit peak (or run weight-only), so MFU and MBU do not carry over"),
                ("KV cache", on.kv_cache_dtype, scenario.kv_cache_dtype, "attention reads (and on Hopper computes) "
                 "an 8-bit cache at its own share of the peak")):
            if not _same_precision(was, now):
                out.append(f"the calibration was fitted with {was} {what} and is applied with {now}: {why}; "
                           f"calibrate with {now} {what}")
        if on.model != scenario.model.name:
            out.append(f"the calibration was fitted on {on.model} and is applied to {scenario.model.name}: "
                       "efficiencies depend on the GEMM shapes and the share of attention, so they carry over "
                       "only roughly between models")
        return tuple(out)

    def resolved(self, scenario: Scenario) -> CostParams:
        """These parameters with what is left to the GPU and the engine (None) filled in from them."""
        gpu = scenario.gpu
        return replace(self, mfu=gpu.mfu if self.mfu is None else self.mfu,
                       mbu=gpu.mbu if self.mbu is None else self.mbu,
                       roofline_p=gpu.roofline_p if self.roofline_p is None else self.roofline_p,
                       link_efficiency=gpu.link_efficiency if self.link_efficiency is None else self.link_efficiency,
                       allreduce_latency_s=(self.allreduce_latency_s if self.allreduce_latency_s is not None
                                            else gpu.allreduce_floor_s(scenario.engine_spec.v1_runtime)),
                       tp_step_overhead_s=(self.tp_step_overhead_s if self.tp_step_overhead_s is not None
                                           else scenario.engine_spec.tp_step_overhead_s))


@dataclass(frozen=True)
class StepCoefficients:
    """Per-iteration constants of one model × GPU × TP × params (seconds per unit), for fast repeated use."""

    linear_s_per_token: float    # the linear layers, at the weights' tensor peak
    logit_s_per_seq: float       # the output head (left in 16 bits by quantized checkpoints)
    attn_s_per_pair: float       # attention per (query, key) pair, at its own peak (16-bit unless FP8 attention)
    s_per_byte: float
    weight_bytes: float          # per GPU, streamed once per step (all but an untied input embedding)
    kv_bytes_per_token: float    # per GPU
    comm_s_per_token: float      # all-reduce bandwidth term per batch token (0 without TP)
    comm_fixed_s: float          # all-reduce latency floor per step
    step_overhead_s: float
    seq_overhead_s: float
    roofline_p: float
    mixed_step_s: float          # added to a step that holds prefill tokens (piecewise CUDA graphs)
    expert_bytes: float          # per GPU, routed experts' weights (0 for a dense model), within weight_bytes
    expert_miss_log: float       # log(1 − experts_per_token / experts): a token's chance to miss one expert
    window_tokens: float         # a sliding window's keys per query (0 without one): step_spec.window_skips
    window_share: float          # the share of layers that slide

    def as_tuple(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))

    @property
    def window(self) -> tuple[int, float]:
        """``(window, window_share)`` as :func:`planner.sim.step_spec.batch_aggregates` takes them."""
        return int(self.window_tokens), self.window_share


_FIELDS = [f.name for f in fields(StepCoefficients)]        # places in as_tuple() the compiled loops read by name
_ROOFLINE_P, WINDOW_TOKENS, WINDOW_SHARE = (_FIELDS.index(n) for n in ("roofline_p", "window_tokens", "window_share"))


def coefficients(scenario: Scenario) -> StepCoefficients:
    """The constants :func:`step_seconds` needs for the scenario's model on its ``tp`` GPUs, its weight and KV
    dtypes (8-bit weights stream half the bytes; :meth:`planner.catalog.gpus.GPU.peak_flops` and
    :meth:`~planner.catalog.gpus.GPU.attention_peak_flops` say which tensor peak the linear layers and attention
    reach) and its cost parameters. Take it as :attr:`Scenario.coefficients`."""
    model, gpu, tp = scenario.model, scenario.gpu, scenario.tp
    params = scenario.cost.resolved(scenario)
    # MFU over the TP group, of a peak per kind of FLOP: the linear layers at the weights' tensor peak, the output
    # head (which FP8, INT8 and INT4 checkpoints leave unquantized) at the 16-bit one, attention at its backend's:
    # vLLM V1's FlashAttention 3 computes in FP8 over an FP8 cache on Hopper, other engines' kernels dequantize
    rate = params.mfu * tp
    attn_peak = (gpu.attention_peak_flops(scenario.kv_cache_dtype) if scenario.engine_spec.v1_runtime
                 else gpu.bf16_flops)
    embedding = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    linear_params = active_param_count(model) - embedding          # the embedding lookup costs no FLOPs
    # a (query, key) pair costs 2 · qk width for the score and 2 · v width for the weighted value, per head. MLA
    # prefills in MHA form, its latent expanded (vLLM's MLA backends: 2 · 192 + 2 · 128 on DeepSeek-V3); its
    # absorbed decode (2 · 576 + 2 · 512) is not told apart: at the TP degrees it runs at, decode reads its KV longer
    qk_width, v_width = ((model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim)
                         if model.mla else (model.head_dim, model.head_dim))
    allreduces = model.layers * model.allreduces_per_layer
    comm_bytes_per_token = allreduces * model.hidden * 2        # bf16 activations
    # a rank computes its shard of the split layers and the whole of those every rank holds (MLA's latent
    # projections, MoE gates: replicated_param_count): DeepSeek-V3 at TP 8, 5.36 B parameters per rank, not 4.46 B;
    # and its whole KV head where the ranks outnumber them (kv_replica_param_count)
    rank_linear_params = linear_params + (tp - 1) * replicated_param_count(model) + kv_replica_param_count(model, tp)
    ring = 2 * (tp - 1) / tp if tp > 1 else 0.0
    link = gpu.link_bytes_s(tp) * params.link_efficiency
    weight_bytes = weights_bytes_per_gpu(model, scenario.weight_dtype, tp)
    expert_bytes, miss = 0.0, 0.0
    if model.moe is not None:
        # the experts' share of the parameters (quantized checkpoints keep 16-bit embeddings: a slight overcount)
        expert_bytes = weight_bytes * routed_expert_param_count(model) / param_count(model)
        miss = math.log1p(-model.moe.experts_per_token / model.moe.experts)
    # An untied input embedding is gathered, not streamed: a step reads only its tokens' rows (hidden·2 bytes
    # each, negligible), not the vocab-sharded table (Llama-3-8B: 1.05 GB of its 16 GB). A tied table is also
    # the output head, which every step reads whole.
    gathered_bytes = 0 if model.tied_embeddings else math.ceil(model.vocab / tp) * model.hidden * 2
    piecewise_s = model.layers * params.piecewise_layer_s if scenario.engine_spec.v1_runtime else 0.0
    return StepCoefficients(
        linear_s_per_token=2.0 * rank_linear_params / (rate * gpu.peak_flops(scenario.weight_dtype)),
        logit_s_per_seq=2.0 * model.vocab * model.hidden / (rate * gpu.bf16_flops),
        attn_s_per_pair=2.0 * model.layers * model.heads * (qk_width + v_width) / (rate * attn_peak),
        s_per_byte=1.0 / (params.mbu * gpu.hbm_bw_bytes_s),
        weight_bytes=weight_bytes - gathered_bytes,
        kv_bytes_per_token=kv_bytes_per_token(model, scenario.kv_cache_dtype, tp),
        comm_s_per_token=ring * comm_bytes_per_token / link if tp > 1 else 0.0,
        comm_fixed_s=allreduces * params.allreduce_latency_s * math.log2(tp) if tp > 1 else 0.0,
        # a V1 release without full decode graphs runs every step piecewise: the cost is per step, not per mixed one
        step_overhead_s=(params.step_overhead_s + (params.tp_step_overhead_s if tp > 1 else 0.0)
                         + (piecewise_s if not scenario.release.full_decode_graphs else 0.0)),
        seq_overhead_s=params.seq_overhead_s,
        roofline_p=params.roofline_p,
        mixed_step_s=piecewise_s if scenario.release.full_decode_graphs else 0.0,
        expert_bytes=expert_bytes, expert_miss_log=miss,
        window_tokens=float(model.sliding_window or 0), window_share=model.sliding_layers / model.layers)


def prefill_seconds(scenario: Scenario, tokens) -> np.ndarray:
    """Seconds of one step that prefills a prompt of each length in ``tokens`` from scratch (no other sequence in
    the batch): what a recomputed preemption costs."""
    c = scenario.coefficients
    return np.array([step_seconds.py_func(c.as_tuple(), *batch_aggregates([(n, 0)], [], *c.window))[0]
                     for n in np.asarray(tokens, dtype=np.int64).tolist()])


# Bound codes returned by step_seconds
COMPUTE, MEMORY, OVERHEAD = 0, 1, 2
BOUND_NAMES = ("compute", "memory", "overhead")


@numba.njit(cache=True, nogil=True)
def step_seconds(c, prefill_tokens, attn_pairs, decode_count, context_tokens, seqs):
    """Seconds of one iteration, and what bounds it (0 compute, 1 memory, 2 overhead).

    Parameters
    ----------
    c : tuple
        :meth:`StepCoefficients.as_tuple`.
    prefill_tokens : float
        New prompt tokens computed this step (all chunks).
    attn_pairs : float
        (query, key) pairs of causal attention over all sequences: a chunk of ``n`` after ``k`` tokens adds
        ``n·k + n(n+1)/2``, a decode with context ``k`` adds ``k + 1`` (averaged over the layers where some slide a
        window, as is ``context_tokens``: :func:`planner.sim.step_spec.windowed`).
    decode_count : float
        Sequences decoding one token.
    context_tokens : float
        Earlier tokens whose KV the step reads (all sequences).
    seqs : float
        Sequences in the batch (each produces logits and pays the per-sequence overhead).
    """
    linear, weights, attention, kv, overhead = step_parts(c, prefill_tokens, attn_pairs, decode_count,
                                                          context_tokens, seqs)
    busy = _busy(linear, weights, c[_ROOFLINE_P]) + _busy(attention, kv, c[_ROOFLINE_P])
    bound = COMPUTE if linear + attention > weights + kv else MEMORY
    if overhead > busy:
        bound = OVERHEAD
    return busy + overhead, bound


@numba.njit(cache=True, nogil=True)
def step_parts(c, prefill_tokens, attn_pairs, decode_count, context_tokens, seqs):
    """``(linear_s, weights_s, attention_s, kv_s, overhead_s)`` of one iteration (:func:`step_seconds`' arguments):
    the linear layers' and the logits' FLOPs at MFU and the weights they stream at MBU; attention's FLOPs at MFU and
    the KV cache it reads and writes at MBU; and what runs beside them (per-step, per-sequence, all-reduce,
    piecewise-graph costs)."""
    (linear_per_token, logit_per_seq, attn_per_pair, s_per_byte, weight_bytes, kv_per_token,
     comm_per_token, comm_fixed, step_overhead, seq_overhead, _, mixed_step, expert_bytes, miss_log, _, _) = c
    tokens = prefill_tokens + decode_count
    linear = linear_per_token * tokens + logit_per_seq * seqs
    # an MoE layer reads only the experts its tokens are routed to: E·(1 − (1 − k/E)^tokens) expected of E
    untouched = math.exp(tokens * miss_log) if expert_bytes > 0.0 else 0.0
    weights = (weight_bytes - expert_bytes * untouched) * s_per_byte
    kv = kv_per_token * (context_tokens + tokens) * s_per_byte
    overhead = step_overhead + seq_overhead * seqs + comm_fixed + comm_per_token * tokens
    if prefill_tokens > 0.0:
        overhead += mixed_step
    return linear, weights, attn_per_pair * attn_pairs, kv, overhead


@numba.njit(cache=True, nogil=True)
def _busy(compute, memory, p):
    top = compute if compute > memory else memory
    if p >= SHARPEST_KNEE or top <= 0.0:
        return top
    # the catalog's knees (2, 4, 8) by square roots, not two pow calls: this is the simulator's innermost loop
    if p == 2.0:
        return math.hypot(compute, memory)
    low = compute + memory - top
    ratio = low / top
    if p == 4.0:
        square = ratio * ratio
        return top * math.sqrt(math.sqrt(1.0 + square * square))
    if p == 8.0:
        fourth = (ratio * ratio) * (ratio * ratio)
        return top * math.sqrt(math.sqrt(math.sqrt(1.0 + fourth * fourth)))
    return top * (1.0 + ratio ** p) ** (1.0 / p)


def predict_step(scenario: Scenario, prefills: list[tuple[int, int]], decodes: list[tuple[int, int]]) -> dict:
    """The ``step`` CLI object: ``{"step_ms", "bound", "compute_ms", "memory_ms", "overhead_ms"}``.

    Raises
    ------
    PlannerError
        For an empty step, or a sequence longer than the scenario's ``max_model_len`` (no engine runs one).
    """
    check_step(scenario, prefills, decodes)
    c = scenario.coefficients
    agg = batch_aggregates(prefills, decodes, *c.window)
    seconds, bound = step_seconds(c.as_tuple(), *agg)
    linear, weights, attention, kv, overhead = step_parts.py_func(c.as_tuple(), *agg)
    compute, memory = linear + attention, weights + kv
    return {"step_ms": seconds * 1e3, "bound": BOUND_NAMES[bound], "compute_ms": compute * 1e3,
            "memory_ms": memory * 1e3, "overlap_loss_ms": (seconds - overhead - max(compute, memory)) * 1e3,
            "overhead_ms": overhead * 1e3}
