"""Chart builders: pure functions from planner results to Altair charts, shared by pages and reports.

Each builder pre-aggregates (log bins, quantile grids, envelopes) so a chart stays a few thousand rows whatever
the trace size, and exports outside Streamlit stay under Altair's embedding limit.
"""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import polars as pl

from planner.workload.fitting.arrivals import counts_per_bin
from planner.workload.fitting.lengths import Candidate, LengthFit, exact_quantile

TOP_FAMILIES = 3
MAX_POINTS = 2_000
RATE_WIDTHS_S = (1.0, 10.0, 60.0)


def _shown(fit: LengthFit, top: int) -> list[Candidate]:
    """The best fitted families (not the point mass of lengths all alike: no density to draw)."""
    return [c for c in fit.candidates if c.dist is not None and c.family != "empirical"][:top]


def _fitted(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """The lengths a fit saw (``fit_lengths`` drops non-positive ones: 30% zero outputs put the chart's median at 31
    where the fit's was 55), and whether they are whole tokens (the fit reads token ``k`` as ``[k − ½, k + ½)``)."""
    keep = x > 0
    x, w = x[keep], w[keep]
    return x, w, bool(np.all(np.mod(x, 1.0) == 0))


def log_bins(x: np.ndarray, w: np.ndarray, bins: int = 48) -> pl.DataFrame:
    """Counts of positive ``(x, w)`` in log-spaced bins: ``lo, hi, count, density`` (density per unit of x, over all
    n). Whole tokens get bins of whole tokens (edges at half-integers): a bin narrower than a token divided one
    token's count by a fraction of a token (5x the density at 1-2 tokens)."""
    x, w, whole = _fitted(x, w)
    edges = np.geomspace(max(float(x.min()), 0.5), float(x.max()) * 1.0001, bins + 1)
    if whole:
        tokens = np.unique(np.round(edges))
        tokens[0] = min(tokens[0], x.min())
        if tokens[-1] <= x.max():
            tokens = np.append(tokens, x.max() + 1)
        edges = tokens - 0.5
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, edges.size - 2)
    counts = np.bincount(idx, weights=w, minlength=edges.size - 1)
    return pl.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": counts,
                         "density": counts / (w.sum() * np.diff(edges))})


def length_histogram(x: np.ndarray, w: np.ndarray, fit: LengthFit, title: str,
                     top: int = TOP_FAMILIES) -> alt.LayerChart:
    """Log-binned histogram (density per token) with the best fitted densities overlaid and the cap marked."""
    hist = log_bins(x, w).filter(pl.col("count") > 0)
    grid = np.geomspace(float(hist["lo"].min()), float(fit.censored_at or hist["hi"].max()), 200)
    curves = pl.concat([pl.DataFrame({"tokens": grid, "density": c.dist.pdf(grid), "family": c.family})
                        for c in _shown(fit, top)]) if _shown(fit, top) else None
    bars = alt.Chart(hist).mark_rect(opacity=0.45, color="#4c78a8").encode(
        x=alt.X("lo:Q", scale=alt.Scale(type="log"), title="tokens"), x2="hi:Q",
        y=alt.Y("density:Q", scale=alt.Scale(type="log"), title="density (per token)"), y2=alt.datum(1e-12),
        tooltip=[alt.Tooltip("lo:Q", format=".0f"), alt.Tooltip("hi:Q", format=".0f"), "count:Q"])
    layers = [bars]
    if curves is not None:
        layers.append(alt.Chart(curves.filter(pl.col("density") > 0)).mark_line().encode(
            x="tokens:Q", y="density:Q", color=alt.Color("family:N", title="fit"), tooltip=["family:N"]))
    if fit.censored_at is not None:
        cap = pl.DataFrame({"cap": [fit.censored_at],
                            "label": [f"cap {fit.censored_at:g}: {fit.censored_fraction:.1%} censored"]})
        layers.append(alt.Chart(cap).mark_rule(strokeDash=[4, 3], color="firebrick").encode(
            x="cap:Q", tooltip=["label:N"]))
    return alt.layer(*layers).properties(title=title, height=280)


def _quantile_grid(censored_fraction: float) -> np.ndarray:
    top = min(0.999, 1.0 - censored_fraction - 1e-9)
    return np.unique(np.concatenate([np.linspace(0.005, 0.995, 199), [0.999]]).clip(0.001, top))


