"""Hostile input through the real CLI (``planner.cli.main.main``, in this process for speed; subprocesses where a
signal or a whole interpreter matters): every bad value is one ``error:`` line and exit 2 before any work, never the
generic handler, and the store is left exactly as it was; the data cases of the issue, each as a test."""

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest
from helpers import ROOT, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli.main import main
from planner.traces import content_hash, store
from planner.traces.ingest import ingest_file

MODEL = ["--model", "llama-3-8b", "--gpu", "a100-80gb-sxm"]
CONFIG = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
          "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
HOSTILE_NUMBERS = ["nan", "NaN", "inf", "-inf", "1e309", "-1", "-0.5", "0", "abc", "", "1,5", "0x10", "--"]
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def own_default_store(tmp_path_factory, monkeypatch):
    """Commands run without --db use a store of the test's, never the user's."""
    monkeypatch.setenv("PLANNER_DB", str(tmp_path_factory.mktemp("default") / "default.duckdb"))


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """A store holding one small timed trace with latencies (``t``)."""
    path = tmp_path_factory.mktemp("hostile") / "store.duckdb"
    rows = "".join(f"{i * 0.25},{100 + i % 50},{20 + i % 7},{30 + i % 5},{8 + i % 3}\n" for i in range(400))
    trace = write(path.parent / "t.csv", "timestamp,input_tokens,output_tokens,ttft_ms,tpot_ms\n" + rows)
    con = store.open_store(path)
    ingest_file(con, trace, name="t")
    con.close()
    return path


