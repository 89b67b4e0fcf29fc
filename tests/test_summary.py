"""The summary path: summary.sql run unchanged by DuckDB (always) and by a local Spark session (marker ``spark``),
its output ingested with ``ingest --summary``, and every statistic, fit and replay that can work from a summary
agreeing with the same trace ingested request by request."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.samples import SAMPLE_PATH
from planner.traces.summary import ingest_summary, summary_statements, summary_table
from planner.workload.fits import fit_report
from planner.workload.replay import from_trace
from planner.workload.stats import trace_stats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The bundled sample stored request by request, and its canonical columns as a Parquet file (the `requests`
    a warehouse would expose)."""
    tmp = tmp_path_factory.mktemp("summary")
    con = store.open_store(tmp / "store.duckdb")
    info = ingest_file(con, SAMPLE_PATH, name="sample")
    canonical = tmp / "requests.parquet"
    con.execute(f"COPY (SELECT arrival AS arrival_s, input_tokens, output_tokens, ttft_ms, tpot_ms, e2e_ms, failed "
                f"FROM {store.requests_view(info.trace_id)}) TO '{canonical}' (FORMAT parquet)")
    return con, info, canonical, tmp


def _duckdb_summary(canonical: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW requests AS SELECT * FROM read_parquet('{canonical}')")
    for name, sql in summary_statements().items():
        con.execute(f"COPY ({sql}) TO '{out / (name + '.parquet')}' (FORMAT parquet)")
    return out


def test_the_summary_sql_has_the_four_tables_in_portable_sql():
    statements = summary_statements()
    assert list(statements) == ["length_counts", "arrival_counts", "arrival_span", "latency_histograms"]
    text = " ".join(statements.values()).upper()
    for engine_specific in ("FILTER (", "QUANTILE", "::", "LIST_", "EPOCH("):
        assert engine_specific not in text


def test_a_summary_gives_the_statistics_the_requests_give(sample):
    con, info, canonical, tmp = sample
    summary = ingest_summary(con, _duckdb_summary(canonical, tmp / "duck"), name="sample-summary")
    assert summary.layout == "summary" and summary.files == 4
    full, brief = trace_stats(con, info.trace_id), trace_stats(con, summary.trace_id)
    non_failed = info.rows - info.failed
    assert brief["rows"] == non_failed
    for fld in ("input_tokens", "output_tokens"):
        assert brief[fld] == pytest.approx(full[fld], rel=1e-12)          # exact: the same counts
    assert brief["total_tokens"] is None and "interarrival_cv" in " ".join(brief["not_in_summary"])
    a, b = full["arrivals"], brief["arrivals"]
    assert b["span_s"] == pytest.approx(a["span_s"], rel=1e-12)
    assert b["rate_rps"] == pytest.approx(a["rate_rps"], rel=1e-12)
    assert b["dispersion"] == pytest.approx(a["dispersion"], rel=1e-9)      # bins aligned on the first arrival
    assert b["interarrival_cv"] is None
    # latencies from log2 histograms: within half a bin (4.4%) of the exact percentiles
    hist = brief["latency_ms_from_histograms"]
    for metric in ("ttft", "tpot"):
        for q in ("p50", "p90", "p99"):
            assert hist[metric][q] == pytest.approx(full["latency_ms"][metric][q], rel=hist["relative_error"] + 0.01)


def test_fits_and_replays_work_from_a_summary(sample):
    con, info, canonical, tmp = sample
    summary = ingest_summary(con, _duckdb_summary(canonical, tmp / "duck2"), name="fit-summary")
    for fld in ("input_tokens", "output_tokens"):
        assert fit_report(con, summary.trace_id, fld)["candidates"] == fit_report(con, info.trace_id, fld)["candidates"]
    with pytest.raises(PlannerError, match="counts arrivals per second, not the gaps"):
        fit_report(con, summary.trace_id, "interarrival")
    work = from_trace(con, summary.trace_id)
    counts = con.execute(f"SELECT arrival_second, requests FROM {summary_table(summary.trace_id, 'arrival_counts')} "
                         "ORDER BY 1").fetchall()
    assert work.n == sum(c for _, c in counts) == summary.rows
    # each minute holds the requests the summary counted there, but for those of the seconds at its ends (the
    # replay's times run from its first arrival, a fraction of a second into second 0)
    seconds = np.array([s for s, _ in counts])
    per_s = np.array([c for _, c in counts])
    expected = np.bincount(seconds // 60, weights=per_s)
    got = np.bincount(np.floor(work.arrival_s / 60).astype(int), minlength=expected.size)[:expected.size]
    assert np.all(np.abs(got - expected) <= 2 * per_s.max())
    assert np.ptp(work.arrival_s) == pytest.approx(seconds.max(), abs=1.0)
    assert from_trace(con, summary.trace_id, qps=2.0).n == work.n
    assert work.input_tokens.min() >= 1 and work.output_tokens.min() >= 1


def test_identical_summary_files_are_stored_once_and_bad_ones_not_at_all(sample):
    con, _, canonical, tmp = sample
    folder = _duckdb_summary(canonical, tmp / "duck3")
    first = ingest_summary(con, folder)
    assert ingest_summary(con, folder).duplicate_of == first.trace_id
    bad = tmp / "bad"
    shutil.copytree(folder, bad)
    duckdb.connect().execute(f"COPY (SELECT 'input_tokens' AS field, -5 AS tokens, 3 AS requests) TO "
                             f"'{bad / 'length_counts.parquet'}' (FORMAT parquet)")
    before = len(store.list_traces(con))
    with pytest.raises(PlannerError, match=r"length_counts: the row .*tokens': -5.* is not valid"):
        ingest_summary(con, bad)
    (bad / "length_counts.parquet").unlink()
    with pytest.raises(PlannerError, match="no length_counts table"):
        ingest_summary(con, bad)
    assert len(store.list_traces(con)) == before


def test_the_cli_ingests_a_summary_folder(sample, tmp_path):
    _, _, canonical, tmp = sample
    folder = _duckdb_summary(canonical, tmp / "duck4")
    db = tmp_path / "cli.duckdb"
    run = lambda *a: subprocess.run([sys.executable, "-m", "planner", *a, "--db", str(db), "--json"],  # noqa: E731
                                    cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = run("ingest", "--summary", str(folder), "--name", "s")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["layout"] == "summary"
    stats = json.loads(run("stats", "s").stdout)
    assert stats["summary"] and stats["input_tokens"]["p50"] > 0
    # the per-request tables are refused by name (the missing requests table had surfaced as a catalog error)
    workload = run("workload", "s")
    assert workload.returncode == 2 and workload.stderr.startswith("error: trace 's' is a summary: the workload")
    neither = run("ingest")
    assert neither.returncode != 0 and "expected a trace PATH or --summary FOLDER" in neither.stderr


@pytest.mark.spark
def test_spark_runs_the_same_sql_and_its_output_ingests_as_the_same_summary(sample):
    pyspark = pytest.importorskip("pyspark.sql")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("SPARK_REQUIRED"):
            pytest.fail("SPARK_REQUIRED is set but no Java runtime is installed (default-jre-headless)")
        pytest.skip("no Java runtime for Spark (CI installs Debian's default-jre-headless)")
    con, _, canonical, tmp = sample
    spark = (pyspark.SparkSession.builder.master("local[2]").appName("planner-summary")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "1g").getOrCreate())
    try:
        spark.read.parquet(str(canonical)).createOrReplaceTempView("requests")
        out = tmp / "spark"
        for name, sql in summary_statements().items():
            spark.sql(sql).write.mode("overwrite").parquet(str(out / name))     # a folder of parts + _SUCCESS
    finally:
        spark.stop()
    assert (out / "length_counts" / "_SUCCESS").exists()
    from_spark = ingest_summary(con, out, name="from-spark")
    from_duckdb = ingest_summary(con, _duckdb_summary(canonical, tmp / "duck5"), name="from-duckdb")
    for table in ("length_counts", "arrival_counts", "arrival_span", "latency_histograms"):
        rows = [con.execute(f"SELECT * FROM {summary_table(t.trace_id, table)} ORDER BY ALL").fetchall()
                for t in (from_spark, from_duckdb)]
        assert rows[0] == rows[1], table
    assert trace_stats(con, from_spark.trace_id) | {"trace_id": 0, "name": 0} == \
        trace_stats(con, from_duckdb.trace_id) | {"trace_id": 0, "name": 0}