def cdf_chart(x: np.ndarray, w: np.ndarray, fit: LengthFit, title: str, top: int = TOP_FAMILIES) -> alt.Chart:
    """Empirical CDF against the best fitted CDFs, on a log axis (whole tokens: ``P(X ≤ k)`` is the fit's CDF at
    ``k + ½``, the end of token ``k``'s interval)."""
    x, w, whole = _fitted(x, w)
    probs = np.linspace(0.0, 1.0, 401)[1:-1]
    empirical = pl.DataFrame({"tokens": [exact_quantile(x, w, p) for p in probs], "cdf": probs,
                              "source": "empirical"})
    at = empirical["tokens"].to_numpy() + (0.5 if whole else 0.0)
    fitted = [pl.DataFrame({"tokens": empirical["tokens"].to_numpy(), "cdf": c.dist.cdf(at), "source": c.family})
              for c in _shown(fit, top)]
    data = pl.concat([empirical, *fitted]).filter(pl.col("tokens") > 0)
    return alt.Chart(data).mark_line().encode(
        x=alt.X("tokens:Q", scale=alt.Scale(type="log")), y=alt.Y("cdf:Q", title="P(X ≤ x)"),
        color=alt.Color("source:N", title=None),
        strokeDash=alt.condition(alt.datum.source == "empirical", alt.value([1, 0]), alt.value([5, 3])),
        tooltip=["source:N", alt.Tooltip("tokens:Q", format=".1f"), alt.Tooltip("cdf:Q", format=".3f")],
    ).properties(title=title, height=280)


def qq_table(x: np.ndarray, w: np.ndarray, fit: LengthFit, top: int = TOP_FAMILIES) -> pl.DataFrame:
    """Empirical against fitted quantiles on a probability grid below the censored fraction."""
    x, w, _ = _fitted(x, w)
    probs = _quantile_grid(fit.censored_fraction)
    empirical = np.array([exact_quantile(x, w, p) for p in probs])
    frames = [pl.DataFrame({"p": probs, "empirical": empirical, "fitted": c.dist.ppf(probs), "family": c.family})
              for c in _shown(fit, top)]
    # no family converged: an empty table of the same columns (concatenating none raised)
    return pl.concat(frames) if frames else pl.DataFrame(schema={"p": pl.Float64, "empirical": pl.Float64,
                                                                  "fitted": pl.Float64, "family": pl.String})


def qq_chart(x: np.ndarray, w: np.ndarray, fit: LengthFit, title: str, top: int = TOP_FAMILIES) -> alt.LayerChart:
    """QQ plot (log-log): a family that fits keeps to the diagonal."""
    data = qq_table(x, w, fit, top).filter((pl.col("empirical") > 0) & (pl.col("fitted") > 0))
    lo, hi = (float(data["empirical"].min()), float(data["empirical"].max())) if data.height else (1.0, 1.0)
    diagonal = alt.Chart(pl.DataFrame({"v": [lo, hi]})).mark_line(color="gray", strokeDash=[2, 2]).encode(
        x="v:Q", y="v:Q")
    points = alt.Chart(data).mark_point(size=14, filled=True).encode(
        x=alt.X("empirical:Q", scale=alt.Scale(type="log"), title="empirical quantile"),
        y=alt.Y("fitted:Q", scale=alt.Scale(type="log"), title="fitted quantile"),
        color=alt.Color("family:N", title="fit"),
        tooltip=["family:N", alt.Tooltip("p:Q", format=".3f"), alt.Tooltip("empirical:Q", format=".1f"),
                 alt.Tooltip("fitted:Q", format=".1f")])
    return alt.layer(diagonal, points).properties(title=title, height=280)


def rate_table(arrivals_s: np.ndarray, widths_s: tuple[float, ...] = RATE_WIDTHS_S,
               max_points: int = MAX_POINTS) -> pl.DataFrame:
    """Request rate per bin at each width: ``start_s, rate_rps, bin``; long series keep their peak envelope.

    A series longer than ``max_points`` is cut into groups of consecutive bins and each group shows its highest
    rate, so a burst never disappears from the timeline.
    """
    t = np.asarray(arrivals_s, dtype=float)
    frames = []
    for width in widths_s:
        if t.max() - t.min() < width:
            continue
        binned = counts_per_bin(t, width)
        group = max(1, math.ceil(binned.bins / max_points))
        rates = np.zeros(math.ceil(binned.bins / group))
        np.maximum.at(rates, binned.index // group, binned.counts / width)
        starts = np.arange(rates.size) * (width * group)
        label = f"{width:g} s" + (f" (peak of {group})" if group > 1 else "")
        frames.append(pl.DataFrame({"start_s": starts, "rate_rps": rates, "bin": label}))
    if not frames:      # a trace shorter than the narrowest bin
        return pl.DataFrame(schema={"start_s": pl.Float64, "rate_rps": pl.Float64, "bin": pl.String})
    return pl.concat(frames)


def rate_timeline(rates: pl.DataFrame, mean_rate_rps: float | None = None,
                  peak_rate_rps: float | None = None) -> alt.LayerChart:
    """Rate over time at each bin width, with the mean and the planning peak (p99 of per-minute rates)."""
    lines = alt.Chart(rates).mark_line(strokeWidth=1).encode(
        x=alt.X("start_s:Q", title="seconds from the first request"), y=alt.Y("rate_rps:Q", title="req/s"),
        color=alt.Color("bin:N", title="bin"), opacity=alt.value(0.8),
        tooltip=["bin:N", alt.Tooltip("start_s:Q", format=",.0f"), alt.Tooltip("rate_rps:Q", format=".2f")])
    marks = [(v, label) for v, label in ((mean_rate_rps, "mean"), (peak_rate_rps, "peak (p99 of 1-min rates)"))
             if v is not None]
    if not marks:
        return alt.layer(lines).properties(height=260)
    levels = pl.DataFrame({"rate_rps": [v for v, _ in marks], "level": [label for _, label in marks]})
    rules = alt.Chart(levels).mark_rule(strokeDash=[4, 3]).encode(
        y="rate_rps:Q", color=alt.value("black"), tooltip=["level:N", alt.Tooltip("rate_rps:Q", format=".2f")])
    return alt.layer(lines, rules).properties(height=260)


def dispersion_chart(curve: list[dict]) -> alt.LayerChart:
    """Variance-to-mean ratio of counts against bin width (log-log); 1 is Poisson at every width."""
    data = pl.DataFrame(curve)
    line = alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("bin_s:Q", scale=alt.Scale(type="log"), title="bin width (s)"),
        y=alt.Y("vmr:Q", scale=alt.Scale(type="log"), title="variance / mean of counts"),
        tooltip=[alt.Tooltip("bin_s:Q", title="bin (s)"), alt.Tooltip("vmr:Q", format=".3g"), "bins:Q"])
    poisson = alt.Chart(pl.DataFrame({"vmr": [1.0], "label": ["Poisson"]})).mark_rule(
        strokeDash=[4, 3], color="gray").encode(y="vmr:Q", tooltip=["label:N"])
    return alt.layer(line, poisson).properties(height=260)