def snapshot(db: Path) -> tuple:
    """What a failed command must leave as it was: traces, rejects, reports."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return tuple(con.execute(q).fetchall() for q in (
            "SELECT trace_id, name, rows, rejected FROM traces ORDER BY trace_id",
            "SELECT count(*) FROM rejects", "SELECT count(*) FROM reports"))
    finally:
        con.close()


def refused(capsys, *argv: str, db: Path | None = None) -> str:
    """Run the CLI; assert exit 2 with exactly one ``error:`` line on stderr, nothing generic; return the line."""
    before = snapshot(db) if db else None
    capsys.readouterr()
    try:
        code = main([*argv, *(["--db", str(db)] if db else [])])
    except SystemExit as exc:       # argparse refuses a malformed value itself, as `python -m planner` exits
        code = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("[")]
    assert code == 2, (argv, err)
    assert len(err) == 1 and err[0].startswith("error: "), (argv, err)
    assert "PLANNER_DEBUG" not in err[0], err[0]
    if db:
        assert snapshot(db) == before, argv
    return err[0]


# -- property-based: every hostile value of every kind -----------------------------------------------------------

NUMERIC_FLAGS = [
    (["simulate", "--trace", "t", *MODEL], "--qps"),
    (["simulate", "--trace", "t", *MODEL], "--rate-scale"),
    (["simulate", "--trace", "t", *MODEL], "--slo-ttft-ms"),
    (["simulate", "--trace", "t", *MODEL], "--replicas"),
    (["simulate", "--trace", "t", *MODEL, "--fitted", "--qps", "1"], "--requests"),
    (["step", *MODEL, "--prefill", "512"], "--tp"),
    (["step", *MODEL, "--prefill", "512"], "--gpu-mem-util"),
    (["memory", *MODEL], "--activation-gib"),
    (["memory", *MODEL], "--gpu-memory-gib"),
    (["memory", *MODEL], "--price"),
    (["memory", *MODEL], "--num-gpu-blocks"),
    (["workload", "t"], "--window"),
    (["fit", "t", "--field", "input_tokens"], "--cap"),
    (["recommend", "t", *MODEL, "--workers", "1", "--quiet"], "--headroom"),
    (["recommend", "t", *MODEL, "--workers", "1", "--quiet"], "--max-queue-s"),
    (["recommend", "t", *MODEL, "--workers", "1", "--quiet"], "--growth"),
    (["recommend", "t", *MODEL, "--quiet"], "--workers"),
]


@FAST
@given(case=st.sampled_from(NUMERIC_FLAGS),
       value=st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.floats(max_value=0).map(repr),
                       st.floats(min_value=1e300, allow_infinity=True).map(repr)))
def test_a_hostile_number_for_any_flag_is_refused_by_name(capsys, db, case, value):
    argv, flag = case
    number = _float(value)
    if flag in ("--price", "--activation-gib") and number == 0:
        return                  # a free GPU, no activation memory: values, not nonsense
    if flag in LARGE_IS_VALID and number > 1e6:
        return                  # a loose SLO, a wide window, a high cap or price: values, not nonsense
    line = refused(capsys, *argv, f"{flag}={value}", db=db)
    assert flag in line or "qps" in line


LARGE_IS_VALID = {"--slo-ttft-ms", "--window", "--cap", "--price", "--max-queue-s"}


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


INTEGER_FIELDS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                  "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim"]


@FAST
@given(field=st.sampled_from(INTEGER_FIELDS),
       value=st.one_of(st.integers(max_value=0), st.integers(min_value=2**40), st.text(max_size=5),
                       st.booleans(), st.floats().filter(lambda x: not (math.isfinite(x) and x == int(x))),
                       st.lists(st.integers(1, 9), max_size=2)))
def test_a_config_json_field_of_the_wrong_type_or_range_is_refused(capsys, field, value):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps({**CONFIG, field: value}))
        line = refused(capsys, "memory", "--model", str(path), "--gpu", "a100-80gb-sxm")
    assert field in line or "lacks" in line


def _bad_cost_value(name: str):
    fraction = name in ("mfu", "mbu", "link_efficiency")
    numbers = st.floats(max_value=0) | st.floats(min_value=1.0001, allow_infinity=True) if fraction \
        else st.floats(max_value=-1e-9) | st.just(float("inf"))
    bad = numbers | st.just(float("nan")) | st.text(max_size=4) | st.lists(st.integers(), max_size=2)
    # null MFU, MBU or link efficiency is the GPU's default (what a file without them gets), not an error
    return bad if name in ("mfu", "mbu", "link_efficiency") else bad | st.none()


COST_PARAMS = ["mfu", "mbu", "link_efficiency", "step_overhead_s", "seq_overhead_s", "frontend_s",
               "piecewise_layer_s"]


@FAST
@given(data=st.data(), name=st.sampled_from(COST_PARAMS))
def test_a_calibration_file_with_a_bad_parameter_is_refused(capsys, data, name):
    value = data.draw(_bad_cost_value(name))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.json"
        path.write_text(json.dumps({"params": {name: value}}, allow_nan=True))
        line = refused(capsys, "step", *MODEL, "--prefill", "512", "--calibration", str(path))
    assert name in line or "calibrat" in line


SPEC_VALUES = {"requests": ["0", "-5", "1.5", "nan", "1e12", "x", str(10**8)],
               "input": ["-3", "0", "lognormal:nan:1", "lognormal:1:-1", "uniform:5:2", "uniform:0:3", "x", "",
                         str(2**40)],
               "output": ["0", "lognormal:inf:1", "uniform:1", "1.5"],
               "qps": ["nan", "0", "-1", "-inf", "1e-300", "1e300", "x"],
               "arrival": ["gamma:nan", "gamma:0", "gamma:-1", "gamma:1e300", "weibull", "gamma:"],
               "seed": ["-1", "1.5", "x"], "prefix": ["abc", "100:nan", "-5", "100:2"]}


@FAST
@given(data=st.data(), key=st.sampled_from(sorted(SPEC_VALUES)))
def test_a_synthetic_spec_with_a_bad_value_is_refused(capsys, data, key):
    spec = {"requests": "20", "input": "64", "output": "8", "qps": "4"}
    spec[key] = data.draw(st.sampled_from(SPEC_VALUES[key]))
    refused(capsys, "simulate", *MODEL, "--synthetic", ",".join(f"{k}={v}" for k, v in spec.items()))


@FAST
@given(slo=st.one_of(
    st.sampled_from(["chat:ttft_p99<0", "chat:ttft_p99<-5", "chat:ttft_p99<1.2.3", "chat:ttft_p0<100",
                     "chat:ttft_p101<100", "chat:ttft_p999<100", "chat:ttft<0,tpot<50@90%", "chat:ttft<200@0%",
                     "chat:ttft<200@100%", ":ttft_p99<5", "chat", "chat:", "chat:ttft_p99<", "chat:ttft_p99<inf"]),
    st.builds(lambda m, p, v: f"x:{m}_p{p}<{v}", st.sampled_from(["ttft", "tpot", "e2e"]),
              st.sampled_from(["0", "100.5", "1000", "-1"]), st.sampled_from(["0", "0.0", "00"]))))
def test_a_malformed_or_impossible_slo_is_refused(capsys, db, slo):
    assert "--slo" in refused(capsys, "recommend", "t", *MODEL, "--workers", "1", "--quiet", "--slo", slo, db=db)


@FAST
@given(spec=st.sampled_from(["512@-1000000", "-512", "512x0", "512x-1", "0", "x", "512@x", "512x99999999",
                             "512@99999999999"]), kind=st.just("--prefill"))
def test_a_step_spec_that_names_no_real_step_is_refused(capsys, spec, kind):
    refused(capsys, "step", *MODEL, f"{kind}={spec}")


# -- the issue's cases, one by one ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["step", "--tp", "0", *MODEL, "--prefill", "512"],
    ["workload", "t", "--window", "nan"],
    ["workload", "t", "--buckets", "2048,512"],
    ["workload", "t", "--buckets", ""],              # not the defaults: an empty list the user typed
    ["recommend", "t", *MODEL, "--max-new-tokens-options", "-5", "--quiet"],
    ["recommend", "t", *MODEL, "--headroom", "0", "--quiet"],
    ["recommend", "t", *MODEL, "--gpu-options", "h100-sxm=-2", "--quiet"],
    ["recommend", "t", *MODEL, "--gpu-options", "", "--quiet"],
    ["recommend", "t", *MODEL, "--ray", "127.0.0.1:9", "--quiet"],
    ["memory", *MODEL, "--price", "-1"],
    ["simulate", "--trace", "t", *MODEL, "--qps", "0"],
    ["simulate", "--trace", "t", *MODEL, "--rate-scale", "nan"],
    ["simulate", *MODEL, "--synthetic", "requests=10,input=10,output=10,qps=nan"],
    ["ingest", "/dev/null"],
    ["ingest", "/nonexistent/zz-*.csv"],
    ["ingest", "/nonexistent/trace.csv", "--name", " "],
])
def test_the_issues_cases_are_refused(capsys, db, argv):
    refused(capsys, *argv, db=db)


@pytest.mark.parametrize("change, named", [({"hidden_size": -4096}, "hidden_size"),
                                           ({"num_attention_heads": 0}, "num_attention_heads"),
                                           ({"num_key_value_heads": 5}, "num_key_value_heads"),
                                           ({"tie_word_embeddings": "false"}, "tie_word_embeddings")])
def test_config_json_nonsense_is_refused(capsys, tmp_path, change, named):
    path = write(tmp_path / "config.json", json.dumps({**CONFIG, **change}))
    assert named in refused(capsys, "memory", "--model", str(path), "--gpu", "a100-80gb-sxm")


@pytest.mark.parametrize("params", [{"step_overhead_s": -1}, {"mfu": "fast"}, {"mfu": 0}, {"bogus": 1},
                                    # hand edits past what any server measures: a 10 s step, a GPU at 1e-9 of
                                    # its peak, a 1 s all-reduce, a second per sequence
                                    {"step_overhead_s": 10}, {"mfu": 1e-9}, {"allreduce_latency_s": 1.0},
                                    {"seq_overhead_s": 1}])
def test_calibration_nonsense_is_refused(capsys, tmp_path, params):
    path = write(tmp_path / "c.json", json.dumps({"params": params}))
    line = refused(capsys, "simulate", "--synthetic", "requests=5,input=8,output=2,qps=1", *MODEL,
                   "--calibration", str(path))
    assert next(iter(params)) in line and "__init__" not in line


@pytest.mark.parametrize("body, named", [
    ({"fitted": ["mfu", "mbu"], "params": {"mfu": 0.5}}, "'fitted' names mbu, which 'params' does not give"),
    ([{"params": {"mfu": 0.5}}], "expected a JSON object whose 'params' is an object"),
    ({"params": [0.5]}, "expected a JSON object whose 'params' is an object")])
def test_a_calibration_file_that_is_not_one_fit_is_refused(capsys, tmp_path, body, named):
    path = write(tmp_path / "c.json", json.dumps(body))
    line = refused(capsys, "step", *MODEL, "--decode", "8x1024", "--calibration", str(path))
    assert named in line and "list indices" not in line


def test_a_calibration_file_saved_with_a_byte_order_mark_reads():
    from planner.sim.calibration_file import params_from_json

    text = json.dumps({"fitted": ["mfu"], "params": {"mfu": 0.5}})
    assert params_from_json("\ufeff" + text, "c.json") == params_from_json(text, "c.json")


@pytest.mark.parametrize("row, named", [("-512,1,0,0,20", "a negative, fractional or non-finite count"),
                                        ("512,1,0,0,nan", "a step_ms that is not a positive number"),
                                        ("512,1,0,0,0", "a step_ms that is not a positive number"),
                                        ("0,0,0,0,20", "no tokens"),
                                        ("512,0,4,100,20", "prefill tokens without a prefill count")])
def test_points_with_nonsense_rows_are_refused_naming_the_line(capsys, tmp_path, row, named):
    path = write(tmp_path / "p.csv", "prefill_tokens,prefill_count,decode_count,decode_context,step_ms\n"
                 + "512,1,0,0,20\n" * 6 + row + "\n")
    out = tmp_path / "c.json"
    line = refused(capsys, "calibrate", *MODEL, "--points", str(path), "-o", str(out))
    assert f"line 8 holds {named}" in line, line
    assert not out.exists()


def test_blank_lines_in_points_are_no_rows_and_move_no_line_number(capsys, tmp_path):
    from planner.sim.calibration import read_points

    header = "prefill_tokens,prefill_count,decode_count,decode_context,step_ms\n"
    rows = "512,1,0,0,20\n1024,1,0,0,38\n0,0,8,512,20\n0,0,32,1024,24\n"
    assert read_points(write(tmp_path / "p.csv", header + rows + "\n")).equals(
        read_points(write(tmp_path / "q.csv", header + rows)))
    path = write(tmp_path / "b.csv", header + "512,1,0,0,20\n\n512,1,0,0,-3\n")
    line = refused(capsys, "calibrate", *MODEL, "--points", str(path), "-o", str(tmp_path / "c.json"))
    assert "line 4 holds a step_ms that is not a positive number" in line, line


def test_a_step_on_a_server_that_would_not_start_is_timed_and_said_never_to_run(capsys):
    assert main(["step", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--decode", "8x1024", "--json"]) in (0, None)
    out, err = capsys.readouterr()
    assert json.loads(out)["step_ms"] > 0
    assert err.splitlines() == ["warning: llama-3-70b on 1x H100 80GB SXM5: no memory left for the KV cache (-64.4 "
                                "GiB); raise --tp or --gpu-mem-util, or use --weight-dtype fp8: vLLM would not start, "
                                "so this step's time is its kernels' alone"]


@pytest.mark.parametrize("argv, named", [
    ([*MODEL, "--engine", "vllm-v0", "--async-scheduling"], "--async-scheduling is a setting of vLLM V1's scheduler, "
                                                             "not of vllm-v0"),
    ([*MODEL, "--engine", "tgi", "--no-async-scheduling"], "--no-async-scheduling is a setting of vLLM V1's")])
def test_async_scheduling_flags_are_refused_off_vllm_v1(capsys, argv, named):
    assert named in refused(capsys, "step", *argv, "--decode", "8x1024")


def test_a_vllm_release_that_does_not_run_the_engine_is_refused(capsys):
    assert "--vllm-version current: V1 0.20 and later (CUDA graphs subtracted) runs vllm-v1, not --engine vllm-v0" \
        in refused(capsys, "memory", *MODEL, "--engine", "vllm-v0", "--vllm-version", "current")
    assert main(["memory", *MODEL, "--engine", "vllm-v0", "--json"]) in (0, None)
    assert json.loads(capsys.readouterr().out)["vllm_version"] == "0.6"


@pytest.mark.parametrize("spelling", ["same", "dotdot", "symlink"])
def test_calibrate_refuses_to_write_over_its_points_file(capsys, tmp_path, spelling):
    rows = "prefill_tokens,prefill_count,decode_count,decode_context,step_ms\n" + "512,1,0,0,20\n" * 6
    (tmp_path / "d").mkdir()
    path = write(tmp_path / "d" / "p.csv", rows)
    (tmp_path / "link").symlink_to(tmp_path / "d")
    out = {"same": path, "dotdot": tmp_path / "d" / ".." / "d" / "p.csv", "symlink": tmp_path / "link" / "p.csv"}
    line = refused(capsys, "calibrate", *MODEL, "--points", str(path), "-o", str(out[spelling]))
    assert "is the --points file" in line, line
    assert path.read_text() == rows


@pytest.mark.parametrize("target", ["dir", "missing", "proc"])
def test_an_unwritable_report_path_fails_before_any_work_and_saves_nothing(capsys, db, tmp_path, target):
    path = {"dir": tmp_path, "missing": tmp_path / "no" / "such" / "r.html", "proc": Path("/proc/r.html")}[target]
    started = time.perf_counter()
    refused(capsys, "report", "t", *MODEL, "--quiet", "-o", str(path), db=db)
    assert time.perf_counter() - started < 10          # refused up front, not after the search
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("flag_argv", [["calibrate", *MODEL, "--trace", "t"], ["rejects", "t"]])
def test_other_outputs_in_missing_folders_are_refused(capsys, db, tmp_path, flag_argv):
    line = refused(capsys, *flag_argv, "-o", str(tmp_path / "none" / "x.out"), db=db)
    assert "does not exist" in line and not (tmp_path / "none").exists()


def test_a_store_another_process_holds_is_named_as_such(capsys, tmp_path):
    # a running app holds its store for its life: the CLI said "expected a DuckDB 2.x file", which it was
    db = tmp_path / "held.duckdb"
    store.open_store(db).close()
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(db)!r}); "
                               "print('open', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        line = refused(capsys, "traces", "--json", "--db", str(db))
        assert f"the trace store {db} is open in another process" in line
        assert line.endswith("expected it closed, or another --db for this command")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("kind", ["csv", "parquet", "text"])
def test_db_must_be_a_duckdb_store_or_a_new_path(capsys, tmp_path, kind):
    target = tmp_path / f"not-a-store.{kind}"
    if kind == "parquet":
        duckdb.sql(f"COPY (SELECT 1 AS input_tokens, 2 AS output_tokens) TO '{target}' (FORMAT parquet)")
    else:
        target.write_text("input_tokens,output_tokens\n1,2\n" if kind == "csv" else "hello\n")
    before = target.read_bytes()
    trace = write(tmp_path / "t.csv", "input_tokens,output_tokens\n5,6\n7,8\n")
    assert "not a DuckDB database" in refused(capsys, "ingest", str(trace), "--db", str(target))
    assert target.read_bytes() == before
    new = tmp_path / "fresh.duckdb"
    assert main(["ingest", str(trace), "--db", str(new), "--quiet"]) == 0 and new.exists()


@pytest.mark.parametrize("suffix", ["csv", "json", "parquet", "duckdb"])
def test_an_empty_file_as_the_store_is_refused_not_read_as_data(capsys, tmp_path, suffix):
    # DuckDB opens an empty file named like data as a read-only view: an ingest there reported "stored" and kept
    # nothing
    target = tmp_path / f"empty.{suffix}"
    target.touch()
    trace = write(tmp_path / "t.csv", "input_tokens,output_tokens\n5,6\n7,8\n")
    line = refused(capsys, "ingest", str(trace), "--db", str(target))
    assert line == (f"error: --db {target}: an empty file; expected a DuckDB store file or a path where none is yet "
                    "(remove the empty file to create the store there)")
    assert target.read_bytes() == b""


@pytest.mark.parametrize("argv", [["rejects", "t"], ["calibrate", *MODEL, "--points", "POINTS"],
                                  ["report", "t", *MODEL, "--quiet", "--format", "html"]])
def test_an_output_file_never_overwrites_a_trace_store(capsys, db, tmp_path, argv):
    # `-o` naming the store (or any DuckDB file) replaced every trace with a report, a calibration or rejects
    points = write(tmp_path / "p.csv", "prefill_tokens,prefill_count,decode_count,decode_context,step_ms\n"
                   "512,1,0,0,40\n1024,1,0,0,75\n0,0,8,512,25\n0,0,32,1024,30\n0,0,64,512,33\n")
    argv = [str(points) if a == "POINTS" else a for a in argv]
    before, other = snapshot(db), tmp_path / "other.duckdb"
    store.open_store(other).close()
    for target in (db, other):
        kept = target.read_bytes()
        line = refused(capsys, *argv, "-o", str(target), db=db)
        assert line == (f"error: -o {target}: is a DuckDB database (a trace store?), which writing would destroy; "
                        "expected another file name")
        assert target.read_bytes() == kept
    assert snapshot(db) == before


@pytest.mark.parametrize("argv, message", [
    (["rejects", "t", "-o", "OUT/x.parquet"], "-o OUT/x.parquet: rejects are written as CSV; expected a file name "
     "ending .csv"),
    (["report", "t", *MODEL, "-o", "OUT/r.html", "--format", "md"], "--format md with -o OUT/r.html, a .html name: "
     "expected a file name ending .md, or no --format"),
    (["report", "t", *MODEL, "-o", "OUT/r.pdf"], "-o OUT/r.pdf: .pdf is no report format; expected one of html, "
     "md, json (the extension, or --format)"),
    (["report", "t", *MODEL, "-o", "OUT/r.html", "-o", "OUT/r.html"], "-o OUT/r.html is given twice; expected "
     "each report file once")])
def test_an_output_named_for_another_format_is_refused(capsys, db, tmp_path, argv, message):
    # rejects written as CSV into x.parquet, Markdown into r.html, one report written twice: all exit 0 before
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    assert refused(capsys, *argv, db=db) == "error: " + message.replace("OUT", str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_mistakes_get_a_message_naming_them(capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({k: v for k, v in CONFIG.items() if k != "model_type"}))
    assert refused(capsys, "memory", "--model", str(config), "--gpu", "a100-80gb-sxm") == (
        "error: config.json has no model_type: expected a Hugging Face model config, whose model_type names its "
        "architecture (one of " + refused(capsys, "memory", "--model", str(write(tmp_path / "c2.json", json.dumps(
            {**CONFIG, "model_type": "nope"}))), "--gpu", "a100-80gb-sxm").split("expected one of ")[1] + ")")
    assert refused(capsys, "memory", *MODEL, "--fit", "32x999999") == (
        "error: --fit 32x999999: llama-3-8b takes at most 8,192 tokens a sequence; expected at most that many")
    spec = ["simulate", *MODEL, "--synthetic"]
    assert refused(capsys, *spec, "requests=5;input=10;output=5;qps=1") == (
        "error: --synthetic item 'requests=5;input=10;output=5;qps=1': items are separated by commas; expected "
        "requests=N,input=LEN,output=LEN,qps=Q")
    assert refused(capsys, *spec, "requests=5,input=10,output=5,qps=1,requests=7") == (
        "error: --synthetic gives requests twice; expected each key once")


def test_a_count_past_any_request_is_named_as_such(con, tmp_path):
    result = ingest_file(con, write(tmp_path / "big.csv", "input_tokens,output_tokens\n99999999999999999999,5\n"
                                    "10,5\n"))
    assert store.rejects_of(con, result.trace_id)[0][2] == (
        "input_tokens (column 'input_tokens'): 99999999999999999999 is more tokens than any request holds; "
        "expected a count below 2^53")


@pytest.mark.parametrize("argv", [["stats", "t"], ["fit", "t", "--field", "input_tokens"], ["rejects", "t"],
                                  ["memory", *MODEL, "--trace", "t"], ["simulate", *MODEL, "--trace", "t"],
                                  ["calibrate", *MODEL, "--trace", "t", "-o", "OUT.json"],
                                  ["recommend", "t", *MODEL],
                                  ["report", "t", *MODEL, "--quiet", "-o", "OUT.html"]])
def test_a_command_reading_a_trace_refuses_a_missing_store_and_creates_none(capsys, tmp_path, argv):
    missing = tmp_path / "typo.duckdb"
    argv = [str(tmp_path / a) if a.startswith("OUT") else a for a in argv]
    line = refused(capsys, *argv, "--db", str(missing))
    assert line == (f"error: no trace store at {missing}: expected the store a trace was ingested into (the same "
                    "--db, or $PLANNER_DB, as the ingest); nothing was created there")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_one_bad_element_of_a_json_array_is_one_reject(tmp_path, con):
    rows = [{"input_tokens": 10 + i, "output_tokens": 5} for i in range(50)]
    rows[7] = 3
    result = ingest_file(con, write(tmp_path / "a.json", json.dumps(rows)))
    assert (result.rows, result.rejected) == (49, 1)
    assert store.rejects_of(con, result.trace_id) == [(8, "3", "a JSON number, not a request object")]


def test_one_bad_line_of_a_jsonl_file_is_one_reject(tmp_path, con):
    lines = [json.dumps({"input_tokens": 10 + i, "output_tokens": 5}) for i in range(50)]
    lines[9], lines[20], lines[30] = '{"input_tokens": 3, "output_tok', "[1, 2]", '{"input_tokens": "many"}'
    result = ingest_file(con, write(tmp_path / "a.jsonl", "\n".join(lines) + "\n"))
    assert (result.rows, result.rejected) == (47, 3)
    reasons = [(row, why) for row, _, why in store.rejects_of(con, result.trace_id)]
    assert reasons[:2] == [(10, "not valid JSON"), (21, "a JSON array, not a request object")]
    assert reasons[2][0] == 31 and "many is not a number" in reasons[2][1]


def test_one_bad_csv_line_is_one_reject(tmp_path, con):
    lines = ["input_tokens;output_tokens"] + [f"{10 + i};5" for i in range(500)]
    lines[100], lines[200], lines[300] = "justone", "x", "y"
    result = ingest_file(con, write(tmp_path / "semi.csv", "\n".join(lines) + "\n"))
    assert (result.rows, result.rejected) == (497, 3)


def csv_with_line(n_rows: int, at: int, line: bytes) -> bytes:
    rows = [b"timestamp,input_tokens,output_tokens,model"] + [f"{i},{100 + i},5,m".encode() for i in range(n_rows)]
    rows[at] = line
    return b"\n".join(rows) + b"\n"


@pytest.mark.parametrize("n_rows, at, line, rows, reason", [
    # a 3 MB prompt logged in one line: DuckDB's 2 MB line limit refused the whole file, naming line 1
    (50, 31, b"30,130,5," + b"x" * 3_000_000, 50, None),
    # an unterminated quote: the sniffer and then the reader failed the file; the quote runs to the end of the
    # file, and the lines it swallowed stay in the one reject's text
    (5, 3, b'2,"300,7,m', 2, "unterminated quote"),
    # a byte that is not UTF-8 in the first 64 KiB read as "binary", past it as a failed sniff
    (100, 51, b"50,150,5,caf\xe9", 99, "unicode"),
    (20_000, 15_001, b"15000,15100,5,caf\xe9", 19_999, "unicode"),
])
def test_one_broken_csv_line_never_refuses_the_file(tmp_path, con, n_rows, at, line, rows, reason):
    path = tmp_path / "broken.csv"
    path.write_bytes(csv_with_line(n_rows, at, line))
    result = ingest_file(con, path)
    assert result.rows == rows and result.rejected == (1 if reason else 0)
    if reason:
        ((row, raw, why),) = store.rejects_of(con, result.trace_id)
        assert row == at and reason in why.lower()
        swallowed = n_rows - rows - 1           # the lines after it that an open quote took in
        assert all(f"{i},{100 + i},5,m" in raw for i in range(at, at + swallowed))


def test_a_broken_line_in_a_file_without_a_header_or_with_an_unnamed_column(tmp_path, con):
    # the sniffer fails on the broken line: the fallback tells a header from a row, and names an empty or repeated
    # header cell as DuckDB's reader does (an empty name failed the reader's columns struct)
    rows = [f"{i},{100 + i},5,m".encode() for i in range(2000)]
    rows[1500] = b"1500,1600,5,caf\xe9"
    (tmp_path / "bare.csv").write_bytes(b"\n".join(rows) + b"\n")
    bare = ingest_file(con, tmp_path / "bare.csv", overrides={"input_tokens": "column1", "output_tokens": "column2"})
    assert (bare.rows, bare.rejected) == (1999, 1)
    unnamed = write(tmp_path / "unnamed.csv", 'input_tokens,output_tokens,,input_tokens\n100,5,,1\n"101,5,,2\n')
    result = ingest_file(con, unnamed)
    assert (result.rows, result.rejected) == (1, 1)


def test_a_rejected_csv_rows_raw_text_keeps_its_quotes(tmp_path, con):
    body = 'timestamp,input_tokens,output_tokens,model\n1,100,5,a\n7,"1,000",5,"say ""hi"""\n'
    result = ingest_file(con, write(tmp_path / "quoted.csv", body))
    assert store.rejects_of(con, result.trace_id) == [
        (2, '7,"1,000",5,"say ""hi"""', "input_tokens (column 'input_tokens'): 1,000 is not a number")]


