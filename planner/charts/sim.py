"""Chart builders for simulation results: timelines and latency CDFs (pure functions of a replay's results)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt
import numpy as np
import polars as pl

if TYPE_CHECKING:
    from planner.sim.results import Timeline

CDF_POINTS = 200


def latency_quantiles(values_s: np.ndarray, label: str) -> pl.DataFrame:
    """A CDF as ``CDF_POINTS`` quantiles (ms) of the finite values."""
    v = values_s[np.isfinite(values_s)] * 1e3
    probs = np.linspace(0.0, 1.0, CDF_POINTS)
    if v.size == 0:
        return pl.DataFrame({"ms": [], "cdf": [], "metric": []}, schema={"ms": pl.Float64, "cdf": pl.Float64,
                                                                          "metric": pl.String})
    return pl.DataFrame({"ms": np.quantile(v, probs), "cdf": probs, "metric": label})


def cdf_chart(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Latency CDFs (log ms), one line per metric, dashed where the frame's ``source`` is "measured"."""
    return alt.Chart(frame.filter(pl.col("ms") > 0)).mark_line().encode(
        x=alt.X("ms:Q", scale=alt.Scale(type="log"), title="ms"), y=alt.Y("cdf:Q", title="P(X ≤ x)"),
        color=alt.Color("metric:N", title=None),
        strokeDash=alt.StrokeDash("source:N", title=None, sort=["predicted", "measured"]),
        tooltip=["metric:N", "source:N", alt.Tooltip("ms:Q", format=".1f"), alt.Tooltip("cdf:Q", format=".3f")],
    ).properties(title=title, height=240)


def latency_cdf_chart(ttft_s: np.ndarray, tpot_s: np.ndarray, title: str,
                      measured: tuple[np.ndarray, np.ndarray] | None = None) -> alt.Chart:
    """TTFT and TPOT CDFs of one replay (per-request seconds), with the trace's own measured ones overlaid where
    given (``(ttft_s, tpot_s)``)."""
    frames = [latency_quantiles(np.asarray(ttft_s), "TTFT").with_columns(source=pl.lit("predicted")),
              latency_quantiles(np.asarray(tpot_s), "TPOT").with_columns(source=pl.lit("predicted"))]
    if measured is not None:
        frames += [latency_quantiles(np.asarray(values), label).with_columns(source=pl.lit("measured"))
                   for values, label in zip(measured, ("TTFT", "TPOT"), strict=True)]
    return cdf_chart(pl.concat(frames), title)


def timeline_chart(timeline: Timeline) -> alt.VConcatChart:
    """Running and waiting requests, KV blocks in use and step time over simulated time."""
    frame = pl.DataFrame(timeline.to_dict())
    if frame.height == 0:
        return alt.vconcat(alt.Chart(pl.DataFrame({"time_s": [0.0]})).mark_point())
    counts = frame.select("time_s", "running", "waiting").unpivot(index="time_s", variable_name="series",
                                                                   value_name="requests")
    top = alt.Chart(counts).mark_line().encode(
        x=alt.X("time_s:Q", title="simulated seconds"), y=alt.Y("requests:Q"), color=alt.Color("series:N", title=None),
        tooltip=["series:N", alt.Tooltip("time_s:Q", format=",.1f"), "requests:Q"]).properties(height=160)
    blocks = alt.Chart(frame).mark_area(opacity=0.5).encode(
        x=alt.X("time_s:Q", title="simulated seconds"), y=alt.Y("blocks_used:Q", title="KV blocks in use"),
        tooltip=[alt.Tooltip("time_s:Q", format=",.1f"), "blocks_used:Q"]).properties(height=120)
    step = alt.Chart(frame).mark_line(strokeWidth=1).encode(
        x=alt.X("time_s:Q", title="simulated seconds"), y=alt.Y("step_ms:Q", title="step ms"),
        tooltip=[alt.Tooltip("time_s:Q", format=",.1f"), alt.Tooltip("step_ms:Q", format=".1f")]).properties(height=120)
    return alt.vconcat(top, blocks, step)
