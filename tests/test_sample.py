"""The bundled sample is what its seeded generator produces, and has the shape the issue asks for."""

import importlib.util

import numpy as np
from helpers import ROOT

from planner.traces.ingest import ingest_file
from planner.traces.samples import SAMPLE_PATH, ensure_sample
from planner.workload.stats import trace_stats


def load_generator():
    spec = importlib.util.spec_from_file_location("generate_sample", ROOT / "traces" / "generate_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_is_reproducible_from_its_seed():
    gen = load_generator()
    assert gen.generate() == SAMPLE_PATH.read_bytes()
    assert gen.generate(seed=1) != SAMPLE_PATH.read_bytes()


def test_sample_shape(con):
    result = ensure_sample(con)
    assert result.rows >= 5000 and result.rejected == 0
    assert 0 < result.failed < 0.02 * result.rows
    s = trace_stats(con, result.trace_id)
    arr = s["arrivals"]
    assert arr["span_s"] >= 3600
    assert arr["interarrival_cv"] > 1.5 and arr["dispersion"]["60s"] > 5  # bursty
    for key in ("input_tokens", "output_tokens"):
        block = s[key]
        assert block["mean"] > 1.3 * block["p50"]  # right-skewed, heavy tail
        assert block["p99"] > 6 * block["p50"]
    assert set(s["latency_ms"]) == {"ttft", "tpot", "e2e"}
    assert ensure_sample(con).duplicate_of == result.trace_id


def test_sample_inputs_show_the_context_cap(con):
    result = ingest_file(con, SAMPLE_PATH)
    at_cap = con.execute(f"SELECT count(*) FROM requests_{result.trace_id} WHERE input_tokens = 7936").fetchall()
    assert at_cap[0][0] > 10
    assert np.isfinite(trace_stats(con, result.trace_id)["input_tokens"]["mean"])
