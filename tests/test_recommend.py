"""Recommendations: the seed's directions, SLOs met at the recommended rate, infeasibility, the CLI contract."""

import numpy as np
import pytest

from helpers import cli_json, run_cli
from planner.hardware import get_gpu
from planner.model_catalog import get_model
from planner.recommend import DEFAULT_CLASSES, SLOClass, Search, meets, parse_slo, recommend
from planner.samples import SAMPLE_PATH
from planner.sim.run import engine_settings, simulate
from planner.sim.workload import synthetic

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")


@pytest.fixture(scope="module")
def seed_search():
    # the seed scenario: 512 input tokens, 64-1024 output tokens, Poisson arrivals
    work = synthetic("requests=1200,input=512,output=uniform:64:1024,qps=2,seed=4")
    return Search(work, MODEL, GPU, engine_settings(MODEL, GPU, max_model_len=8192))


@pytest.fixture(scope="module")
def seed_rows(seed_search):
    return recommend(seed_search, DEFAULT_CLASSES, peak_rate_rps=4.0)


def test_classes_trade_rate_for_latency_on_the_seed_scenario(seed_rows):
    by = {r["name"]: r for r in seed_rows}
    assert all(r["feasible"] for r in seed_rows)
    # the throughput class sustains the most; each latency class gives rate up for its bound
    assert by["throughput"]["max_qps_per_replica"] >= by["tpot"]["max_qps_per_replica"] \
        > by["ttft"]["max_qps_per_replica"]
    # decode-bound TPOT wants short steps: a smaller token budget than the TTFT class, which wants prompts done
    assert by["tpot"]["config"]["max_num_batched_tokens"] < by["ttft"]["config"]["max_num_batched_tokens"]
    # with 450k KV tokens nothing is preempted, so more sequences never hurt here: the seed's small-batch advice
    # (from a KV-starved server) does not emerge, and no class is pushed below the largest batch
    assert {r["config"]["max_num_seqs"] for r in seed_rows} == {256}


def test_every_recommendation_meets_its_slo_at_its_rate(seed_search, seed_rows):
    from dataclasses import replace

    for row, slo in zip(seed_rows, DEFAULT_CLASSES, strict=True):
        scale = row["max_qps_per_replica"] / seed_search.base_rate
        work = replace(seed_search.workload, arrival_s=seed_search.workload.arrival_s / scale)
        cfg = replace(seed_search.base, max_num_seqs=row["config"]["max_num_seqs"],
                      max_num_batched_tokens=row["config"]["max_num_batched_tokens"])
        result = simulate(work, MODEL, GPU, cfg)
        assert meets(result, slo), row["name"]
        if slo.metric:
            assert row["predicted"][f"{slo.metric}_ms"]["p99"] <= slo.limit_ms
        assert row["replicas_for_peak"] == int(np.ceil(4.0 / row["max_qps_per_replica"]))
        assert row["vllm_args"].startswith(f"--max-num-seqs {row['config']['max_num_seqs']} --max-num-batched-tokens ")


def test_an_infeasible_slo_reports_the_closest_achievable(seed_search):
    (row,) = recommend(seed_search, [SLOClass("impossible", "ttft", 99, 1.0)], peak_rate_rps=4.0)
    assert not row["feasible"] and row["max_qps_per_replica"] == 0 and row["replicas_for_peak"] is None
    assert row["predicted"]["ttft_ms"]["p99"] > 1.0          # the closest it gets, reported


def test_parse_slo():
    assert parse_slo("chat:ttft_p99<300") == SLOClass("chat", "ttft", 99.0, 300.0)
    assert parse_slo("batch:e2e_p90<60000").key == "e2e_p90_ms"
    with pytest.raises(Exception, match="NAME:METRIC<VALUE"):
        parse_slo("ttft<200")


