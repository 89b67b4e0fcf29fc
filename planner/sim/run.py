"""simulate(): a pure function of (workload, engine settings, hardware, model) → per-request results and summaries."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from planner.capacity.memory import default_batched_tokens, default_max_num_seqs, plan_memory
from planner.catalog.gpus import GPU
from planner.catalog.models import ModelSpec
from planner.errors import PlannerError
from planner.sim.cost_model import CostParams, coefficients
from planner.sim.engines import EngineSettings, get_engine
from planner.sim.workload import SimWorkload

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}
BUCKET_EDGES = (512, 2048)


@dataclass(frozen=True)
class SimResult:
    """Per-request outcomes (seconds; NaN where undefined) and what the run was."""

    engine: str
    settings: EngineSettings
    workload: SimWorkload
    first_token: np.ndarray
    finish: np.ndarray
    first_scheduled: np.ndarray
    preemptions: np.ndarray
    rejected: np.ndarray
    steps: int
    timeline: np.ndarray
    sim_wall_s: float
    generated: np.ndarray
    free_blocks_at_end: int

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token - self.workload.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        out = self.workload.output_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(out > 1, (self.finish - self.first_token) / (out - 1), np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish - self.workload.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        return self.first_scheduled - self.workload.arrival_s


def _block(values_s: np.ndarray) -> dict:
    v = values_s[np.isfinite(values_s)] * 1e3
    if v.size == 0:
        return {k: None for k in PERCENTILES} | {"mean": None}
    return {k: float(np.percentile(v, q)) for k, q in PERCENTILES.items()} | {"mean": float(v.mean())}


def saturated(result: SimResult) -> bool:
    """The queue grows without bound: over the second half of the arrivals, queueing delay keeps rising with
    arrival time (by more than 0.1 s per second: the server falls ≥ 10% behind) and ends above a second."""
    w = result.workload
    half = w.arrival_s >= w.arrival_s[0] + 0.5 * (w.arrival_s[-1] - w.arrival_s[0])
    queue = result.queue_s[half]
    t = w.arrival_s[half]
    ok = np.isfinite(queue)
    if ok.sum() < 20 or np.ptp(t[ok]) <= 0:
        return False
    slope = np.polyfit(t[ok], queue[ok], 1)[0]
    return bool(slope > 0.1 and np.nanmean(queue[-max(1, queue.size // 10):]) > 1.0)


def summarize(result: SimResult, buckets: tuple[float, ...] = BUCKET_EDGES) -> dict:
    """The ``simulate`` CLI object (CONTRACT.md) plus queueing, per-bucket percentiles and a timeline sample."""
    w = result.workload
    done = np.isfinite(result.finish)
    start = float(w.arrival_s.min()) if w.n else 0.0
    duration = float(np.nanmax(result.finish) - start) if done.any() else 0.0
    tokens_in = float(w.input_tokens[done].sum())
    tokens_out = float(w.output_tokens[done].sum())
    per_bucket = []
    bounds = [0.0, *sorted(buckets), math.inf]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        mask = (w.input_tokens >= lo) & (w.input_tokens < hi) & done
        per_bucket.append({"bucket": f"{lo:g}+" if math.isinf(hi) else f"{lo:g}–{hi:g}", "n": int(mask.sum()),
                           "ttft_ms": _block(result.ttft_s[mask]), "tpot_ms": _block(result.tpot_s[mask]),
                           "e2e_ms": _block(result.e2e_s[mask])})
    timeline = result.timeline
    if timeline.shape[0] > 2000:
        timeline = timeline[:: math.ceil(timeline.shape[0] / 2000)]
    return {
        "engine": result.engine, "workload": w.source,
        "requests": w.n, "completed": int(done.sum()), "rejected": int(result.rejected.sum()),
        "ttft_ms": _block(result.ttft_s), "tpot_ms": _block(result.tpot_s), "e2e_ms": _block(result.e2e_s),
        "queue_ms": _block(result.queue_s),
        "throughput_tok_s": {"input": tokens_in / duration if duration else 0.0,
                             "output": tokens_out / duration if duration else 0.0,
                             "total": (tokens_in + tokens_out) / duration if duration else 0.0},
        "request_rate_rps": float(done.sum() / duration) if duration else 0.0,
        "preemptions": int(result.preemptions.sum()), "duration_s": duration, "sim_wall_s": result.sim_wall_s,
        "steps": result.steps, "saturated": saturated(result),
        "settings": {k: v for k, v in result.settings.__dict__.items()},
        "per_input_bucket": per_bucket,
        "timeline": {"time_s": timeline[:, 0].tolist(), "running": timeline[:, 1].tolist(),
                     "waiting": timeline[:, 2].tolist(), "blocks_used": timeline[:, 3].tolist(),
                     "step_ms": (timeline[:, 4] * 1e3).tolist()},
    }


def goodput(result: SimResult, ttft_ms: float | None = None, tpot_ms: float | None = None) -> float:
    """Requests per second that completed within the SLO (a missing bound is not checked)."""
    ok = np.isfinite(result.finish)
    if ttft_ms is not None:
        ok &= result.ttft_s * 1e3 <= ttft_ms
    if tpot_ms is not None:
        ok &= ~(result.tpot_s * 1e3 > tpot_ms)
    span = float(np.nanmax(result.finish) - result.workload.arrival_s.min()) if np.isfinite(result.finish).any() \
        else 0.0
    return float(ok.sum() / span) if span else 0.0


def engine_settings(model: ModelSpec, gpu: GPU, *, tp: int = 1, max_num_seqs: int | None = None,
                    max_num_batched_tokens: int | None = None, chunked_prefill: bool = True,
                    preemption: str = "recompute", max_new_tokens: int | None = None,
                    gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                    kv_cache_dtype: str = "auto", block_size: int = 16, reserve_quantile: float | None = None,
                    priority: str = "fcfs") -> EngineSettings:
    """vLLM serve's defaults for the GPU, with the KV block pool the memory plan gives."""
    max_model_len = int(max_model_len or model.max_position)
    seqs = int(max_num_seqs or default_max_num_seqs(gpu))
    batched = int(max_num_batched_tokens or default_batched_tokens(gpu))
    if not chunked_prefill and not max_num_batched_tokens:
        batched = max(max_model_len, batched)     # vLLM: without chunking the budget must hold a whole prompt
    plan = plan_memory(model, gpu, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                       kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, block_size=block_size,
                       max_num_batched_tokens=batched, max_num_seqs=seqs)
    if plan.num_blocks <= 0:
        raise PlannerError(f"{model.name} on {tp}x {gpu.label}: no memory left for the KV cache "
                           f"({plan.kv_pool_bytes / 2**30:.1f} GiB); raise --tp or --gpu-mem-util")
    if preemption not in ("recompute", "swap"):
        raise PlannerError(f"--preemption {preemption!r}: expected recompute or swap")
    # a swap copies every layer's K and V of a block, each copy paying a launch latency plus its bytes over PCIe
    copies = model.layers * (1 if model.mla else 2)
    swap_s = copies * 10e-6 + block_size * plan.kv_bytes_per_token_per_gpu / gpu.pcie_bytes_s
    if priority not in ("fcfs", "shortest-predicted"):
        raise PlannerError(f"--priority {priority!r}: expected fcfs or shortest-predicted")
    if reserve_quantile is not None and not 0 < reserve_quantile < 1:
        raise PlannerError(f"--reserve-predicted {reserve_quantile}: expected a quantile such as 0.75 or 0.95")
    return EngineSettings(seqs, batched, chunked_prefill, block_size, plan.num_blocks, max_model_len,
                          max_new_tokens, 0, preemption, swap_s, reserve_quantile, priority)


