"""Chart builders for recommendations: knob sweeps with SLO lines, the Pareto front and a tornado chart."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import altair as alt
import polars as pl

if TYPE_CHECKING:
    from planner.recommend.search import ClassRecommendation

METRICS = {"ttft_p99_ms": "TTFT p99 (ms)", "tpot_p99_ms": "TPOT p99 (ms)", "throughput_tok_s": "output tok/s"}


def _finite(rows: list[dict]) -> list[dict]:
    """Rows with their infinite values left off the axis (None): a metric no request has (an aborted replay's queue)
    is inf, which Altair writes as a literal Infinity that breaks the axis (a report's JSON reads it as null)."""
    return [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            for row in rows]


def sweep_chart(points: list[dict], knob: str, chosen: float | None = None,
                slo_lines: dict[str, float] | None = None, bands: list[dict] | None = None,
                focus: tuple[str, str] | None = None) -> alt.HConcatChart:
    """One panel per metric against a knob, and one for the class's ``focus`` (its column and title) where
    :data:`METRICS` lacks it (TTFT p95, E2E p99); dashed lines at the SLO limits (``slo_lines`` by column), a rule
    at the chosen value, the spread across resampled traces where ``bands`` gives it, and a red cross on each
    overloaded point (its latency a floor; its throughput, where the search stopped it early, left out)."""
    frame = pl.DataFrame(_finite(points))
    panels = []
    # a focus METRICS titles keeps its title (and unit); another's is a latency in ms (slo_focus_key)
    metrics = {**METRICS, **({focus[0]: f"{focus[1]} (ms)"} if focus and focus[0] in frame.columns
                             and focus[0] not in METRICS else {})}
    for column, title in metrics.items():
        base = alt.Chart(frame).mark_line(point=True).encode(
            x=alt.X(f"{knob}:Q", scale=alt.Scale(type="log"), title=knob),
            y=alt.Y(f"{column}:Q", title=title),
            tooltip=[alt.Tooltip(f"{knob}:Q"), alt.Tooltip(f"{column}:Q", format=",.1f")])
        layers = [base]
        if bands and f"{column}_lo" in bands[0]:
            layers.insert(0, alt.Chart(pl.DataFrame(_finite(bands))).mark_area(opacity=0.2).encode(
                x=f"{knob}:Q", y=f"{column}_lo:Q", y2=f"{column}_hi:Q"))
        overloaded = frame.filter(pl.col("overloaded")) if "overloaded" in frame.columns else frame.clear()
        if overloaded.height and column != "throughput_tok_s":     # the search stopped these: a floor, not a value
            layers.append(alt.Chart(overloaded).mark_point(shape="cross", size=90, color="firebrick").encode(
                x=f"{knob}:Q", y=f"{column}:Q", tooltip=[alt.Tooltip(f"{knob}:Q"), alt.Tooltip(
                    f"{column}:Q", format=",.1f", title=f"{title}, overloaded (at least)")]))
        if slo_lines and column in slo_lines:
            layers.append(alt.Chart(pl.DataFrame({"y": [slo_lines[column]]})).mark_rule(
                strokeDash=[4, 3], color="firebrick").encode(y="y:Q"))
        if chosen is not None:
            layers.append(alt.Chart(pl.DataFrame({"x": [float(chosen)]})).mark_rule(color="gray").encode(x="x:Q"))
        panels.append(alt.layer(*layers).properties(width=220, height=180))
    return alt.hconcat(*panels)


def pareto_chart(points: list[dict], front: list[dict]) -> alt.LayerChart:
    """Throughput against TTFT p99 for every configuration at its sustainable rate; the front highlighted."""
    frame = pl.DataFrame(points).with_columns(
        pl.format("{}×{}", "max_num_seqs", "max_num_batched_tokens").alias("config"))
    dots = alt.Chart(frame).mark_point(filled=True, opacity=0.5).encode(
        x=alt.X("ttft_p99_ms:Q", scale=alt.Scale(type="log"), title="TTFT p99 (ms)"),
        y=alt.Y("throughput_tok_s:Q", title="output tok/s"), tooltip=["config:N", "ttft_p99_ms:Q",
                                                                      "throughput_tok_s:Q"])
    line = alt.Chart(pl.DataFrame(front)).mark_line(color="firebrick").encode(x="ttft_p99_ms:Q",
                                                                              y="throughput_tok_s:Q")
    return alt.layer(dots, line).properties(height=260)


def tornado_chart(rows: list[dict], metric: str) -> alt.Chart:
    """How far ±20% in rate, output length, burstiness and KV pool move the class's metric (``metric``, its
    label, e.g. ``TTFT p99``: a throughput class has no SLO, and its tornado moves E2E p99)."""
    frame = pl.DataFrame(_finite(rows)).with_columns((pl.col("value_ms") - pl.col("baseline_ms")).alias("delta_ms"))
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("factor:N", title=None), x=alt.X("delta_ms:Q", title=f"change of {metric} (ms)"),
        color=alt.Color("change:N", title=None),
        tooltip=["factor:N", "change:N", alt.Tooltip("value_ms:Q", format=",.0f"),
                 alt.Tooltip("baseline_ms:Q", format=",.0f")]).properties(height=180)


def fleet_chart(row: ClassRecommendation, max_queue_s: float) -> alt.HConcatChart:
    """The class's metric and p99 queueing against the number of replicas, each with its limit (dashed); a
    point per fleet simulated, filled where the class holds."""
    fleet = row.fleet
    metric = row.slo_focus_label
    frame = pl.DataFrame(_finite([{"replicas": p.replicas, "metric_ms": float(p.metric_ms),
                                   "queue_p99_ms": float(p.queue_p99_ms), "holds": "holds" if p.holds else "fails",
                                   "verdict": p.verdict} for p in fleet.curve]))
    panels = []
    for column, title, limit in (("metric_ms", f"{metric} (ms)", row.slo_limit_ms),
                                 ("queue_p99_ms", "queueing p99 (ms)", max_queue_s * 1e3)):
        base = alt.Chart(frame).mark_line(point=alt.OverlayMarkDef(filled=True, size=60)).encode(
            x=alt.X("replicas:Q", title=f"replicas ({fleet.router})", axis=alt.Axis(tickMinStep=1)),
            y=alt.Y(f"{column}:Q", title=title, scale=alt.Scale(type="symlog")),   # 0 ms queueing is common
            tooltip=["replicas:Q", alt.Tooltip(f"{column}:Q", format=",.1f"), "holds:N", "verdict:N"])
        dots = alt.Chart(frame).mark_point(size=80, filled=True).encode(
            x="replicas:Q", y=f"{column}:Q", color=alt.Color("holds:N", scale=alt.Scale(
                domain=["holds", "fails"], range=["seagreen", "firebrick"]), title=None))
        layers = [base, dots]
        if limit is not None:
            layers.append(alt.Chart(pl.DataFrame({"y": [float(limit)]})).mark_rule(
                strokeDash=[4, 3], color="firebrick").encode(y="y:Q"))
        panels.append(alt.layer(*layers).properties(width=260, height=180))
    return alt.hconcat(*panels)


def schedule_chart(row: ClassRecommendation) -> alt.LayerChart:
    """Replicas each window of the trace needs (steps), against the fleet provisioned for the whole trace."""
    fleet = row.fleet
    frame = pl.DataFrame([{"hour": w["start_s"] / 3600, "replicas": w["replicas"]} for w in fleet.schedule]
                         + [{"hour": fleet.schedule[-1]["end_s"] / 3600, "replicas": fleet.schedule[-1]["replicas"]}])
    steps = alt.Chart(frame).mark_line(interpolate="step-after").encode(
        x=alt.X("hour:Q", title="hours into the trace"), y=alt.Y("replicas:Q", title="replicas needed"),
        tooltip=["hour:Q", "replicas:Q"])
    peak = alt.Chart(pl.DataFrame({"y": [float(fleet.replicas)]})).mark_rule(strokeDash=[4, 3], color="gray").encode(
        y="y:Q")
    return alt.layer(steps, peak).properties(height=160)


def class_charts(row: ClassRecommendation, max_queue_s: float | None = None) -> dict[str, alt.TopLevelMixin]:
    """A class's sensitivity charts (knob sweeps around its settings, Pareto front, tornado), by name; empty for a
    class without sweeps (infeasible, or recommended without details). The page and the report draw these."""
    out = {}
    if row.fleet is not None and row.fleet.curve and max_queue_s is not None:
        out["fleet"] = fleet_chart(row, max_queue_s)
        if row.fleet.schedule:
            out["schedule"] = schedule_chart(row)
    details = row.details or {}
    if "sweeps" not in details:
        return out
    slo_line = {row.slo_focus_key: row.slo_limit_ms} if row.slo_limit_ms is not None else {}
    for knob, chosen in (("max_num_seqs", row.config["max_num_seqs"]),
                         ("max_num_batched_tokens", row.config["max_num_batched_tokens"]),
                         ("rate_rps", row.max_qps_per_replica)):
        points = details["sweeps"]["rate" if knob == "rate_rps" else knob]
        bands = details["bands"] if knob == "rate_rps" else None
        out[knob] = sweep_chart(points, knob, chosen, slo_line, bands, (row.slo_focus_key, row.slo_focus_label))
    out["pareto"] = pareto_chart(details["points"], details["pareto"])
    out["tornado"] = tornado_chart(details["tornado"], row.slo_focus_label)
    return out