def test_recommend_cli_contract(tmp_path):
    db = tmp_path / "r.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    obj = cli_json("recommend", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm",
                   "--max-model-len", "8192", "--quiet", "--slo", "chat:ttft_p99<3000", "--slo", "batch:e2e_p99<900000",
                   db=db)
    assert [c["name"] for c in obj["classes"]] == ["chat", "batch"]
    for c in obj["classes"]:
        assert {"name", "slo", "feasible", "config", "max_qps_per_replica", "replicas_for_peak", "predicted",
                "vllm_args"} <= c.keys()
        assert set(c["config"]) >= {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"}
        assert "p99" in c["predicted"]["ttft_ms"] and "p99" in c["predicted"]["tpot_ms"]
    assert obj["classes"][0]["slo"] == {"ttft_p99_ms": 3000.0}
    bad = run_cli("recommend", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--slo", "x",
                  "--json", db=db, check=False)
    assert bad.returncode == 2 and "NAME:METRIC<VALUE" in bad.stderr


def test_details_explain_and_sweep(seed_search, seed_rows):
    from planner.diagnosis import class_details

    row, slo = seed_rows[1], DEFAULT_CLASSES[1]                   # the TPOT class
    details = class_details(seed_search, row, slo, list(DEFAULT_CLASSES))
    assert details["diagnosis"] and all(isinstance(n, str) for n in details["diagnosis"])
    rate = details["sweeps"]["rate"]
    assert [p["rate_rps"] for p in rate] == sorted(p["rate_rps"] for p in rate)
    assert rate[-1]["tpot_p99_ms"] >= rate[0]["tpot_p99_ms"]      # more load, slower decoding
    front = details["pareto"]
    assert all(a["throughput_tok_s"] >= b["throughput_tok_s"] and a["ttft_p99_ms"] > b["ttft_p99_ms"]
               for a, b in zip(front, front[1:], strict=False))    # each step down in throughput buys latency
    for band in details["bands"]:
        assert band["ttft_p99_ms_lo"] <= band["ttft_p99_ms_hi"] and band["tpot_p99_ms_lo"] <= band["tpot_p99_ms_hi"]
    assert any(b["tpot_p99_ms_hi"] > b["tpot_p99_ms_lo"] for b in details["bands"])   # resampling moves p99
    tornado = {(r["factor"], r["change"]): r["value_ms"] for r in details["tornado"]}
    assert tornado[("arrival rate", "+20%")] >= tornado[("arrival rate", "-20%")]


def test_recommend_page(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from helpers import ROOT

    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["max_len"] = "8192"
    at.query_params["slos"] = "chat:ttft_p99<3000"
    at.run()
    at.switch_page("pages/recommend.py").run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "req/s per replica" in d.value.columns)
    assert list(table["class"]) == ["chat", "throughput"]
    assert any(c.value.startswith("vllm serve meta-llama/Meta-Llama-3-8B --max-num-seqs") for c in at.code)
    at.text_input(key="slos").set_value("nonsense").run()
    assert "NAME:METRIC<VALUE" in at.error[0].value


def test_tp_search_compares_requests_per_gpu():
    from planner.recommend import recommend_over

    work = synthetic("requests=400,input=512,output=uniform:64:512,qps=2,seed=8")
    big = get_model("llama-3-70b")

    def make(tp):
        return Search(work, big, GPU, engine_settings(big, GPU, tp=tp, max_model_len=4096), tp=tp)
    (row,) = recommend_over(make, (1, 2, 4), [SLOClass("throughput")], label="tp", gpus=lambda tp: tp,
                            prefer=lambda tp: -tp)
    assert set(row["tp_compared"]) == {"2", "4"}                # 70B in bf16 does not fit one 80 GB GPU
    assert row["qps_per_gpu"] == max(row["tp_compared"].values())
    assert f"--tensor-parallel-size {row['tp']}" in row["vllm_args"]


def test_max_new_tokens_caps_are_compared(tmp_path):
    db = tmp_path / "r.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    obj = cli_json("recommend", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--quiet",
                   "--slo", "batch:e2e_p99<900000", "--max-new-tokens-options", "none,p90", db=db)
    (row,) = obj["classes"]
    assert set(row["max_new_tokens_compared"]) == {"None", "517"}          # p90 of the sample's outputs
    capped, uncapped = row["max_new_tokens_compared"]["517"], row["max_new_tokens_compared"]["None"]
    assert capped >= uncapped                                              # shorter outputs never serve fewer
    assert row["truncated_share"] == (0.0 if row["max_new_tokens"] is None else pytest.approx(0.0996, abs=0.002))


def test_kv_pressure_pulls_every_class_to_fewer_sequences():
    # the same seed scenario on a 40 GB A100 with half its memory for vLLM: 27k KV tokens instead of 450k
    work = synthetic("requests=1200,input=512,output=uniform:64:1024,qps=2,seed=4")
    small = get_gpu("a100-40gb-sxm")
    tight = Search(work, MODEL, small, engine_settings(MODEL, small, max_model_len=8192, gpu_memory_utilization=0.5))
    rows = recommend(tight, DEFAULT_CLASSES, peak_rate_rps=4.0)
    assert all(r["feasible"] and r["config"]["max_num_seqs"] <= 64 for r in rows)
    by = {r["name"]: r for r in rows}
    assert by["ttft"]["config"]["max_num_batched_tokens"] <= by["throughput"]["config"]["max_num_batched_tokens"]