def simulate(workload: SimWorkload, model: ModelSpec, gpu: GPU, settings: EngineSettings, *, engine: str = "vllm-v1",
             tp: int = 1, cost: CostParams | None = None, kv_cache_dtype: str = "auto",
             progress: Callable[[float, str], None] | None = None) -> SimResult:
    """Replay ``workload`` through ``engine`` on ``tp`` × ``gpu``; deterministic for a given input.

    Outputs are cut at ``settings.max_new_tokens`` and at ``max_model_len − prompt``; a prompt that does not fit
    ``max_model_len`` is rejected, as vLLM rejects it.
    """
    eng = get_engine(engine)
    work = workload.truncated(settings.max_new_tokens)
    prompt = work.input_tokens.astype(np.int64)
    output = np.minimum(work.output_tokens, np.maximum(settings.max_model_len - prompt, 1)).astype(np.int64)
    too_long = prompt >= settings.max_model_len
    coeffs = coefficients(model, gpu, tp, cost, kv_cache_dtype).as_tuple()
    if progress:
        progress(0.0, f"simulating {work.n:,} requests with {eng.label}")
    started = time.perf_counter()
    keep = ~too_long
    raw = eng.run(work.arrival_s[keep], prompt[keep], output[keep], settings, coeffs, max(1, work.n // 200))
    wall = time.perf_counter() - started
    if progress:
        progress(1.0, f"{raw.steps:,} steps in {wall:.2f} s")

    def full(values, fill):
        out = np.full(work.n, fill, dtype=np.asarray(values).dtype)
        out[keep] = values
        return out
    rejected = full(raw.rejected, True)
    rejected[too_long] = True
    final = SimWorkload(work.arrival_s, prompt, output, work.source)
    return SimResult(engine, settings, final, full(raw.first_token, np.nan), full(raw.finish, np.nan),
                     full(raw.first_scheduled, np.nan), full(raw.preemptions, 0), rejected, raw.steps, raw.timeline,
                     wall, full(raw.generated, 0), raw.free_blocks_at_end)
