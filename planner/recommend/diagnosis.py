"""Why a configuration tops out where it does, and how sensitive it is: the seed article's tuning procedure
automated with the simulator (which metric breaks first, the binding constraint, the length-variance remedy),
plus the sweeps the sensitivity plots draw."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.recommend.search import BUDGET_GRID, SEQS_GRID, ClassRecommendation, Search
from planner.recommend.slo import SLOClass, abort_wait_s, holds, slo_load
from planner.sim.engines import get_engine
from planner.sim.pool_margin import PoolMargin, pool_margin, queue_holds
from planner.sim.results import SimResult, prefix_cache_stats
from planner.sim.workload import poisson_or_gamma

LOAD_STEPS = (0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5)


def _point(result: SimResult, focus: tuple[str, float], **extra) -> dict:
    """A sweep's point: the p99s and the class's own ``focus`` metric (:attr:`SLOClass.focus`, e.g. TTFT p95). A
    replay the search stopped early is overloaded; its throughput is left out (it covers only the window before
    the stop, and can read above the offered load) and its percentiles are of the requests it served, a floor."""
    metric, percentile = focus
    return {**extra, "ttft_p99_ms": result.metric_ms("ttft", 99), "tpot_p99_ms": result.metric_ms("tpot", 99),
            "e2e_p99_ms": result.metric_ms("e2e", 99),
            f"{metric}_p{percentile:g}_ms": result.metric_ms(metric, percentile),
            "throughput_tok_s": None if result.aborted else result.output_rate_tok_s(),
            "preemptions": int(result.preemptions.sum()), "overloaded": result.verdict == "overloaded"}


def knob_sweeps(search: Search, seqs: int, budget: int, scale: float, chunked: bool = True,
                focus: tuple[str, float] = ("e2e", 99.0)) -> dict:
    """Metrics (the class's ``focus`` among them) against ``max_num_seqs``, ``max_num_batched_tokens`` (chunked
    prefill on) and request rate around a configuration."""
    rate = search.base_rate
    return {
        "max_num_seqs": [_point(search.run(s, budget, scale, chunked), focus, max_num_seqs=s) for s in SEQS_GRID],
        "max_num_batched_tokens": [_point(search.run(seqs, b, scale), focus, max_num_batched_tokens=b)
                                   for b in BUDGET_GRID if b >= seqs],
        "rate": [_point(search.run(seqs, budget, scale * f, chunked), focus, rate_rps=rate * scale * f)
                 for f in LOAD_STEPS],
    }


def rate_bands(search: Search, seqs: int, budget: int, scale: float, chunked: bool = True,
               seeds: tuple[int, ...] = (1, 2, 3)) -> list[dict]:
    """Spread of TTFT/TPOT p99 across the load steps when the trace's requests are resampled (bootstrap of the
    (input, output) pairs onto the same arrival times, one per seed): how much of a curve is sampling noise."""
    cfg = search.config(seqs, budget, chunked)
    rows = []
    for factor in LOAD_STEPS:
        values = {"ttft_p99_ms": [], "tpot_p99_ms": []}
        for seed in seeds:
            pick = np.random.default_rng(seed).integers(0, search.workload.n, search.workload.n)
            work = replace(search.at_scale(scale * factor), input_tokens=search.workload.input_tokens[pick],
                           output_tokens=search.workload.output_tokens[pick])
            result = search.replay(work, cfg)
            values["ttft_p99_ms"].append(result.metric_ms("ttft", 99))
            values["tpot_p99_ms"].append(result.metric_ms("tpot", 99))
        rows.append({"rate_rps": search.base_rate * scale * factor,
                     **{f"{k}_lo": min(v) for k, v in values.items()},
                     **{f"{k}_hi": max(v) for k, v in values.items()}})
    return rows


def pareto(grid_points: list[dict]) -> list[dict]:
    """The configurations no other beats on both throughput and TTFT p99."""
    ordered = sorted(grid_points, key=lambda p: (-p["throughput_tok_s"], p["ttft_p99_ms"]))
    front, best_ttft = [], np.inf
    for point in ordered:
        if point["ttft_p99_ms"] < best_ttft:
            front.append(point)
            best_ttft = point["ttft_p99_ms"]
    return front


def tornado(search: Search, seqs: int, budget: int, scale: float, slo: SLOClass, chunked: bool = True,
            seed: int = 0) -> list[dict]:
    """The class's metric with ±20% arrival rate, mean output length, burstiness (arrival CV) and KV pool (the
    memory plan's estimate against what a server's profiling leaves: :mod:`planner.sim.pool_margin`). Burstiness
    draws renewal arrivals at the trace's CV ±20%, so its bars are measured from the draw at the trace's own CV
    (against the trace itself, the synthetic arrivals' own difference read as burstiness)."""
    metric, percentile = slo.focus
    base = search.run(seqs, budget, scale, chunked).metric_ms(metric, percentile)
    cfg = search.config(seqs, budget, chunked)
    work = search.at_scale(scale)
    gaps = np.diff(work.arrival_s)
    cv = float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else 1.0
    rate = search.base_rate * scale

    def renewal(factor: float):
        return replace(work, arrival_s=poisson_or_gamma(work.n, rate, np.random.default_rng(seed),
                                                        max(cv * factor, 0.05)))
    renewal_base = search.replay(renewal(1.0), cfg).metric_ms(metric, percentile)
    rows = []
    for factor in (0.8, 1.2):
        variants = {
            "arrival rate": replace(work, arrival_s=work.arrival_s / factor),
            "mean output length": replace(work, output_tokens=np.maximum(
                np.rint(work.output_tokens * factor), 1).astype(np.int64)),
            "burstiness": renewal(factor),
        }
        pool = cfg.replace(num_gpu_blocks=max(1, round(cfg.settings.num_blocks * factor)))
        for name, (variant, scenario) in {**{k: (v, cfg) for k, v in variants.items()},
                                          "KV cache pool": (work, pool)}.items():
            result = search.replay(variant, scenario)
            rows.append({"factor": name, "change": f"{factor - 1:+.0%}",
                         "value_ms": result.metric_ms(metric, percentile),
                         "baseline_ms": renewal_base if name == "burstiness" else base})
    return rows


def diagnose(search: Search, seqs: int, budget: int, scale: float, slos: list[SLOClass],
             chunked: bool = True) -> list[str]:
    """Plain sentences: what breaks first as load rises, what binds, and whether length-aware scheduling helps."""
    notes = []
    first, never = {}, []           # first: the last load step that met the SLO and the first that did not
    queue = None                    # the same for the queue every class is held to, and why it failed
    for i, factor in enumerate(LOAD_STEPS):
        result = search.run(seqs, budget, scale * factor, chunked)
        why = holds(result, search.max_queue_s)
        if queue is None and why is not None and i > 0:
            queue = (*(f * scale * search.base_rate for f in LOAD_STEPS[i - 1:i + 1]), why)
        for slo in slos:
            if not slo.bounded or slo.name in first or slo.name in never:
                continue
            if slo_load(result, slo) > 1.0:
                if i == 0:
                    never.append(slo.name)
                else:
                    first[slo.name] = tuple(f * scale * search.base_rate for f in LOAD_STEPS[i - 1:i + 1])
    if first:
        name = min(first, key=lambda n: first[n][1])
        met, broken = first[name]
        notes.append(f"As load rises, the {name} SLO breaks first, between {met:.2f} req/s (met) and {broken:.2f} "
                     "req/s (missed).")
    if queue is not None and (not first or queue[1] < min(rates[1] for rates in first.values())):
        # the search holds every class to a stable queue: a bound still met past the rate was not what stopped it
        notes.append(f"As load rises, the queue gives out before any latency bound: it holds at {queue[0]:.2f} "
                     f"req/s and not at {queue[1]:.2f} req/s ({queue[2]}).")
    if never:
        verb = "is" if len(never) == 1 else "are"
        notes.append(f"With these settings {', '.join(never)} {verb} not met even at half this rate.")
    result = search.run(seqs, budget, scale, chunked)
    timeline = result.timeline
    if timeline.size:
        kv_peak = float(timeline[:, 3].max() / search.config(seqs, budget, chunked).settings.num_blocks)
        seqs_peak = float(timeline[:, 1].max())
        compute_share = float(np.mean(timeline[:, 5] == 0))
        if result.preemptions.sum() or kv_peak > 0.95:
            notes.append(f"KV capacity binds: blocks peak at {kv_peak:.0%} of the pool and "
                         f"{int(result.preemptions.sum())} preemptions recompute work; more KV (fp8 KV cache, TP, "
                         "a lower max_model_len) or fewer sequences relieve it.")
        elif seqs_peak >= seqs:
            notes.append(f"max_num_seqs binds: {seqs} sequences run at the peak while requests wait; KV is at "
                         f"{kv_peak:.0%}.")
        notes.append(f"{compute_share:.0%} of steps are compute-bound (prefill-heavy), the rest bandwidth-bound "
                     "(decode): a larger token budget speeds prompts, a smaller one steadies decoding.")
    outputs = search.workload.output_tokens
    cv = float(outputs.std() / outputs.mean()) if outputs.mean() else 0.0
    if cv > 0.8 and search.scenario.engine == "vllm-v1":      # the remedy is a vllm-v1 option (Scenario.priority)
        work = search.at_scale(scale)
        ranked = search.replay(work, search.config(seqs, budget, chunked).replace(priority="shortest-predicted"))
        before, after = result.metric_ms("ttft", 50), ranked.metric_ms("ttft", 50)
        notes.append(f"Output lengths vary widely (CV {cv:.2f}): shortest-predicted-first scheduling moves the TTFT "
                     f"median from {before:,.0f} to {after:,.0f} ms (p99 {result.metric_ms('ttft', 99):,.0f} → "
                     f"{ranked.metric_ms('ttft', 99):,.0f} ms); length-aware routing has the same lever.")
    return notes


def cache_gain(search: Search, row: ClassRecommendation, slo: SLOClass) -> dict | None:
    """What vLLM V1's prefix cache is worth to a feasible class: the hit rate at its recommended rate and the rate
    the same configuration sustains with the cache off (``--no-enable-prefix-caching``), by the same bisection.
    None where the cache changes nothing: an engine modelled without one, or a workload with no prefix identity whose
    preempted requests found none of their own blocks again at that rate (nothing else can hit)."""
    scenario = search.scenario
    if not get_engine(scenario.engine).caches_prefixes(scenario.settings):
        return None
    seqs, budget = row.config["max_num_seqs"], row.config["max_num_batched_tokens"]
    chunked = row.config["enable_chunked_prefill"]
    at = search.run(seqs, budget, row.scale, chunked)
    stats = prefix_cache_stats(at, at.completed)
    if search.workload.prefix is None and not stats["rehit_tokens"]:
        return None
    off = Search(search.workload, scenario.replace(prefix_caching=False), max_queue_s=search.max_queue_s,
                 executor=search.executor)
    scale, _ = off.max_scale(seqs, budget, chunked, slo, off.capacity_scale(seqs, budget, chunked))
    search.count(off.simulations)
    without = scale * search.base_rate
    return {"hit_rate": stats["hit_rate"], "rehit_tokens": stats["rehit_tokens"],
            "prompt_tokens": stats["prompt_tokens"], "identity": stats["identity"],
            "max_qps_with_cache": row.max_qps_per_replica, "max_qps_without_cache": without,
            "gain": row.max_qps_per_replica / without - 1 if without > 0 else None}


def cache_sentence(gain: dict) -> str:
    """The diagnosis line of :func:`cache_gain`."""
    without = gain["max_qps_without_cache"]
    change = (f"{gain['gain']:+.0%}" if gain["gain"] is not None else "where it sustains nothing without it")
    # a preempted request recomputes its tokens unless the cache still holds them: that gain is not a prompt hit
    rehits = gain.get("rehit_tokens", 0)
    again = (f", and finds {rehits:,} tokens again after preemptions ({rehits / gain['prompt_tokens']:.0%} of the "
             "prompt tokens; recomputed with it off)" if rehits and gain.get("prompt_tokens") else "")
    return (f"Prefix caching (vLLM V1's default) serves {gain['hit_rate']:.0%} of prompt tokens from the cache at "
            f"the recommended rate{again}; with it off this configuration sustains {without:.2f} req/s per replica "
            f"instead of {gain['max_qps_with_cache']:.2f} ({change}).")


def rate_margin(search: Search, seqs: int, budget: int, scale: float, chunked: bool = True) -> PoolMargin:
    """The KV pool margin (:func:`planner.sim.pool_margin.pool_margin`) of a configuration at a time scale: how
    far the pool can shrink before the queue stops holding at the recommended rate."""
    work = search.at_scale(scale)
    # the search's early stop: a replay it would abort already fails every class, and reads as overloaded here
    margin = pool_margin(work, search.config(seqs, budget, chunked),
                         holds=queue_holds(search.run(seqs, budget, scale, chunked)),
                         abort_wait_s=abort_wait_s(search.max_queue_s))
    search.count(margin.simulations)
    return margin


def class_details(search: Search, row: ClassRecommendation, slo: SLOClass, slos: list[SLOClass]) -> dict:
    """Sweeps, Pareto front, tornado and diagnosis around a class's recommendation (feasible classes only)."""
    if not row.feasible:
        closest = (f"max_num_seqs {row.config['max_num_seqs']}, max_num_batched_tokens "
                   f"{row.config['max_num_batched_tokens']}")
        return {"diagnosis": [
            f"No configuration meets {slo.name} on this trace; the closest ({closest}) is shown, its latencies and "
            f"throughput at {row.scale * search.base_rate:.3g} req/s (1/64 of the rate it can carry: the lowest "
            "the search tries), where it still misses."]}
    seqs, budget = row.config["max_num_seqs"], row.config["max_num_batched_tokens"]
    chunked = row.config["enable_chunked_prefill"]
    points = [g for g in row.grid if g.get("ttft_p99_ms") is not None]
    gain = cache_gain(search, row, slo)
    diagnosis = diagnose(search, seqs, budget, row.scale, slos, chunked)
    margin = rate_margin(search, seqs, budget, row.scale, chunked)
    return {"sweeps": knob_sweeps(search, seqs, budget, row.scale, chunked, slo.focus),
            "pareto": pareto(points), "points": points,
            "tornado": tornado(search, seqs, budget, row.scale, slo, chunked),
            "bands": rate_bands(search, seqs, budget, row.scale, chunked),
            "prefix_cache": gain, "kv_margin": margin.to_dict(),
            "diagnosis": diagnosis + ([cache_sentence(gain)] if gain else [])
            + [margin.sentence("At the recommended rate the queue")]}
