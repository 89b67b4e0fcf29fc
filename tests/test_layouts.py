import pytest

from planner.errors import PlannerError
from planner.traces.layouts import detect_mapping, latency_unit, normalize, unit_from_name


@pytest.mark.parametrize("columns, layout, expected", [
    (["TIMESTAMP", "ContextTokens", "GeneratedTokens"], "azure-llm",
     {"arrival": "TIMESTAMP", "input_tokens": "ContextTokens", "output_tokens": "GeneratedTokens"}),
    (["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"], "burstgpt",
     {"arrival": "Timestamp", "input_tokens": "Request tokens", "output_tokens": "Response tokens",
      "model": "Model", "service": "Log Type"}),
    (["Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens", "Total tokens",
      "Log Type"], "burstgpt",
     {"arrival": "Timestamp", "input_tokens": "Request tokens", "output_tokens": "Response tokens",
      "model": "Model", "service": "Log Type", "session_id": "Session ID", "e2e_ms": "Elapsed time"}),
    (["timestamp", "input_length", "output_length", "hash_ids"], "mooncake",
     {"arrival": "timestamp", "input_tokens": "input_length", "output_tokens": "output_length",
      "hash_ids": "hash_ids"}),
    (["num_prefill_tokens", "num_decode_tokens", "num_total_tokens", "pd_ratio"], "length-only",
     {"input_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"}),
    (["arrived_at", "num_prefill_tokens", "num_decode_tokens"], "vidur-replay",
     {"arrival": "arrived_at", "input_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"}),
    (["id", "created", "model", "usage.prompt_tokens", "usage.completion_tokens", "usage.total_tokens"],
     "openai-usage", {"arrival": "created", "input_tokens": "usage.prompt_tokens",
                      "output_tokens": "usage.completion_tokens", "model": "model"}),
    (["arrival_time", "prompt_tokens", "completion_tokens", "ttft", "tpot", "latency"], "generic",
     {"arrival": "arrival_time", "input_tokens": "prompt_tokens", "output_tokens": "completion_tokens",
      "ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "latency"}),
])
def test_known_layouts_map_without_asking(columns, layout, expected):
    mapping = detect_mapping(columns)
    assert mapping.layout == layout
    assert mapping.columns == expected


def test_layout_units():
    assert detect_mapping(["timestamp", "input_length", "output_length"]).units == {"arrival": "ms"}
    burst8 = detect_mapping(["Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens",
                             "Response tokens", "Total tokens", "Log Type"])
    assert burst8.units == {"arrival": "s", "e2e_ms": "s"}
    assert detect_mapping(["ts_ms", "input_tokens", "output_tokens", "ttft_s"]).units["ttft_ms"] == "s"


def test_overrides_replace_and_remove_fields():
    mapping = detect_mapping(["timestamp", "prompt_tokens", "completion_tokens", "other_time"],
                             overrides={"arrival": "other_time", "model": ""}, unit_overrides={"arrival": "ms"})
    assert mapping.columns["arrival"] == "other_time"
    assert mapping.units["arrival"] == "ms"
    assert mapping.layout == "generic+map"
    assert "arrival" not in detect_mapping(["timestamp", "prompt_tokens", "completion_tokens"],
                                           overrides={"arrival": ""}).columns


def test_missing_token_columns_names_what_was_found():
    with pytest.raises(PlannerError) as err:
        detect_mapping(["when", "words_in", "words_out"])
    msg = str(err.value)
    assert "'when', 'words_in', 'words_out'" in msg
    assert "input_tokens" in msg and "output_tokens" in msg and "--map" in msg


@pytest.mark.parametrize("bad, needle", [
    ({"nonsense": "a"}, "unknown field"), ({"input_tokens": "zzz"}, "no column 'zzz'")])
def test_bad_overrides_are_named(bad, needle):
    with pytest.raises(PlannerError, match=needle):
        detect_mapping(["a", "prompt_tokens", "completion_tokens"], overrides=bad)


def test_bad_unit_override():
    with pytest.raises(PlannerError, match="expected one of"):
        detect_mapping(["t", "prompt_tokens", "completion_tokens"], overrides={"arrival": "t"},
                       unit_overrides={"arrival": "fortnights"})


def test_names_and_units():
    assert normalize(" Request tokens ") == "request_tokens"
    assert unit_from_name("ttft_ms") == "ms" and unit_from_name("latency_seconds") == "s"
    assert unit_from_name("status") is None and unit_from_name("ts") is None
    assert latency_unit("ttft_ms", "auto", 0.25) == "s"
    assert latency_unit("ttft_ms", "auto", 250.0) == "ms"
    assert latency_unit("tpot_ms", "auto", 25.0) == "ms"
    assert latency_unit("e2e_ms", "auto", 12.0) == "s"
