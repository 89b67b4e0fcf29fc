"""A capacity report: what the app shows for one trace and scenario, gathered into one typed object whose
``to_dict()`` is the report's JSON twin, with its charts as Vega-Lite specs built by the pages' own chart builders.
Every figure comes from the same planner functions the CLI and the pages call; :mod:`planner.report.render` writes
the HTML and Markdown twins from it.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from dataclasses import asdict, dataclass, replace
from typing import Callable

from planner import __version__
from planner.capacity.report import CapacityReport, capacity_report
from planner.charts import capacity as capacity_charts
from planner.charts import recommend as recommend_charts
from planner.charts import sim as sim_charts
from planner.charts import workload as charts
from planner.errors import PlannerError
from planner.jsonable import clean
from planner.recommend.plan import (Recommendation, RecommendOptions, plan_recommendation,
                                    searched_calibration_warnings)
from planner.recommend.search import ClassRecommendation
from planner.scenario import Scenario
from planner.sim.cost_model import CostParams
from planner.sim.pool_margin import PoolMargin, pool_margin, queue_holds
from planner.sim.results import SimulationSummary, summarize
from planner.sim.run import simulate
from planner.traces import store
from planner.traces.queries import arrival_times, length_counts, request_lengths
from planner.workload.fits import arrival_fit_dict, arrival_overview, fit_length_field, length_fit_dict
from planner.workload.replay import from_trace, served_models, several_servers
from planner.workload.stats import trace_stats
from planner.workload.tables import trace_reuse

REPORT_FORMAT = 1
LENGTH_FIELDS = (("input_tokens", "Input tokens"), ("output_tokens", "Output tokens"))


@dataclass(frozen=True)
class Report:
    """Every section of a capacity report. ``to_dict()`` is the JSON twin (``format, app_version, created_utc,
    title, trace, scenario, assumptions, workload, memory, simulation, recommendations, charts``; NaN and inf as
    null), stored with a saved report and written by ``report --format json``."""

    title: str
    created_utc: str
    trace: dict
    scenario: Scenario
    options: RecommendOptions
    stats: dict
    fits: dict
    arrivals: dict | None
    memory: CapacityReport
    simulation: SimulationSummary | None
    kv_margin: PoolMargin | None
    recommendation: Recommendation | None
    recommendation_error: str | None
    charts: dict[str, dict]
    format: int = REPORT_FORMAT
    app_version: str = __version__

    @property
    def assumptions(self) -> dict:
        """What the figures rest on: cost model, model config, GPU, engine settings and a rebuilding command."""
        s = self.scenario
        model = {k: v for k, v in asdict(s.model).items() if v is not None and not k.startswith("help")}
        return {"cost_model": s.cost.resolved(s).as_dict(),
                "calibration_warnings": list(searched_calibration_warnings(s, self.options)),
                "calibration_fit": list(s.cost.fitted_on.fit_notes) if s.cost.fitted_on else [],
                "trace_warnings": [note] if (note := several_servers(self.trace["served_by"], s.model)) else [],
                "model_config": model,
                "gpu": {k: v for k, v in asdict(s.gpu).items() if not k.startswith("help")},
                "engine_defaults": self.simulation.settings if self.simulation else None,
                "reproduce": reproduce_command(self.trace["trace_id"], s, self.options)}

    def to_dict(self) -> dict:
        recommendations = (self.recommendation.to_dict() if self.recommendation is not None
                           else {"error": self.recommendation_error, "classes": []} if self.recommendation_error
                           else None)
        simulation = None
        if self.simulation is not None:
            simulation = {k: v for k, v in self.simulation.to_dict().items() if k != "timeline"}
            simulation["kv_margin"] = self.kv_margin.to_dict() if self.kv_margin else None
        return clean({
            "format": self.format, "app_version": self.app_version, "created_utc": self.created_utc,
            "title": self.title, "trace": self.trace,
            "scenario": {**self.scenario.to_dict(), "search": self.options.to_dict()},
            "assumptions": self.assumptions,
            "workload": {"stats": self.stats, "fits": self.fits, "arrivals": self.arrivals},
            "memory": self.memory.to_dict(), "simulation": simulation, "recommendations": recommendations,
            "charts": self.charts})


def build_report(con, trace_ref: str, scenario: Scenario, options: RecommendOptions,
                 progress: Callable[[float, str], None] | None = None,
                 recommendation: Recommendation | None = None, executor=None) -> Report:
    """Every section of a capacity report for ``trace_ref`` in ``scenario``.

    Parameters
    ----------
    options : RecommendOptions
        The recommendation search; ``details`` is forced on.
    recommendation : Recommendation, optional
        A :func:`planner.recommend.plan.plan_recommendation` result with details for the same inputs (the page
        passes its cached one); computed when missing, its simulations on ``executor`` (default: the local one).
    """
    report = progress or (lambda f, m: None)
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

    report(0.15, "memory plan and prefix reuse")
    reuse = trace_reuse(con, info.trace_id, shared_prefix=options.shared_prefix, block_size=scenario.block_size)
    # a summary counts input and output lengths apart: no request's final length to check capacity against
    lengths = None if info.layout == "summary" else request_lengths(con, info.trace_id)
    memory = capacity_report(scenario, lengths=lengths, reuse=reuse)
    specs["memory_breakdown"] = capacity_charts.breakdown_bar(memory.plan).to_dict()
    specs["concurrency"] = capacity_charts.concurrency_chart(memory.concurrency_curve, memory.trace).to_dict()
    if memory.prefix_cache:
        cache = memory.prefix_cache
        specs["prefix_reuse"] = charts.reuse_curve(cache["curve"], cache["ideal_hit_rate"], cache["pool_gib"],
                                                   x="cache_gib").to_dict()

    simulation, kv_margin, error = None, None, None
    if info.has_timestamps:
        report(0.2, "replaying the trace with the scenario's settings")
        work = from_trace(con, info.trace_id, shared_prefix=options.shared_prefix)
        result = simulate(work, scenario)
        simulation = summarize(result)
        report(0.25, "finding where the verdict flips with the KV pool")
        kv_margin = pool_margin(work, scenario, holds=queue_holds(result))
        specs["simulation_cdf"] = sim_charts.latency_cdf_chart(result.ttft_s, result.tpot_s,
                                                               "Latency CDF at the trace's own rate").to_dict()
        specs["simulation_timeline"] = sim_charts.timeline_chart(simulation.timeline).to_dict()
        if recommendation is None:
            try:
                recommendation = plan_recommendation(
                    work, scenario, replace(options, details=True),
                    lambda f, m: report(0.3 + 0.65 * f, f"recommending: {m}"), executor)
            except PlannerError as exc:     # e.g. every request at one instant: no rate to scale
                error = str(exc)
        for row in recommendation.classes if recommendation else ():
            specs.update(_class_charts(row, recommendation.max_queue_s))

    report(0.97, "assembling")
    trace = {"trace_id": info.trace_id, "name": info.name, "content_sha256": store.content_hash(con, info.trace_id),
             "source_file": info.source_file, "format": info.format, "layout": info.layout, "rows": info.rows,
             "failed": info.failed, "rejected": info.rejected, "created": info.created,
             "has_timestamps": info.has_timestamps, "served_by": served_models(con, info.trace_id)}
    out = Report(title=f"Capacity report: {info.name} on {scenario.tp}× {scenario.gpu.label} ({scenario.model.name})",
                 created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), trace=clean(trace),
                 scenario=scenario, options=options, stats=clean(stats), fits=clean(fits), arrivals=clean(arrivals),
                 memory=memory, simulation=simulation, kv_margin=kv_margin, recommendation=recommendation,
                 recommendation_error=error, charts=specs)
    report(1.0, "done")
    return out


def _class_charts(row: ClassRecommendation, max_queue_s: float) -> dict:
    """The class's fleet and sensitivity charts, by ``class:chart`` name (the page draws the same builders)."""
    return {f"{row.name}:{name}": chart.to_dict()
            for name, chart in recommend_charts.class_charts(row, max_queue_s).items()}


