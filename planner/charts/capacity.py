"""Chart builders for memory and capacity: pure functions of a :class:`planner.capacity.report.CapacityReport`'s
parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt
import polars as pl

if TYPE_CHECKING:
    from planner.capacity.memory import MemoryPlan

_PARTS = ("weights", "activation", "non_torch", "cuda_graphs", "kv_cache", "outside_budget")


def breakdown_bar(plan: MemoryPlan) -> alt.Chart:
    """One GPU's memory as a stacked bar: weights, activation peak, non-torch, CUDA graphs, KV cache, the rest.

    The bar's thickness is a band step with the legend below it, not a fixed pixel height: Streamlit fits a fixed
    height around the axis and a six-entry legend, which left the bar a hairline and two legend entries (vl-convert
    draws either way).
    """
    breakdown = plan.breakdown_gib()
    data = pl.DataFrame({"gpu": "one GPU", "part": list(_PARTS), "gib": [float(breakdown[p]) for p in _PARTS],
                         "order": list(range(len(_PARTS)))})
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("gib:Q", title="GiB per GPU", stack="zero"), y=alt.Y("gpu:N", title=None, axis=None),
        color=alt.Color("part:N", sort=list(_PARTS), title=None,
                        legend=alt.Legend(orient="bottom", columns=len(_PARTS))),
        order="order:Q", tooltip=["part:N", alt.Tooltip("gib:Q", format=".2f")]).properties(height=alt.Step(36))


def concurrency_chart(curve: list[dict], trace: dict | None = None) -> alt.LayerChart:
    """vLLM's maximum concurrency against max_model_len, with this trace's mean and p95 final lengths marked."""
    line = alt.Chart(pl.DataFrame(curve)).mark_line(point=True).encode(
        x=alt.X("max_model_len:Q", scale=alt.Scale(type="log"), title="max_model_len (tokens per request)"),
        y=alt.Y("max_concurrency:Q", scale=alt.Scale(type="log"), title="requests that fit at once"),
        tooltip=[alt.Tooltip("max_model_len:Q", format=","), alt.Tooltip("max_concurrency:Q", format=".1f")])
    layers = [line]
    if trace:
        marks = pl.DataFrame({"tokens": [trace["mean_final_tokens"], trace["p95_final_tokens"]],
                              "label": ["trace mean final length", "trace p95 final length"]})
        layers.append(alt.Chart(marks).mark_rule(strokeDash=[4, 3], color="firebrick").encode(
            x="tokens:Q", tooltip=["label:N", alt.Tooltip("tokens:Q", format=",.0f")]))
    return alt.layer(*layers).properties(height=260)


def reservation_chart(rows: list[dict]) -> alt.VConcatChart:
    """Concurrency ceiling per reservation policy against max_new_tokens, over the share of requests cut."""
    data = pl.DataFrame(rows)
    x = alt.X("max_new_tokens:Q", scale=alt.Scale(type="log"), title="max_new_tokens")
    top = alt.Chart(data).mark_line().encode(
        x=x, y=alt.Y("concurrency:Q", scale=alt.Scale(type="log"), title="concurrent requests"),
        color=alt.Color("label:N", title="policy"),
        strokeDash=alt.condition(alt.datum.policy == "seed", alt.value([5, 3]), alt.value([1, 0])),
        tooltip=["label:N", "max_new_tokens:Q", alt.Tooltip("concurrency:Q", format=".1f"),
                 alt.Tooltip("over_reservation:Q", format=".2f")]).properties(height=240)
    # the share cut is the trace's, whatever the policy: one policy's rows draw it
    bottom = alt.Chart(data.filter(pl.col("policy") == rows[0]["policy"])).mark_area(opacity=0.4, color="gray").encode(
        x=x, y=alt.Y("exceed_share:Q", title="requests longer than it", axis=alt.Axis(format="%")),
        tooltip=["max_new_tokens:Q", alt.Tooltip("exceed_share:Q", format=".1%")]).properties(height=110)
    return alt.vconcat(top, bottom)


def padding_chart(rows: list[dict]) -> alt.LayerChart:
    """Expected useful-token fraction of static batches drawn from the trace, with its p10-p90 band."""
    data = pl.DataFrame(rows)
    x = alt.X("batch_size:Q", scale=alt.Scale(type="log", base=2), title="static batch size")
    band = alt.Chart(data).mark_area(opacity=0.25).encode(x=x, y=alt.Y("p10:Q", title="useful tokens"), y2="p90:Q")
    line = alt.Chart(data).mark_line(point=True).encode(
        x=x, y=alt.Y("mean:Q", axis=alt.Axis(format="%")),
        tooltip=["batch_size:Q", alt.Tooltip("mean:Q", format=".1%")])
    return alt.layer(band, line).properties(height=240)


def preemption_chart(points: list[dict], crossover: float | None) -> alt.LayerChart:
    """Recompute against swap time to resume a preempted sequence, by its length."""
    data = pl.DataFrame(points).unpivot(index="length", variable_name="mode", value_name="seconds")
    lines = alt.Chart(data).mark_line().encode(
        x=alt.X("length:Q", scale=alt.Scale(type="log"), title="sequence length (tokens)"),
        y=alt.Y("seconds:Q", scale=alt.Scale(type="log"), title="seconds to resume"),
        color=alt.Color("mode:N", title=None),
        tooltip=["mode:N", alt.Tooltip("length:Q", format=","), alt.Tooltip("seconds:Q", format=".4f")])
    if crossover is None:
        return alt.layer(lines).properties(height=240)
    rule = alt.Chart(pl.DataFrame({"length": [crossover]})).mark_rule(strokeDash=[4, 3]).encode(x="length:Q")
    return alt.layer(lines, rule).properties(height=240)
