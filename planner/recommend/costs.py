"""What it costs: each class's fleet on several GPU types, compared by $/hour and $/M output tokens, each GPU's
recommendation made as for one (:func:`planner.recommend.plan.plan_recommendation`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.catalog.gpus import get_gpu
from planner.errors import PlannerError
from planner.recommend.plan import Recommendation, RecommendOptions, plan_recommendation
from planner.scenario import Scenario
from planner.sim.workload import SimWorkload
from planner.workload.rates import arrival_rate_rps


def parse_gpu_options(text: str) -> list[tuple[str, float | None]]:
    """``a100-80gb-sxm,h100-sxm=3.2``: GPU names (as the catalog spells them, however typed), each with an
    optional USD per GPU-hour; a GPU named twice is refused where its prices differ."""
    out: dict[str, float | None] = {}
    for item in text.split(","):
        name, sep, price = item.strip().partition("=")
        name = name.strip()
        if not name:
            raise PlannerError(f"--gpu-options {text!r}: expected GPU names separated by commas (NAME or NAME=PRICE)")
        try:
            value = float(price) if sep else None
        except ValueError as exc:
            raise PlannerError(f"--gpu-options {item!r}: expected NAME=PRICE with a price in USD per GPU-hour") from exc
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise PlannerError(f"--gpu-options {item!r}: expected a non-negative price per GPU-hour")
        name = get_gpu(name).name          # an unknown name is refused here, before any work
        if None not in (value, out.get(name)) and out[name] != value:     # named again without a price: the same
            raise PlannerError(f"--gpu-options names {name} twice, at {out[name]} and {value} USD per GPU-hour: "
                               "expected one price per GPU")
        out[name] = value if value is not None else out.get(name)
    return list(out.items())


@dataclass(frozen=True)
class GpuComparison:
    """Per GPU type and class: the fleet that holds the class and what it costs; ``cheapest`` per class."""

    recommendation: Recommendation        # the scenario's own GPU (first of the options)
    by_gpu: dict[str, Recommendation]
    skipped: dict[str, str]
    output_tokens_per_hour: float

    def rows(self) -> list[dict]:
        """Per GPU and class: the fleet's point estimate and its cost, and the count with 90% confidence and its
        cost (None without resamples, or where a resample needs more than the largest fleet)."""
        out = []
        for gpu, rec in self.by_gpu.items():
            for c in rec.classes:
                sure = c.fleet.confident_replicas if c.fleet else None
                per_hour, sure_per_hour = rec_price(rec, c, c.replicas_for_peak), rec_price(rec, c, sure)
                out.append({"gpu": gpu, "class": c.name, "feasible": c.feasible, "tp": c.tp,
                            "replicas": c.replicas_for_peak,
                            "gpus": c.replicas_for_peak * c.tp if c.replicas_for_peak else None,
                            "cost_per_hour": per_hour,
                            # the fleet's, on the trace's tokens: not the class row's one replica at its max rate
                            "fleet_cost_per_million_output_tokens": self._per_million(per_hour),
                            "replicas_confident": sure, "cost_per_hour_confident": sure_per_hour,
                            "fleet_cost_per_million_output_tokens_confident": self._per_million(sure_per_hour)})
        return out

    def _per_million(self, per_hour: float | None) -> float | None:
        return per_hour / (self.output_tokens_per_hour / 1e6) if per_hour is not None and \
            self.output_tokens_per_hour else None

    def basis(self) -> str:
        """What ``cheapest`` compares: the 90%-confidence fleets where every feasible option has one, else the
        point estimates (one kind of count for all, never a mix)."""
        feasible = [r for r in self.rows() if r["cost_per_hour"] is not None]
        return "confident" if feasible and all(r["cost_per_hour_confident"] is not None for r in feasible) \
            else "point"

    def cheapest(self) -> dict[str, str | None]:
        key = "cost_per_hour_confident" if self.basis() == "confident" else "cost_per_hour"
        best: dict[str, tuple[float, str] | None] = {}
        for row in self.rows():
            cost = row[key]
            current = best.get(row["class"])
            if cost is not None and (current is None or cost < current[0]):
                best[row["class"]] = (cost, row["gpu"])
            best.setdefault(row["class"], None)
        return {name: (b[1] if b else None) for name, b in best.items()}

    def skipped_options(self) -> dict[str, list[str]]:
        """Per GPU compared, what its recommendation left out (TP degrees with no room for the KV cache, …)."""
        return {gpu: rec.skipped for gpu, rec in self.by_gpu.items() if rec.skipped}

    def lines(self) -> list[str]:
        """The comparison as text: per GPU and class its fleet and cost, then the cheapest per class."""
        out = [f"{r['class']:12s} {r['gpu']:16s} "
               + (f"{r['replicas']} x TP {r['tp']} = {r['gpus']} GPU{'s' * (r['gpus'] != 1)}, "
                  f"${r['cost_per_hour']:,.2f}/hour"
                  + (f", ${r['fleet_cost_per_million_output_tokens']:,.3g}/M output tokens"
                     if r["fleet_cost_per_million_output_tokens"] is not None else "")
                  if r["cost_per_hour"] is not None else "holds no fleet")
               for r in self.rows()]
        out += [f"{name}: cheapest on {gpu}" if gpu else f"{name}: no GPU option holds it"
                for name, gpu in self.cheapest().items()]
        return (out + [f"{gpu}: skipped ({why})" for gpu, why in self.skipped.items()]
                + [f"{gpu}: not compared: {'; '.join(why)}" for gpu, why in self.skipped_options().items()])

    def to_dict(self) -> dict:
        return {"options": self.rows(), "cheapest": self.cheapest(), "cheapest_by": self.basis(),
                "skipped": self.skipped, "skipped_options": self.skipped_options(),
                "output_tokens_per_hour": self.output_tokens_per_hour}


def rec_price(rec: Recommendation, row, replicas: int | None) -> float | None:
    """USD per hour of ``replicas`` replicas of the row's TP on the recommendation's GPU price."""
    if not replicas:
        return None
    return replicas * row.tp * rec.price_per_gpu_hour


def compare_gpus(workload: SimWorkload, scenario: Scenario, options: RecommendOptions, gpus: list[str] | str,
                 progress: Callable[[float, str], None] | None = None, executor=None) -> GpuComparison:
    """Recommend on each GPU type (the scenario's own first) and compare the classes' fleets by cost (every
    simulation on ``executor``, :func:`planner.recommend.plan.plan_recommendation`)."""
    parsed = parse_gpu_options(gpus) if isinstance(gpus, str) else [(g, None) for g in gpus]
    names = [(scenario.gpu.name, None)] + [(g, p) for g, p in parsed if g != scenario.gpu.name]
    prices = dict(parsed)
    by_gpu, skipped = {}, {}
    for i, (name, _) in enumerate(names):
        gpu = get_gpu(name) if name != scenario.gpu.name else scenario.gpu
        if prices.get(name) is not None:
            gpu = gpu.with_price(prices[name])

        def step(f, msg, i=i, name=name):
            if progress:
                progress((i + f) / len(names), f"{name}: {msg}")
        try:
            by_gpu[name] = plan_recommendation(workload, scenario.replace(gpu=gpu), options, step, executor)
        except PlannerError as exc:      # the model does not fit this GPU at the TP degrees compared
            if i == 0:                   # the scenario's own GPU: nothing to compare against, so no more work
                raise
            skipped[name] = str(exc)
    span = float(np.ptp(workload.arrival_s))
    rate = arrival_rate_rps(workload.arrival_s) or 0.0
    # the tokens the trace asks for: headroom is capacity held spare, and serves no more of them
    per_hour = float(workload.output_tokens.mean()) * rate * 3600 if span > 0 else 0.0
    return GpuComparison(by_gpu[scenario.gpu.name], by_gpu, skipped, per_hour)