def joint_heatmap(rows: list[dict]) -> alt.Chart:
    """2-D histogram of input against output tokens on log2 bins (from
    :func:`planner.workload.tables.joint_histogram`)."""
    data = pl.DataFrame(rows).with_columns(pl.col("input_lo").clip(0.5), pl.col("output_lo").clip(0.5))
    return alt.Chart(data).mark_rect().encode(
        x=alt.X("input_lo:Q", scale=alt.Scale(type="log"), title="input tokens"), x2="input_hi:Q",
        y=alt.Y("output_lo:Q", scale=alt.Scale(type="log"), title="output tokens"), y2="output_hi:Q",
        color=alt.Color("count:Q", scale=alt.Scale(type="log", scheme="viridis"), title="requests"),
        tooltip=[alt.Tooltip("input_lo:Q", format=".0f"), alt.Tooltip("input_hi:Q", format=".0f"),
                 alt.Tooltip("output_lo:Q", format=".0f"), alt.Tooltip("output_hi:Q", format=".0f"), "count:Q"],
    ).properties(height=320)


def bucket_chart(rows: list[dict], latency_label: str, by_label: str) -> alt.Chart:
    """p50/p90/p99 of a latency per length bucket, as grouped bars."""
    data = pl.DataFrame(rows).select("bucket", "p50", "p90", "p99").unpivot(
        index="bucket", variable_name="percentile", value_name="ms").drop_nulls()
    order = [r["bucket"] for r in rows]
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("bucket:N", sort=order, title=by_label), xOffset="percentile:N",
        y=alt.Y("ms:Q", title=latency_label), color=alt.Color("percentile:N", title=None),
        tooltip=["bucket:N", "percentile:N", alt.Tooltip("ms:Q", format=".1f")]).properties(height=240)


def reuse_curve(curve: list[dict], ideal_hit_rate: float, pool: float | None = None,
                x: str = "cache_tokens") -> alt.LayerChart:
    """The LRU prefix-cache hit rate against cache size (``curve`` from
    :meth:`planner.workload.reuse.ReuseAnalysis.to_dict`; ``x`` ``cache_tokens`` or ``cache_gib``), the ideal
    (never-evicting) hit rate as a rule and, given, the KV pool's size marked."""
    title = {"cache_tokens": "prefix cache size (KV tokens, log)", "cache_gib": "prefix cache size (GiB of KV, log)"}[x]
    data = pl.DataFrame(curve).filter(pl.col(x) > 0)
    line = alt.Chart(data).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", scale=alt.Scale(type="log"), title=title),
        y=alt.Y("hit_rate:Q", axis=alt.Axis(format="%"), title="prompt tokens served from the cache (LRU)"),
        tooltip=[alt.Tooltip(f"{x}:Q", format=",.3~f"), alt.Tooltip("hit_rate:Q", format=".1%")])
    ideal = alt.Chart(pl.DataFrame({"hit_rate": [ideal_hit_rate], "label": ["ideal (infinite cache)"]})).mark_rule(
        strokeDash=[4, 3], color="gray").encode(y="hit_rate:Q", tooltip=["label:N",
                                                                         alt.Tooltip("hit_rate:Q", format=".1%")])
    layers = [line, ideal]
    if pool:
        marks = pl.DataFrame({x: [pool], "label": ["this scenario's KV pool"]})
        layers.append(alt.Chart(marks).mark_rule(strokeDash=[4, 3], color="firebrick").encode(
            x=f"{x}:Q", tooltip=["label:N", alt.Tooltip(f"{x}:Q", format=",.3~f")]))
    return alt.layer(*layers).properties(height=260)