def test_identical_bytes_stored_again_add_nothing_to_the_store_file(tmp_path, monkeypatch):
    monkeypatch.setattr(content_hash, "BACKGROUND_FROM_BYTES", 0)     # the large-file path: hash beside the load
    body = "timestamp,input_tokens,output_tokens\n" + "".join(f"{i},{i % 977 + 1},{i % 61 + 1}\n"
                                                            for i in range(300_000))
    first, again = write(tmp_path / "a.csv", body), write(tmp_path / "b.csv", body)
    db = tmp_path / "s.duckdb"
    con = store.open_store(db)
    stored = ingest_file(con, first)
    con.close()
    size = db.stat().st_size
    con = store.open_store(db)
    assert ingest_file(con, again).duplicate_of == stored.trace_id
    con.close()
    assert db.stat().st_size == size
    # a file of the very same size but other bytes is still a trace of its own
    other = write(tmp_path / "c.csv", body.replace("\n1,2,2\n", "\n1,3,2\n"))
    assert other.stat().st_size == first.stat().st_size
    con = store.open_store(db)
    assert ingest_file(con, other).duplicate_of is None
    con.close()


def test_a_glob_says_how_many_files_it_matched(tmp_path, con):
    for i in range(3):
        write(tmp_path / f"p{i}.csv", f"input_tokens,output_tokens\n{i + 1},2\n")
    result = ingest_file(con, str(tmp_path / "p*.csv"))
    assert result.files == 3 and result.notes[0] == f"the glob {str(tmp_path / 'p*.csv')!r} matched 3 files"