def reproduce_command(trace_id: str, scenario: Scenario, options: RecommendOptions) -> str:
    """A shell-quoted ``report`` command that rebuilds the report: the trace by its content-hash id, the scenario's
    flags (:meth:`Scenario.cli_args`) and the search's."""
    parts = ["python -m planner report", trace_id, *map(shlex.quote, scenario.cli_args()),
             f"--headroom {options.headroom!r}"]
    if options.tp_options:
        parts.append(f"--tp-search {','.join(map(str, options.tp_options))}")
    if options.router:
        parts.append(f"--router {options.router}")
    parts += [f"--max-queue-s {options.max_queue_s!r}", f"--resamples {options.resamples}",
              f"--growth {options.growth!r}"]
    if options.max_new_tokens_options:
        parts.append(f"--max-new-tokens-options {shlex.quote(','.join(options.max_new_tokens_options))}")
    if options.shared_prefix:
        parts.append(f"--shared-prefix {shlex.quote(options.shared_prefix)}")
    parts += [f"--slo {shlex.quote(s)}" for s in options.slos]
    parts.append("-o report.html")
    if scenario.cost.source != CostParams().source:
        # the source names an uploaded file: a line break in its name would start a command of its own
        source = re.sub(r"[\x00-\x1f\x7f]+", " ", scenario.cost.source)
        parts.append(f"--calibration CALIBRATION.json  # {source}")
    return " ".join(parts)
