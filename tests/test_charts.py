"""Chart builders: the numbers behind each chart, and specs that export outside Streamlit (reports)."""

import json

import altair as alt
import numpy as np
import pytest

from planner.catalog.gpus import GiB, get_gpu
from planner.catalog.presets import get_model
from planner.charts import workload as charts
from planner.scenario import Scenario
from planner.workload.fitting.arrivals import dispersion_curve
from planner.workload.fitting.lengths import counts_of, fit_lengths


@pytest.fixture(scope="module")
def capped_lengths():
    x = np.minimum(np.maximum(np.rint(np.random.default_rng(2).lognormal(5.0, 1.0, 50_000)), 1), 1024)
    xs, ws = counts_of(x)
    return xs, ws, fit_lengths(xs, ws)


def spec(chart) -> dict:
    with alt.data_transformers.enable("default", max_rows=5000):   # exports keep under the embedding limit
        return chart.to_dict()


def test_log_bins_conserve_counts_and_density_integrates_to_one(capped_lengths):
    x, w, _ = capped_lengths
    bins = charts.log_bins(x, w)
    assert bins["count"].sum() == pytest.approx(w.sum())
    assert float(((bins["hi"] - bins["lo"]) * bins["density"]).sum()) == pytest.approx(1.0)


def test_length_charts_show_the_lengths_the_fit_saw_in_whole_tokens():
    # 30% zero-token outputs, which the fit drops: the charts dropped none (median 31 against the fit's 55)
    rng = np.random.default_rng(1)
    raw = np.concatenate([np.zeros(3_000), np.maximum(np.rint(rng.lognormal(4.0, 1.0, 7_000)), 1)])
    x, w = counts_of(raw)
    fit = fit_lengths(x, w)
    bins = charts.log_bins(x, w)
    assert bins["count"].sum() == 7_000 and bins["lo"].min() == raw[raw > 0].min() - 0.5
    # whole-token bins: each bin's density is the mean per-token share of the tokens it holds
    positive = raw[raw > 0]
    for lo, hi, density in bins.select("lo", "hi", "density").iter_rows():
        tokens = np.arange(lo + 0.5, hi + 0.5)
        assert density == pytest.approx(np.isin(positive, tokens).mean() / tokens.size)
    table = charts.qq_table(x, w, fit)
    at_median = int(np.argmin(np.abs(table["p"].to_numpy() - 0.5)))
    assert table["empirical"][at_median] == pytest.approx(fit.empirical_quantiles["p50"], abs=1.0)
    # no family fitted: the QQ view is empty, not an error
    empty = fit.__class__(**{**fit.__dict__, "candidates": []})
    assert charts.qq_table(x, w, empty).height == 0 and "$schema" in spec(charts.qq_chart(x, w, empty, "q"))


def test_every_builder_exports_within_the_row_limit(capped_lengths):
    x, w, fit = capped_lengths
    t = np.cumsum(np.random.default_rng(3).exponential(0.01, 300_000))   # ~50 min at 100 req/s
    rates = charts.rate_table(t)
    built = [charts.length_histogram(x, w, fit, "h"), charts.cdf_chart(x, w, fit, "c"), charts.qq_chart(x, w, fit, "q"),
             charts.rate_timeline(rates, 100.0, 120.0), charts.dispersion_chart(dispersion_curve(t)),
             charts.joint_heatmap([{"input_lo": 0.0, "input_hi": 1.0, "output_lo": 8.0, "output_hi": 16.0,
                                    "count": 3}]),
             charts.bucket_chart([{"bucket": "0–512", "p50": 1.0, "p90": 2.0, "p99": 3.0},
                                  {"bucket": "512+", "p50": 2.0, "p90": None, "p99": 9.0}], "ttft_ms", "input")]
    for chart in built:
        assert "$schema" in spec(chart)


def test_histogram_marks_the_cap_and_overlays_the_top_fits(capped_lengths):
    x, w, fit = capped_lengths
    layers = spec(charts.length_histogram(x, w, fit, "h"))["layer"]
    assert len(layers) == 3                      # bars, fitted densities, cap rule
    datasets = spec(charts.length_histogram(x, w, fit, "h"))["datasets"]
    families = {row["family"] for rows in datasets.values() for row in rows if "family" in row}
    assert families == {c.family for c in fit.candidates[:3]}


