"""`python -m planner simulate` as CONTRACT.md writes it: synthetic specs, trace replay, flags, errors."""

import json

import pytest
from helpers import cli_json, run_cli

from planner.traces.samples import SAMPLE_PATH

BASE = ["--model", "llama-3-8b", "--gpu", "a100-80gb-sxm"]
SPEC = "requests=300,input=512,output=uniform:64:1024,qps=8,arrival=gamma:2"


def test_simulate_synthetic_contract(tmp_path):
    obj = cli_json("simulate", "--synthetic", SPEC, *BASE, "--max-model-len", "8192", db=tmp_path / "s.duckdb")
    for key in ("requests", "completed", "preemptions", "duration_s", "sim_wall_s", "saturated"):
        assert key in obj
    for key in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms"):         # CONTRACT.md's percentile block
        assert set(obj[key]) == {"mean", "p50", "p90", "p95", "p99", "p999", "max"}
        assert obj[key]["p50"] <= obj[key]["p90"] <= obj[key]["p95"] <= obj[key]["p99"] <= obj[key]["p999"] \
            <= obj[key]["max"]
    assert obj["requests"] == obj["completed"] == 300
    assert obj["throughput_tok_s"]["total"] == pytest.approx(obj["throughput_tok_s"]["input"]
                                                             + obj["throughput_tok_s"]["output"])
    assert obj["settings"]["max_num_seqs"] == 256 and obj["settings"]["max_num_batched_tokens"] == 2048
    again = cli_json("simulate", "--synthetic", SPEC, *BASE, "--max-model-len", "8192", db=tmp_path / "s.duckdb")
    assert again["ttft_ms"] == obj["ttft_ms"]                     # deterministic for a seed
    # CONTRACT.md Additions, a single replica
    assert obj["replicas"] == 1 and obj["router"] == "least-loaded" and len(obj["per_replica"]) == 1
    (only,) = obj["per_replica"]         # one replica's row is the fleet's
    assert only["requests"] == 300 and only["ttft_ms"] == obj["ttft_ms"] and only["tpot_ms"] == obj["tpot_ms"]
    assert obj["verdict"] in ("stable", "backlogged", "overloaded")
    assert obj["prefix_cache"] == {"hit_rate": 0.0, "hit_tokens": 0, "prompt_tokens": 300 * 512, "rehit_tokens": 0,
                                   "enabled": True, "identity": None}     # vLLM V1 caches; nothing to reuse


