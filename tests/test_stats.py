import numpy as np
import pytest
from helpers import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.traces.ingest import ingest_file
from planner.workload.stats import PERCENTILES, trace_stats


def numpy_block(values) -> dict:
    arr = np.asarray(values, dtype=float)
    block = {"mean": arr.mean()}
    block.update({k: np.percentile(arr, q * 100) for k, q in PERCENTILES.items()})
    block["max"] = arr.max()
    return block


def dispersion(arrivals, width) -> float:
    t = np.asarray(arrivals) - min(arrivals)
    nbins = int(np.floor(t.max() / width))          # the bins the span fills whole: the last, partial one left out
    counts = np.bincount(np.floor(t / width).astype(int), minlength=nbins)[:nbins]
    return counts.var() / counts.mean()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(20, 400))
def test_stats_equal_numpy(con, tmp_path_factory, seed, n):
    rng = np.random.default_rng(seed)
    t = np.sort(np.round(rng.exponential(0.7, n).cumsum(), 3))
    inp = rng.integers(1, 5000, n)
    out = rng.integers(0, 900, n)  # zeros are failed requests, excluded from percentiles
    body = "".join(f"{a},{b},{c}\n" for a, b, c in zip(t, inp, out, strict=True))
    text = "arrival,input_tokens,output_tokens\n" + body
    path = write(tmp_path_factory.mktemp("s") / "t.csv", text)
    r = ingest_file(con, path)
    s = trace_stats(con, r.trace_id)
    ok = out > 0
    if ok.sum() == 0:
        return
    for key, values in (("input_tokens", inp[ok]), ("output_tokens", out[ok]), ("total_tokens", (inp + out)[ok])):
        expected = numpy_block(values)
        assert s[key] == pytest.approx(expected, rel=1e-9, abs=1e-9)
    # arrival statistics cover the requests that did not fail: the ones every replay scales
    served = t[ok]
    gaps = np.diff(served)
    arr = s["arrivals"]
    assert arr["span_s"] == pytest.approx(served[-1] - served[0])
    if ok.sum() > 1 and served[-1] > served[0]:
        assert arr["rate_rps"] == pytest.approx((ok.sum() - 1) / (served[-1] - served[0]))
    # and the offered load counts every request, failed ones too
    assert arr["offered_rate_rps"] == pytest.approx((n - 1) / (t[-1] - t[0])) if t[-1] > t[0] else \
        arr["offered_rate_rps"] is None
    if gaps.size and gaps.mean() > 0:
        assert arr["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean(), rel=1e-6)
    for label, width in (("1s", 1.0), ("10s", 10.0), ("60s", 60.0)):
        if np.floor((served[-1] - served[0]) / width) >= 2:
            assert arr["dispersion"][label] == pytest.approx(dispersion(served, width), rel=1e-6)
    assert s["failed"] == int((~ok).sum()) and s["rows"] == n


def test_poisson_dispersion_is_near_one_and_bursty_is_not(con, tmp_path):
    rng = np.random.default_rng(7)
    poisson = np.cumsum(rng.exponential(0.1, 20000))
    bursty = np.cumsum(rng.gamma(0.25, 0.4, 20000))  # CV 2
    for name, t in (("poisson", poisson), ("bursty", bursty)):
        text = "arrival,input_tokens,output_tokens\n" + "".join(f"{a:.6f},10,10\n" for a in t)
        r = ingest_file(con, write(tmp_path / f"{name}.csv", text))
        arr = trace_stats(con, r.trace_id)["arrivals"]
        if name == "poisson":
            assert arr["dispersion"]["1s"] == pytest.approx(1.0, abs=0.1)
            assert arr["interarrival_cv"] == pytest.approx(1.0, abs=0.05)
        else:
            assert arr["dispersion"]["1s"] > 2.5 and arr["interarrival_cv"] == pytest.approx(2.0, abs=0.2)


def test_trace_without_times_has_no_arrivals(con, tmp_path):
    r = ingest_file(con, write(tmp_path / "l.csv", "input_tokens,output_tokens\n1,2\n3,4\n"))
    s = trace_stats(con, r.trace_id)
    assert s["arrivals"] is None and s["input_tokens"]["p50"] == 2.0


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.one_of(st.integers(0, 30), st.floats(-1e6, 1e6, allow_nan=False)), min_size=1,
                       max_size=60),
       groups=st.integers(1, 3), repeat=st.integers(1, 4))
def test_percentiles_from_counts_equal_numpys_of_every_value(values, groups, repeat):
    """percentile_blocks never holds every value: it counts each distinct one and walks a running sum. Its blocks
    are numpy's for each group, ties and a single value included, whether the rows are values or (value, count)
    pairs."""
    import duckdb

    from planner.workload.stats import percentile_blocks

    con = duckdb.connect()
    rows = [(i % groups, float(v)) for i, v in enumerate(values)]
    con.execute("CREATE TABLE t (g INTEGER, v DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows * repeat)
    con.execute("CREATE TABLE c AS SELECT g, v, count(*) AS n FROM t GROUP BY ALL")
    for table, weight in (("t", None), ("c", "n")):
        blocks = percentile_blocks(con, table, "v", key="g", weight=weight)
        assert sorted(blocks) == sorted({g for g, _ in rows})
        for g, block in blocks.items():
            expected = numpy_block([v for h, v in rows if h == g] * repeat)
            assert block.pop("n") == repeat * sum(1 for h, _ in rows if h == g)
            assert block == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_dispersion_counts_whole_bins_only(con, tmp_path):
    # one request a second for 60 s: every whole bin holds as many, so the counts do not vary. The partial bin the
    # last arrival opens (t = 60 s alone in [60, 70)) made this read overdispersed: 1.14 at 10 s, 28.5 at 60 s
    body = "".join(f"{t},10,10\n" for t in range(61))
    r = ingest_file(con, write(tmp_path / "regular.csv", "arrival,input_tokens,output_tokens\n" + body))
    dispersion_ = trace_stats(con, r.trace_id)["arrivals"]["dispersion"]
    assert dispersion_ == {"1s": 0.0, "10s": 0.0, "60s": None}        # one whole minute: no variance to take