def test_qq_table_stays_below_the_censored_fraction(capped_lengths):
    x, w, fit = capped_lengths
    table = charts.qq_table(x, w, fit)
    assert table["p"].max() < 1 - fit.censored_fraction
    best = table.filter(table["family"] == fit.best)
    # the best family keeps to the diagonal in the body
    ratio = (best["fitted"] / best["empirical"]).to_numpy()[20:-20]
    assert np.all(np.abs(ratio - 1) < 0.1)


def test_rate_table_keeps_the_peak_when_it_thins_a_long_series():
    t = np.arange(0, 20_000, 0.5)                   # 2 req/s for 20,000 s
    t = np.sort(np.concatenate([t, np.full(50, 12_345.2)]))   # one 50-request spike
    rates = charts.rate_table(t, widths_s=(1.0,), max_points=1_000)
    assert rates.height <= 1_001
    assert rates["rate_rps"].max() == 52.0
    assert "peak of 20" in rates["bin"][0]


@pytest.mark.parametrize("max_points", [100_000, 1_000, 7])
def test_rate_table_is_the_dense_series_envelope(max_points):
    t = np.cumsum(np.random.default_rng(4).exponential(0.2, 20_000))
    rates = charts.rate_table(t, widths_s=(1.0, 60.0), max_points=max_points)
    for width in (1.0, 60.0):
        dense = np.bincount(np.floor((t - t.min()) / width).astype(np.int64)) / width
        group = max(1, -(-dense.size // max_points))
        envelope = np.concatenate([dense, np.zeros(-dense.size % group)]).reshape(-1, group).max(axis=1)
        got = rates.filter(rates["bin"].str.starts_with(f"{width:g} s"))
        assert list(got["rate_rps"]) == list(envelope)
        assert list(got["start_s"]) == list(np.arange(envelope.size) * width * group)


def test_rate_table_of_a_trace_with_a_stray_timestamp_years_away_stays_small():
    t = np.concatenate([np.arange(600.0), [1.7e9]])
    rates = charts.rate_table(t, max_points=1_000)
    assert rates.height <= 3 * 1_000 and rates["rate_rps"].max() == 1.0


def test_capacity_simulation_and_recommendation_charts_export():
    from planner.charts import capacity as capacity_charts
    from planner.charts import recommend as recommend_charts
    from planner.charts import sim as sim_charts
    from planner.sim.results import Timeline

    points = [{"max_num_seqs": s, "ttft_p99_ms": 100.0 + s, "tpot_p99_ms": 10.0 + s / 10, "throughput_tok_s": 50.0 * s}
              for s in (8, 16, 32)]
    bands = [{"max_num_seqs": s, "ttft_p99_ms_lo": 90.0 + s, "ttft_p99_ms_hi": 110.0 + s, "tpot_p99_ms_lo": 9.0,
              "tpot_p99_ms_hi": 12.0} for s in (8, 16, 32)]
    grid = [{**p, "max_num_batched_tokens": 512} for p in points]
    built = [recommend_charts.sweep_chart(points, "max_num_seqs", 16, {"ttft_p99_ms": 200.0}, bands),
             recommend_charts.pareto_chart(grid, grid[:1]),
             recommend_charts.tornado_chart([{"factor": "arrival rate", "change": "+20%", "value_ms": 5.0,
                                              "baseline_ms": 4.0}], "E2E p99"),
             capacity_charts.breakdown_bar(Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")).memory),
             sim_charts.cdf_chart(sim_charts.latency_quantiles(np.linspace(0.01, 1, 500), "TTFT"), "CDF"),
             sim_charts.timeline_chart(Timeline([0.0, 1.0], [1, 2], [0, 1], [10, 20], [5.0, 6.0]))]
    for chart in built:
        assert "$schema" in spec(chart)
    # a throughput class has no SLO: its tornado names the metric it moves
    assert spec(built[2])["encoding"]["x"]["title"] == "change of E2E p99 (ms)"
    assert len(sim_charts.latency_quantiles(np.array([np.nan, 0.5]), "x")) == sim_charts.CDF_POINTS


def test_a_sweeps_overloaded_points_are_crossed_and_an_aborted_throughput_left_out():
    from planner.charts import recommend as recommend_charts

    points = [{"max_num_seqs": 8, "ttft_p99_ms": 90_000.0, "tpot_p99_ms": 80.0, "throughput_tok_s": None,
               "overloaded": True},
              {"max_num_seqs": 16, "ttft_p99_ms": 150.0, "tpot_p99_ms": 30.0, "throughput_tok_s": 500.0,
               "overloaded": False}]
    panels = spec(recommend_charts.sweep_chart(points, "max_num_seqs"))["hconcat"]
    crosses = [[layer for layer in panel["layer"] if layer.get("mark", {}).get("shape") == "cross"]
               for panel in panels]
    assert [len(c) for c in crosses] == [1, 1, 0]           # TTFT, TPOT; none on throughput
    # a metric no request has is inf: left off the axis, as the report's JSON has it, not a literal Infinity
    points[0]["tpot_p99_ms"] = float("inf")
    text = json.dumps(spec(recommend_charts.sweep_chart(points, "max_num_seqs")))
    assert "Infinity" not in text
    tornado = recommend_charts.tornado_chart([{"factor": "KV pool", "change": "-20%", "value_ms": float("inf"),
                                               "baseline_ms": 4.0}], "TTFT p99")
    assert "Infinity" not in json.dumps(spec(tornado))


def test_a_sweep_draws_the_classs_own_metric_and_its_limit_where_the_p99_panels_lack_it():
    # a TTFT p95 class's limit had no panel to be drawn on: the chart showed p99s and no SLO line
    from planner.charts import recommend as recommend_charts

    points = [{"max_num_seqs": s, "ttft_p99_ms": 100.0 + s, "tpot_p99_ms": 10.0, "throughput_tok_s": 50.0 * s,
               "ttft_p95_ms": 80.0 + s} for s in (8, 16, 32)]
    panels = spec(recommend_charts.sweep_chart(points, "max_num_seqs", 16, {"ttft_p95_ms": 150.0}, None,
                                               ("ttft_p95_ms", "TTFT p95")))["hconcat"]
    assert [p["layer"][0]["encoding"]["y"]["title"] for p in panels] == ["TTFT p99 (ms)", "TPOT p99 (ms)",
                                                                         "output tok/s", "TTFT p95 (ms)"]
    rules = [layer for layer in panels[3]["layer"] if isinstance(layer["mark"], dict)
             and layer["mark"].get("strokeDash")]
    assert len(rules) == 1 and [len(p["layer"]) for p in panels] == [2, 2, 2, 3]      # the chosen value's rule too
    # a p99 class's focus is a panel already: no fifth, and its title keeps its unit
    panels = spec(recommend_charts.sweep_chart(points, "max_num_seqs", 16, {"ttft_p99_ms": 200.0}, None,
                                               ("ttft_p99_ms", "TTFT p99")))["hconcat"]
    assert [p["layer"][0]["encoding"]["y"]["title"] for p in panels] == ["TTFT p99 (ms)", "TPOT p99 (ms)",
                                                                         "output tok/s"]


def test_the_reservation_chart_draws_the_share_of_requests_cut():
    # its lower panel filtered a policy named "vllm", which no row has (they are vllm-v1, orca, …): it was empty
    from planner.charts import capacity as capacity_charts

    rows = [{"policy": p, "label": p, "max_new_tokens": m, "concurrency": 100.0 / m, "over_reservation": 1.0,
             "exceed_share": 1 / m} for p in ("vllm-v1", "orca") for m in (16, 64, 256)]
    chart = spec(capacity_charts.reservation_chart(rows))
    drawn = chart["datasets"][chart["vconcat"][1]["data"]["name"]]
    assert [r["exceed_share"] for r in drawn] == [1 / 16, 1 / 64, 1 / 256]


def test_the_memory_breakdown_is_a_banded_bar_of_the_whole_gpu():
    from planner.charts import capacity as capacity_charts

    plan = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")).memory
    chart = capacity_charts.breakdown_bar(plan).to_dict()
    # a band on a nominal axis, its thickness a step and the legend below: a fixed pixel height left Streamlit a
    # hairline of a bar and two of the six legend entries
    assert chart["encoding"]["y"]["type"] == "nominal" and "value" not in chart["encoding"]["y"]
    assert chart["height"] == {"step": 36} and chart["encoding"]["color"]["legend"]["orient"] == "bottom"
    rows = next(iter(chart["datasets"].values()))
    assert [r["part"] for r in rows] == ["weights", "activation", "non_torch", "cuda_graphs", "kv_cache",
                                         "outside_budget"]
    assert sum(r["gib"] for r in rows) == pytest.approx(plan.total_bytes / GiB)     # the six parts fill the GPU
