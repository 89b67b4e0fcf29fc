"""A capacity report: what the app shows for one trace, model and GPU, gathered into one JSON-ready object (the
report's JSON twin), with its charts as Vega-Lite specs built by the pages' own chart builders. Every figure comes
from the same planner functions the CLI and the pages call; :mod:`planner.report.render` writes HTML and Markdown.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
from dataclasses import asdict, replace
from typing import Callable

import numpy as np
import polars as pl

from planner import __version__
from planner.capacity.report import memory_report
from planner.catalog.gpus import GPU
from planner.catalog.models import ModelSpec
from planner.charts import capacity as capacity_charts
from planner.charts import recommend as recommend_charts
from planner.charts import sim as sim_charts
from planner.charts import workload as charts
from planner.cli.output import clean
from planner.errors import PlannerError
from planner.recommend.plan import RecommendOptions, plan_recommendation
from planner.sim.cost_model import CostParams
from planner.sim.run import engine_settings, simulate, summarize
from planner.traces import store
from planner.traces.queries import arrival_times, length_counts, request_lengths
from planner.workload.fits import arrival_fit_dict, arrival_overview, fit_length_field, length_fit_dict
from planner.workload.replay import from_trace
from planner.workload.stats import trace_stats

REPORT_FORMAT = 1
LENGTH_FIELDS = (("input_tokens", "Input tokens"), ("output_tokens", "Output tokens"))


def build_report(con, trace_ref: str, model: ModelSpec, gpu: GPU, options: RecommendOptions,
                 cost: CostParams | None = None, progress: Callable[[float, str], None] | None = None,
                 recommendation: dict | None = None) -> dict:
    """Every section of a capacity report for ``trace_ref`` served by ``model`` on ``options.tp`` × ``gpu``.

    Parameters
    ----------
    options : RecommendOptions
        The scenario (TP, engine, memory flags) and the recommendation search; ``details`` is forced on.
    recommendation : dict, optional
        A :func:`planner.recommend.plan.plan_recommendation` result with details for the same inputs (the page
        passes its cached one); computed when missing.

    Returns
    -------
    dict
        ``format, app_version, created_utc, title, trace, scenario, assumptions, workload, memory, simulation,
        recommendations, charts`` (chart name → Vega-Lite spec). JSON-ready: NaN and inf are null.
    """
    report = progress or (lambda f, m: None)
    cost = cost or CostParams()
    info = store.get_trace(con, trace_ref)
    report(0.02, "workload statistics")
    stats = trace_stats(con, info.trace_id)
    specs: dict[str, dict] = {}
    fits = {}
    for i, (fld, label) in enumerate(LENGTH_FIELDS):
        report(0.05 + 0.05 * i, f"fitting {label.lower()}")
        try:
            fit = fit_length_field(con, info.trace_id, fld)
        except (PlannerError, ValueError) as exc:     # too few or all-equal values: say so, keep the report
            fits[fld] = {"field": fld, "error": str(exc)}
            continue
        fits[fld] = length_fit_dict(fld, fit)
        x, w = length_counts(con, info.trace_id, fld)
        specs[f"{fld}_histogram"] = charts.length_histogram(x, w, fit, f"{label}: histogram and fits").to_dict()
    arrivals = arrival_overview(con, info)
    if arrivals is not None:
        rates = charts.rate_table(arrival_times(con, info.trace_id))
        if rates.height:
            specs["arrival_rate"] = charts.rate_timeline(rates, arrivals["peaks"]["mean_rate_rps"]).to_dict()
        arrivals = {"span_s": arrivals["span_s"], "peaks": arrivals["peaks"], "fit": arrival_fit_dict(arrivals["fit"])}

    report(0.15, "memory plan")
    memory = memory_report(model, gpu, tp=options.tp, gpu_memory_utilization=options.gpu_memory_utilization,
                           kv_cache_dtype=options.kv_cache_dtype, max_model_len=options.max_model_len,
                           weight_dtype=model.weight_dtype, lengths=request_lengths(con, info.trace_id))
    specs["memory_breakdown"] = capacity_charts.breakdown_bar(memory["breakdown_gib"]).to_dict()
    specs["concurrency"] = capacity_charts.concurrency_chart(memory["concurrency_curve"], memory.get("trace")).to_dict()

    simulation = None
    if info.has_timestamps:
        report(0.2, "replaying the trace with the engine's defaults")
        settings = engine_settings(model, gpu, tp=options.tp, gpu_memory_utilization=options.gpu_memory_utilization,
                                   max_model_len=options.max_model_len, kv_cache_dtype=options.kv_cache_dtype)
        result = simulate(from_trace(con, info.trace_id), model, gpu, settings, engine=options.engine, tp=options.tp,
                          cost=cost, kv_cache_dtype=options.kv_cache_dtype)
        simulation = summarize(result)
        specs["simulation_cdf"] = sim_charts.cdf_chart(pl.concat([
            sim_charts.latency_quantiles(result.ttft_s, "TTFT"), sim_charts.latency_quantiles(result.tpot_s, "TPOT")]),
            "Latency CDF at the trace's own rate").to_dict()
        specs["simulation_timeline"] = sim_charts.timeline_chart(simulation["timeline"]).to_dict()
        if recommendation is None:
            try:
                recommendation = plan_recommendation(
                    from_trace(con, info.trace_id), model, gpu, replace(options, details=True), cost,
                    lambda f, m: report(0.3 + 0.65 * f, f"recommending: {m}"))
            except PlannerError as exc:     # e.g. every request at one instant: no rate to scale
                recommendation = {"error": str(exc), "classes": []}
        for row in recommendation["classes"]:
            specs.update(_class_charts(row))

    report(0.97, "assembling")
    body = {
        "format": REPORT_FORMAT, "app_version": __version__,
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "title": f"Capacity report: {info.name} on {options.tp}× {gpu.label} ({model.name})",
        "trace": {"trace_id": info.trace_id, "name": info.name,
                  "content_sha256": store.content_hash(con, info.trace_id), "source_file": info.source_file,
                  "format": info.format, "layout": info.layout,
                  "rows": info.rows, "failed": info.failed, "rejected": info.rejected, "created": info.created,
                  "has_timestamps": info.has_timestamps},
        "scenario": {"model": model.name, "hf_id": model.hf_id, "gpu": gpu.name, "gpu_label": gpu.label,
                     "price_per_gpu_hour": gpu.price_per_hour, **asdict(options)},
        "assumptions": {"cost_model": cost.as_dict(), "model_config": _model_fields(model),
                        "gpu": {k: v for k, v in asdict(gpu).items() if not k.startswith("help")},
                        "engine_defaults": (simulation or {}).get("settings"),
                        "reproduce": _reproduce_command(info.trace_id, model, gpu, options)},
        "workload": {"stats": stats, "fits": fits, "arrivals": arrivals},
        "memory": memory, "simulation": _without_timeline(simulation), "recommendations": recommendation,
        "charts": specs,
    }
    report(1.0, "done")
    # one JSON round trip turns numpy values into plain ones; clean() then makes every NaN/inf null
    return clean(json.loads(json.dumps(body, default=_jsonable)))


def _class_charts(row: dict) -> dict:
    details = row.get("details") or {}
    if "sweeps" not in details:
        return {}
    name, out = row["name"], {}
    for knob, chosen in (("max_num_seqs", row["config"]["max_num_seqs"]),
                         ("max_num_batched_tokens", row["config"]["max_num_batched_tokens"]),
                         ("rate_rps", row["max_qps_per_replica"])):
        points = details["sweeps"]["rate" if knob == "rate_rps" else knob]
        bands = details["bands"] if knob == "rate_rps" else None
        out[f"{name}:{knob}"] = recommend_charts.sweep_chart(points, knob, chosen, dict(row["slo"]), bands).to_dict()
    out[f"{name}:pareto"] = recommend_charts.pareto_chart(details["points"], details["pareto"]).to_dict()
    out[f"{name}:tornado"] = recommend_charts.tornado_chart(details["tornado"]).to_dict()
    return out


def _model_fields(model: ModelSpec) -> dict:
    return {k: v for k, v in asdict(model).items() if v is not None and not k.startswith("help")}


def _reproduce_command(trace_id: str, model: ModelSpec, gpu: GPU, options: RecommendOptions) -> str:
    # the trace by its content-hash id, every argument shell-quoted
    parts = ["python -m planner report", trace_id, f"--model {shlex.quote(model.name)}", f"--gpu {gpu.name}",
             f"--tp {options.tp}", f"--engine {options.engine}", f"--gpu-mem-util {options.gpu_memory_utilization}",
             f"--kv-cache-dtype {options.kv_cache_dtype}", f"--headroom {options.headroom}"]
    if options.max_model_len:
        parts.append(f"--max-model-len {options.max_model_len}")
    if options.tp_options:
        parts.append(f"--tp-search {','.join(map(str, options.tp_options))}")
    if options.max_new_tokens_options:
        parts.append(f"--max-new-tokens-options {shlex.quote(','.join(options.max_new_tokens_options))}")
    parts.append(f"--price {gpu.price_per_hour:g}")
    parts += [f"--slo {shlex.quote(s)}" for s in options.slos]
    return " ".join(parts)


def _without_timeline(simulation: dict | None) -> dict | None:
    return None if simulation is None else {k: v for k, v in simulation.items() if k != "timeline"}


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
