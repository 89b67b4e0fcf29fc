import json

import pytest
from helpers import cli_json, run_cli, write

from planner.traces import store

CONTRACT_INGEST_KEYS = {"trace_id", "name", "rows", "rejected", "failed", "format", "mapping", "has_timestamps",
                        "duplicate_of"}


def test_ingest_traces_stats_follow_the_contract(tmp_path):
    db = tmp_path / "s.duckdb"
    path = write(tmp_path / "m.jsonl", "".join(json.dumps({"timestamp": i * 1000, "input_length": 10 + i,
                                                           "output_length": 5}) + "\n" for i in range(10)))
    ing = cli_json("ingest", str(path), "--name", "moon", db=db)
    assert CONTRACT_INGEST_KEYS <= set(ing)
    assert ing["format"] == "jsonl" and ing["name"] == "moon" and ing["has_timestamps"] is True
    assert ing["mapping"] == {"arrival": "timestamp", "input_tokens": "input_length", "output_tokens": "output_length"}
    assert cli_json("traces", db=tmp_path / "none.duckdb") == {"traces": []}   # and no store made there
    assert not (tmp_path / "none.duckdb").exists()
    listed = cli_json("traces", db=db)["traces"]
    assert [(t["trace_id"], t["name"], t["rows"]) for t in listed] == [(ing["trace_id"], "moon", 10)]
    assert listed[0]["created"]
    stats = cli_json("stats", "moon", db=db)
    assert set(stats["input_tokens"]) == {"mean", "p50", "p90", "p95", "p99", "p999", "max"}
    assert stats["input_tokens"]["p50"] == 14.5
    arr = stats["arrivals"]
    assert set(arr) >= {"span_s", "rate_rps", "interarrival_cv", "timestamp_resolution_s", "dispersion"}
    assert set(arr["dispersion"]) == {"1s", "10s", "60s"}
    assert arr["span_s"] == 9.0 and arr["interarrival_cv"] == 0.0


def test_map_and_unit_flags(tmp_path):
    db = tmp_path / "s.duckdb"
    path = write(tmp_path / "x.csv", "t_ms,a,b\n0,1,2\n1500,3,4\n")
    ing = cli_json("ingest", str(path), "--map", "input_tokens=a", "--map", "output_tokens=b",
                   "--map", "arrival=t_ms", db=db)
    assert ing["mapping"] == {"input_tokens": "a", "output_tokens": "b", "arrival": "t_ms"}
    assert cli_json("stats", ing["trace_id"], db=db)["arrivals"]["span_s"] == 1.5
    path2 = write(tmp_path / "y.csv", "t,a,b\n0,1,2\n1500,3,4\n")
    ing2 = cli_json("ingest", str(path2), "--map", "input_tokens=a", "--map", "output_tokens=b",
                    "--map", "arrival=t", "--unit", "arrival=ms", db=db)
    assert ing2["units"]["arrival"] == "relative_ms"


def test_rejects_export(tmp_path):
    db = tmp_path / "s.duckdb"
    path = write(tmp_path / "r.csv", "input_tokens,output_tokens\n1,2\nx,3\n")
    ing = cli_json("ingest", str(path), db=db)
    assert ing["rejected"] == 1
    out = tmp_path / "rej.csv"
    cli_json("rejects", ing["trace_id"], "-o", str(out), db=db)
    assert out.read_text().splitlines() == ["row,raw,reason",
                                            "2,\"x,3\",input_tokens (column 'input_tokens'): x is not a number"]


@pytest.mark.parametrize("content, args, needle", [
    (b"", [], "is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00", [], "looks binary"),
    (b"foo,bar\n1,2\n", [], "no recognisable token columns"),
    (b"a,b\n1,2\n", ["--map", "input_tokens=zzz"], "no column 'zzz'"),
    (b"input_tokens,output_tokens\n1,2\n", ["--format", "xml"], "invalid choice"),
    (b"input_tokens,output_tokens\n1,2\n", ["--map", "oops"], "expected FIELD=VALUE"),
])
def test_bad_input_gives_one_error_line_and_no_traceback(tmp_path, content, args, needle):
    db = tmp_path / "s.duckdb"
    path = write(tmp_path / "bad.csv", content)
    proc = run_cli("ingest", str(path), *args, "--json", db=db, check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert "error:" in proc.stderr and needle in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["stats", "nope"], "no trace with id or name 'nope'"),
    (["ingest", "/definitely/not/here.csv"], "no such file"),
])
def test_missing_things_are_named(tmp_path, args, needle):
    store.open_store(tmp_path / "s.duckdb").close()       # an empty store: the trace, not the store, is missing
    proc = run_cli(*args, "--json", db=tmp_path / "s.duckdb", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error:") and needle in proc.stderr


def test_a_reader_that_stops_reading_is_no_error(tmp_path):
    # `planner rejects T | head -1`: the pipe closes under the rest of the output; that read what it wanted
    import os
    import subprocess
    import sys

    from helpers import ROOT

    db = tmp_path / "pipe.duckdb"
    rows = "".join(f"{i},-1,5\n" for i in range(20_000)) + "1,100,5\n"
    cli_json("ingest", str(write(tmp_path / "bad.csv", "timestamp,input_tokens,output_tokens\n" + rows)), db=db)
    env = {**os.environ, "PLANNER_DB": str(db)}
    env.pop("PLANNER_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "planner", "rejects", "bad"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"1\t")
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and err == b""          # it had printed "error: BrokenPipeError: …"