def test_every_request_at_once_is_saturated(capsys):
    assert main(["simulate", *MODEL, "--synthetic", "requests=2000,input=512,output=128,qps=inf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["saturated"] is True and out["verdict"] == "backlogged"
    assert main(["simulate", *MODEL, "--synthetic", "requests=50,input=64,output=8,qps=0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["saturated"] is False


@pytest.mark.parametrize("rows", ["20000,20\n", "100,1\n"], ids=["every-prompt-rejected", "one-token-answers"])
def test_simulate_on_a_trace_with_no_latencies_answers(capsys, tmp_path, rows):
    db = tmp_path / "s.duckdb"
    trace = write(tmp_path / "x.csv", "timestamp,input_tokens,output_tokens\n"
                  + "".join(f"{i},{rows}" for i in range(20)))
    assert main(["ingest", str(trace), "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["simulate", "--trace", "x", *MODEL, "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert "error" not in captured.err and "20 requests" in captured.out


def test_a_replay_too_long_to_finish_is_refused_up_front(capsys):
    started = time.perf_counter()
    line = refused(capsys, "simulate", *MODEL, "--max-num-seqs", "1", "--max-num-batched-tokens", "8192",
                   "--synthetic", "requests=2000000,input=16,output=4000,qps=inf")
    assert "engine steps" in line and time.perf_counter() - started < 30


def test_ctrl_c_stops_a_long_simulation_at_once(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "planner", "simulate", *MODEL, "--max-num-seqs", "4",
                             "--max-num-batched-tokens", "8192", "--synthetic",
                             "requests=1500000,input=2000,output=2000,qps=inf"], cwd=ROOT,
                            env={**os.environ, "PLANNER_DB": str(tmp_path / "s.duckdb")}, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:       # wait until the compiled loop runs (its progress line is printed)
        time.sleep(1)
        if proc.poll() is not None:
            break
        if os.path.exists("/proc/%d" % proc.pid) and _cpu_busy(proc.pid):
            break
    time.sleep(2)
    assert proc.poll() is None, proc.stderr.read()
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and time.time() - sent < 10
    assert err.strip().splitlines()[-1] == "error: interrupted"


def _cpu_busy(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]) > 300       # utime + stime past 3 s of CPU: compiling or running
