"""Workload tables on the bundled sample: grouped percentiles, joint view and latency buckets against numpy."""

import numpy as np
import polars as pl
import pytest
from helpers import cli_json, run_cli
from scipy import stats as sstats

from planner.traces import store
from planner.traces.queries import arrival_times, length_counts
from planner.traces.samples import SAMPLE_PATH, ensure_sample
from planner.workload.fitting.arrivals import dispersion_curve
from planner.workload.stats import PERCENTILES, arrival_stats
from planner.workload.tables import (
    bucket_labels,
    default_window_s,
    grouped_percentiles,
    joint_histogram,
    latency_buckets,
    spearman,
    workload_report,
)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    con = store.open_store(tmp_path_factory.mktemp("w") / "w.duckdb")
    trace_id = ensure_sample(con).trace_id
    frame = con.sql(f"SELECT * FROM {store.requests_view(trace_id)}").pl()
    yield con, trace_id, frame
    con.close()


def ok(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(~pl.col("failed"))


def test_length_counts_conserve_requests(sample):
    con, tid, frame = sample
    x, w = length_counts(con, tid, "total_tokens")
    assert w.sum() == ok(frame).height
    assert np.all(np.diff(x) > 0)
    assert float(np.dot(x, w)) == (ok(frame)["input_tokens"] + ok(frame)["output_tokens"]).sum()


def test_per_model_percentiles_equal_numpy(sample):
    con, tid, frame = sample
    rows = grouped_percentiles(con, tid, "model")
    assert {r["group"] for r in rows} == set(frame["model"].unique())
    for r in rows:
        part = ok(frame).filter(pl.col("model") == r["group"])
        values = (part["input_tokens"] + part["output_tokens"] if r["field"] == "total_tokens"
                  else part[r["field"]]).to_numpy()
        assert r["n"] == values.size and r["max"] == values.max()
        for key, q in PERCENTILES.items():
            assert r[key] == pytest.approx(np.percentile(values, q * 100), rel=1e-12)


def test_per_window_percentiles_cover_every_request_once(sample):
    con, tid, frame = sample
    rows = [r for r in grouped_percentiles(con, tid, "window", 600.0) if r["field"] == "output_tokens"]
    assert [r["group"] for r in rows] == [600.0 * i for i in range(len(rows))]
    assert sum(r["n"] for r in rows) == ok(frame).height
    last = ok(frame).filter(pl.col("arrival") >= rows[-1]["group"])["output_tokens"].to_numpy()
    assert rows[-1]["p99"] == pytest.approx(np.percentile(last, 99))


def test_default_window_gives_6_to_24_windows():
    for span in (100.0, 5400.0, 86400.0, 7 * 86400.0, 121 * 86400.0):
        assert span / default_window_s(span) <= 24
    assert 6 <= 5400.0 / default_window_s(5400.0) <= 24


def test_spearman_equals_scipy_with_ties(sample):
    con, tid, frame = sample
    part = ok(frame)
    expected = sstats.spearmanr(part["input_tokens"].to_numpy(), part["output_tokens"].to_numpy()).statistic
    assert spearman(con, tid) == pytest.approx(expected, abs=1e-9)


def test_joint_histogram_conserves_requests_and_bins_correctly(sample):
    con, tid, frame = sample
    rows = joint_histogram(con, tid)
    assert sum(r["count"] for r in rows) == ok(frame).height
    part = ok(frame)
    for r in rows[:20]:
        inside = part.filter((pl.col("input_tokens") >= r["input_lo"]) & (pl.col("input_tokens") < r["input_hi"])
                             & (pl.col("output_tokens") >= r["output_lo"])
                             & (pl.col("output_tokens") < r["output_hi"]))
        assert inside.height == r["count"]


def test_bucket_labels():
    assert [lbl for lbl, _, _ in bucket_labels((512, 2048))] == ["0–512", "512–2048", "2048+"]
    assert [lbl for lbl, _, _ in bucket_labels((2048, 512, 512))] == ["0–512", "512–2048", "2048+"]


def test_latency_buckets_equal_numpy_and_name_the_driver(sample):
    con, tid, frame = sample
    result = latency_buckets(con, tid, "ttft_ms", "input_tokens", (512, 2048))
    part = ok(frame).filter(pl.col("ttft_ms").is_not_null())
    ttft, inp = part["ttft_ms"].to_numpy(), part["input_tokens"].to_numpy()
    p99 = np.percentile(ttft, 99)
    assert result.overall_p99 == pytest.approx(p99)
    assert sum(r["n"] for r in result.rows) == ttft.size
    assert sum(r["tail_count"] for r in result.rows) == int((ttft > p99).sum())
    for r in result.rows:
        mask = (inp >= r["lo"]) & (inp < r["hi"])
        assert r["n"] == mask.sum()
        assert r["p99"] == pytest.approx(np.percentile(ttft[mask], 99))
        assert r["tail_lift"] == pytest.approx(r["tail_share"] / r["share"])
    # prefill time grows with the prompt: the longest prompts are over-represented above the p99
    assert result.driver == "2048+"
    assert result.rows[-1]["tail_lift"] > 3


def test_latency_buckets_are_none_without_latencies(tmp_path):
    con = store.open_store(tmp_path / "n.duckdb")
    from planner.traces.ingest import ingest_file
    path = tmp_path / "t.csv"
    path.write_text("input_tokens,output_tokens\n10,5\n20,6\n")
    tid = ingest_file(con, path).trace_id
    assert latency_buckets(con, tid, "ttft_ms", "input_tokens") is None


def test_sql_dispersion_equals_the_numpy_curve(sample):
    con, tid, _ = sample
    sql = arrival_stats(con, tid, None)["dispersion"]
    curve = {p["bin_s"]: p["vmr"] for p in dispersion_curve(arrival_times(con, tid))}
    for label, width in (("1s", 1.0), ("10s", 10.0), ("60s", 60.0)):
        assert sql[label] == pytest.approx(curve[width], rel=1e-9)


def test_workload_cli_equals_the_library(sample, tmp_path):
    db = tmp_path / "cli.duckdb"
    tid = cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)["trace_id"]
    obj = cli_json("workload", tid, "--window", "600", "--buckets", "256,1024", db=db)
    con = store.open_store(db)
    expected = workload_report(con, tid, window_s=600.0, edges=(256.0, 1024.0))
    con.close()
    assert obj["per_window"] == expected["per_window"]     # JSON round-trips floats exactly
    assert obj["spearman_input_output"] == pytest.approx(expected["spearman_input_output"])
    buckets = obj["latency_buckets"]["ttft_ms"]["input_tokens"]["buckets"]
    assert [b["bucket"] for b in buckets] == ["0–256", "256–1024", "1024+"]
    assert obj["arrivals"]["peaks"]["peak_rate_rps"] == pytest.approx(expected["arrivals"]["peaks"]["peak_rate_rps"])
    bad = run_cli("workload", tid, "--buckets", "a,b", db=db, check=False)
    assert bad.returncode != 0 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
