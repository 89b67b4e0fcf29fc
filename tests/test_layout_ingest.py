"""Every layout of item 4 ingested end to end, with units and failure flags as the formats define them."""

import json

import pytest
from helpers import canonical_rows, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.traces import store
from planner.traces.ingest import ingest_file


def test_burstgpt_eight_columns(con, tmp_path):
    path = write(tmp_path / "BurstGPT_3.csv",
                 "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "10,abc,3,ChatGPT,100,50,150,Conversation log\n"
                 "12,,1,GPT-4,0,0,0,API log\n"
                 "15,abc,7,ChatGPT,300,20,320,Conversation log\n")
    r = ingest_file(con, path)
    assert r.layout == "burstgpt" and (r.rows, r.failed) == (3, 1)
    assert r.units["e2e_ms"] == "s"
    got = canonical_rows(con, r.trace_id, "arrival, e2e_ms, session_id, model, service, failed")
    assert got == [(0.0, 3000.0, "abc", "ChatGPT", "Conversation log", False),
                   (2.0, 1000.0, None, "GPT-4", "API log", True),
                   (5.0, 7000.0, "abc", "ChatGPT", "Conversation log", False)]
    assert r.timestamp_resolution_s == 1.0


def test_mooncake_jsonl_in_milliseconds(con, tmp_path):
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 12, "hash_ids": [1, 2]},
             {"timestamp": 3000, "input_length": 600, "output_length": 40, "hash_ids": [1, 3]},
             {"timestamp": 5999, "input_length": 50, "output_length": 7, "hash_ids": [4]}]
    path = write(tmp_path / "conversation_trace.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    r = ingest_file(con, path)
    assert (r.layout, r.format, r.time_kind) == ("mooncake", "jsonl", "relative_ms")
    assert r.timestamp_resolution_s == pytest.approx(1e-3)
    assert canonical_rows(con, r.trace_id) == [(1, 0.0, 1024, 12), (2, 3.0, 600, 40), (3, 5.999, 50, 7)]


def test_length_only_and_vidur(con, tmp_path):
    r = ingest_file(con, write(tmp_path / "sharegpt.csv",
                               "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n10,20,30,0.5\n"))
    assert r.layout == "length-only" and not r.has_timestamps and r.time_kind is None
    assert canonical_rows(con, r.trace_id) == [(1, None, 10, 20)]
    v = ingest_file(con, write(tmp_path / "splitwise_conv.csv",
                               "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,6\n0.25,7,8\n"))
    assert v.layout == "vidur-replay" and v.time_kind == "relative_s"
    assert canonical_rows(con, v.trace_id) == [(1, 0.0, 5, 6), (2, 0.25, 7, 8)]


@pytest.mark.parametrize("name, body", [
    ("errors.csv", "timestamp,input_tokens,output_tokens,error\n1,100,5,False\n2,200,6,0\n3,300,7,True\n"
                   "4,400,8,\n5,500,9,CUDA out of memory\n"),
    ("errors.jsonl", "".join(json.dumps({"timestamp": t, "input_tokens": 100, "output_tokens": 5, "error": e}) + "\n"
                             for t, e in ((1, False), (2, " "), (3, True), (4, "0.00"), (5, "timeout")))),
])
def test_an_error_column_of_false_or_zero_marks_no_failure(con, tmp_path, name, body):
    # an `error` column fails a request by holding an error, not by holding a value: False, 0 and "" are none
    r = ingest_file(con, write(tmp_path / name, body))
    failed = [f for (f,) in canonical_rows(con, r.trace_id, "failed")]
    assert failed == [False, False, True, False, True] and r.failed == 2


def test_a_bare_latency_column_takes_the_unit_its_siblings_name(con, tmp_path):
    # a median E2E of 175 alone reads as seconds (over 400 output tokens); beside ttft_ms it is milliseconds, as
    # the log writes them all
    rows = "".join(f"{i},600,12,{50 + i % 7},{170 + i % 11}\n" for i in range(40))
    r = ingest_file(con, write(tmp_path / "lat.csv", "timestamp,input_tokens,output_tokens,ttft_ms,latency\n" + rows))
    assert r.units["ttft_ms"] == r.units["e2e_ms"] == "ms"
    assert canonical_rows(con, r.trace_id, "ttft_ms, e2e_ms")[0] == (50.0, 170.0)
    alone = ingest_file(con, write(tmp_path / "alone.csv", "timestamp,input_tokens,output_tokens,latency\n"
                                   + "".join(f"{i},600,400,{170 + i % 11}\n" for i in range(40))))
    assert alone.units["e2e_ms"] == "s"
    # but not a unit its values cannot be in: a bare itl of median 25 beside ttft_s is 25 ms a token, not 25 s
    itl = ingest_file(con, write(tmp_path / "itl.csv", "timestamp,input_tokens,output_tokens,ttft_s,itl\n"
                                 + "".join(f"{i},600,12,0.{50 + i % 7},{25 + i % 3}\n" for i in range(40))))
    assert (itl.units["ttft_ms"], itl.units["tpot_ms"]) == ("s", "ms")


def bench_result(rate) -> dict:
    return {"backend": "vllm", "request_rate": rate, "completed": 2, "input_lens": [100, 200],
            "output_lens": [3, 0], "ttfts": [0.1, 0.3], "itls": [[0.02, 0.04], []], "errors": ["", "timeout"]}


def test_vllm_benchmark_result_inf_rate(con, tmp_path):
    r = ingest_file(con, write(tmp_path / "bench.json", json.dumps(bench_result("inf"), indent=2)))
    assert (r.layout, r.format, r.rows, r.failed) == ("vllm-benchmark", "json", 2, 1)
    got = canonical_rows(con, r.trace_id, "arrival, input_tokens, output_tokens, ttft_ms, tpot_ms, e2e_ms, failed")
    assert got[0] == pytest.approx((0.0, 100, 3, 100.0, 30.0, 160.0, False))
    assert got[1][:4] == pytest.approx((0.0, 200, 0, 300.0)) and got[1][6] is True
    assert any("request_rate inf" in n for n in r.notes)


def test_vllm_benchmark_result_of_one_token_outputs(con, tmp_path):
    # every output one token: every itls list empty, which DuckDB types NULL[] ("No matching aggregate function")
    result = {**bench_result("inf"), "output_lens": [1, 1], "itls": [[], []], "errors": ["", ""]}
    r = ingest_file(con, write(tmp_path / "one.json", json.dumps(result)))
    got = canonical_rows(con, r.trace_id, "input_tokens, output_tokens, ttft_ms, tpot_ms, e2e_ms")
    assert got == [(100, 1, pytest.approx(100.0), None, pytest.approx(100.0)),
                   (200, 1, pytest.approx(300.0), None, pytest.approx(300.0))]


def test_vllm_benchmark_result_finite_rate_has_no_times(con, tmp_path):
    r = ingest_file(con, write(tmp_path / "bench4.json", json.dumps(bench_result(4.0))))
    assert r.rows == 2 and not r.has_timestamps
    assert any("no arrival times" in n for n in r.notes)


def test_openai_usage_log(con, tmp_path):
    logs = [{"id": "a", "created": 1700000000, "model": "gpt-4o",
             "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}},
            {"id": "b", "created": 1700000002, "model": "gpt-4o",
             "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}}]
    r = ingest_file(con, write(tmp_path / "usage.jsonl", "".join(json.dumps(x) + "\n" for x in logs)))
    assert r.layout == "openai-usage" and r.time_kind == "epoch_s"
    assert canonical_rows(con, r.trace_id, "arrival, input_tokens, output_tokens, model") == [
        (0.0, 12, 5, "gpt-4o"), (2.0, 30, 9, "gpt-4o")]
    info = store.get_trace(con, r.trace_id)
    assert info.start_epoch_s == 1700000000.0


def test_generic_epoch_ms_and_seconds_latencies(con, tmp_path):
    path = write(tmp_path / "gen.csv", "arrival_time,input_len,output_len,ttft,latency\n"
                 "1700000000500,10,2,0.12,1.5\n1700000000000,20,3,0.2,2.5\n")
    r = ingest_file(con, path)
    assert r.time_kind == "epoch_ms" and r.units["ttft_ms"] == "s" and r.units["e2e_ms"] == "s"
    assert canonical_rows(con, r.trace_id, "arrival, ttft_ms, e2e_ms") == [(0.5, 120.0, 1500.0), (0.0, 200.0, 2500.0)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda x: round(x, 3)),
                               st.integers(min_value=0, max_value=10**7), st.integers(min_value=0, max_value=10**6)),
                     min_size=1, max_size=60),
       fmt=st.sampled_from(["csv", "jsonl", "tsv"]))
def test_round_trip_keeps_every_value(con, tmp_path_factory, rows, fmt):
    folder = tmp_path_factory.mktemp("rt")
    if fmt == "jsonl":
        text = "".join(json.dumps({"arrival": t, "input_tokens": i, "output_tokens": o}) + "\n" for t, i, o in rows)
    else:
        sep = "," if fmt == "csv" else "\t"
        text = f"arrival{sep}input_tokens{sep}output_tokens\n" + "".join(f"{t}{sep}{i}{sep}{o}\n" for t, i, o in rows)
    path = write(folder / f"t.{fmt}", text)
    r = ingest_file(con, path)
    if r.duplicate_of:
        return
    assert (r.rows, r.rejected) == (len(rows), 0)
    t0 = min(t for t, _, _ in rows)
    got = canonical_rows(con, r.trace_id)
    assert [g[0] for g in got] == list(range(1, len(rows) + 1))
    assert [(g[2], g[3]) for g in got] == [(i, o) for _, i, o in rows]
    assert [g[1] for g in got] == pytest.approx([t - t0 for t, _, _ in rows], abs=1e-6)
    assert r.failed == sum(o == 0 for _, _, o in rows)


def test_azure_2024_mixed_offsets(con, tmp_path):
    path = write(tmp_path / "AzureLLMInferenceTrace_code_1week.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2024-05-10 00:00:00.009930+00:00,100,10\n"
                 "2024-05-10 00:00:01+00:00,200,20\n"
                 "2024-05-10 02:00:01.5+02:00,300,30\n")
    r = ingest_file(con, path)
    assert r.layout == "azure-llm" and r.rows == 3
    got = [g[1] for g in canonical_rows(con, r.trace_id)]
    assert got == pytest.approx([0.0, 0.99007, 1.49007])