def test_simulate_fleet_contract(tmp_path):
    spec = "requests=2000,input=512,output=uniform:64:512,qps=40,arrival=gamma:2,seed=3"
    obj = cli_json("simulate", "--synthetic", spec, *BASE, "--replicas", "4", "--router", "round-robin",
                   db=tmp_path / "s.duckdb")
    assert obj["replicas"] == 4 and obj["router"] == "round-robin"
    assert [r["requests"] for r in obj["per_replica"]] == [500] * 4
    assert {"requests", "ttft_ms", "tpot_ms", "prefix_cache"} <= set(obj["per_replica"][0])
    assert sum(r["prefix_cache"]["prompt_tokens"] for r in obj["per_replica"]) == obj["prefix_cache"]["prompt_tokens"]
    # the fleet's percentiles cover every request: its p99 lies within the replicas' range
    p99s = [r["ttft_ms"]["p99"] for r in obj["per_replica"]]
    assert min(p99s) <= obj["ttft_ms"]["p99"] <= max(p99s)
    one = cli_json("simulate", "--synthetic", spec, *BASE, db=tmp_path / "s.duckdb")
    assert one["verdict"] == "overloaded" and obj["verdict"] == "stable"   # 40 req/s is four replicas' load
    for bad, message in ((["--replicas", "0"], "--replicas 0"), (["--replicas", "2", "--router", "x"], "--router"),
                         (["--replicas", "2", "--engine", "static", "--router", "least-loaded"], "round-robin")):
        proc = run_cli("simulate", "--synthetic", spec, *BASE, *bad, db=tmp_path / "s.duckdb", check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_simulate_flags_move_results_the_right_way(tmp_path):
    db = tmp_path / "s.duckdb"
    spec = "requests=400,input=512,output=256,qps=inf"
    few = cli_json("simulate", "--synthetic", spec, *BASE, "--max-num-seqs", "16", db=db)
    many = cli_json("simulate", "--synthetic", spec, *BASE, "--max-num-seqs", "128", db=db)
    assert many["throughput_tok_s"]["output"] > few["throughput_tok_s"]["output"]
    assert many["tpot_ms"]["p50"] > few["tpot_ms"]["p50"]
    capped = cli_json("simulate", "--synthetic", spec, *BASE, "--max-new-tokens", "100", db=db)
    assert capped["throughput_tok_s"]["output"] * capped["duration_s"] == pytest.approx(400 * 100)
    tiny = cli_json("simulate", "--synthetic", spec, *BASE, "--gpu-mem-util", "0.3", db=db)
    assert tiny["completed"] == 400
    static = cli_json("simulate", "--synthetic", "requests=400,input=512,output=uniform:64:1024,qps=inf", *BASE,
                      "--engine", "static", "--max-num-seqs", "64", db=db)
    v1 = cli_json("simulate", "--synthetic", "requests=400,input=512,output=uniform:64:1024,qps=inf", *BASE,
                  "--max-num-seqs", "64", db=db)
    assert v1["throughput_tok_s"]["output"] > 1.3 * static["throughput_tok_s"]["output"]


def test_simulate_a_stored_trace_time_scaled(tmp_path):
    db = tmp_path / "s.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    base = cli_json("simulate", "--trace", "sample_chat", *BASE, "--max-model-len", "8192", db=db)
    assert base["requests"] == 8350 and base["completed"] == 8350
    fast = cli_json("simulate", "--trace", "sample_chat", *BASE, "--max-model-len", "8192", "--rate-scale", "4",
                    db=db)
    assert fast["duration_s"] < base["duration_s"] / 2 and fast["ttft_ms"]["p99"] >= base["ttft_ms"]["p99"]
    at_qps = cli_json("simulate", "--trace", "sample_chat", *BASE, "--max-model-len", "8192", "--qps", "3", db=db)
    assert at_qps["completion_rate_rps"] == pytest.approx(3, rel=0.1)


def test_simulate_replays_one_servers_requests_of_a_trace_that_names_several(tmp_path):
    """The sample's model column says llama-3-8b served 5,954 requests and llama-3-70b 2,443 (of which 33 and 14
    failed or produced nothing): --trace-model replays one server's, at their own arrivals."""
    db = tmp_path / "s.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    args = ("simulate", "--trace", "sample_chat", *BASE, "--max-model-len", "8192", "--no-kv-margin")
    # replayed whole on one server, the two models' traffic is warned of, as recommend and report warn of it
    proc = run_cli(*args, "--json", db=db)
    both = json.loads(proc.stdout)
    assert "served by 2 models" in proc.stderr and "with --trace-model NAME" in proc.stderr
    proc = run_cli(*args, "--trace-model", "llama-3-8b", "--json", db=db)
    small = json.loads(proc.stdout)
    assert "warning" not in proc.stderr
    large = cli_json(*args, "--trace-model", "llama-3-70b", db=db)
    assert (small["requests"], large["requests"]) == (5921, 2429) and both["requests"] == 8350
    # the same clock: each server's share of the traffic arrives at its share of the rate
    assert small["completion_rate_rps"] + large["completion_rate_rps"] == \
        pytest.approx(both["completion_rate_rps"], rel=0.02)
    assert small["ttft_ms"]["p99"] <= both["ttft_ms"]["p99"]
    for bad, message in ((["--trace-model", "llama"], "--trace-model 'llama': trace 'sample_chat' names no such "
                                                      "model; it names llama-3-8b (5,921), llama-3-70b (2,429)"),
                         (["--trace-model", "llama-3-8b", "--fitted", "--qps", "2"], "not --fitted")):
        proc = run_cli(*args, *bad, db=db, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--synthetic", "requests=10,input=5"], "lacks output, qps"),
    (["--synthetic", "requests=10,input=5,output=x,qps=1"], "output='x'"),
    (["--synthetic", SPEC, "--engine", "nope"], "--engine 'nope': expected one of vllm-v1"),
    (["--trace", "t", "--synthetic", SPEC], "exactly one"),
    (["--synthetic", SPEC, "--rate-scale", "2", "--qps", "3"], "not both"),
])
def test_simulate_errors(tmp_path, args, message):
    proc = run_cli("simulate", *args, *BASE, "--json", db=tmp_path / "s.duckdb", check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_simulate_page_matches_the_cli(tmp_path, monkeypatch):
    from helpers import ROOT
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["source"] = "synthetic"
    at.query_params["spec"] = SPEC
    at.query_params["max_len"] = "8192"
    at.run()
    at.switch_page("pages/simulate.py").run()
    assert not at.exception
    got = {m.label: m.value for m in at.metric}
    helps = {m.label: m.proto.help for m in at.metric}
    cli = cli_json("simulate", "--synthetic", SPEC, *BASE, "--max-model-len", "8192", db=tmp_path / "cli.duckdb")
    assert got["Completed"] == "300" and helps["Completed"].startswith("of 300 requests")
    assert got["TTFT p99"] == f"{cli['ttft_ms']['p99']:,.0f} ms" and helps["TTFT p99"] == \
        f"p50 {cli['ttft_ms']['p50']:,.0f} ms"
    assert got["Output tok/s"] == f"{cli['throughput_tok_s']['output']:,.0f}"
    assert got["KV blocks"] == f"{cli['settings']['num_blocks']:,}"
    at.selectbox(key="engine").set_value("static").run()
    assert not at.exception and {m.label: m.value for m in at.metric}["Preemptions"] == "0"
    at.text_input(key="spec").set_value("requests=10,input=5").run()
    assert "lacks output, qps" in at.error[0].value
