"""Mooncake-style prefix block ids (``hash_ids``) stored at ingest, checked against the input length."""

import json

from helpers import canonical_rows, write

from planner.limits import MOONCAKE_BLOCK_TOKENS
from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.layouts import detect_mapping

COUNT_REASON = ("hash_ids (column 'hash_ids'): 3 ids for 600 input tokens; expected ceil(600/512) = 2 "
                "(one id per 512-token block)")


def jsonl(tmp_path, name: str, lines: list[dict]):
    return write(tmp_path / name, "".join(json.dumps(x) + "\n" for x in lines))


def view_type(con, trace_id: str) -> str:
    rows = con.execute(f"DESCRIBE {store.requests_view(trace_id)}").fetchall()
    return {r[0]: r[1] for r in rows}["hash_ids"]


def data_columns(con, trace_id: str) -> list[str]:
    return [r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = $t",
                                      {"t": f"requests_{trace_id}_data"}).fetchall()]


def test_block_size_is_mooncakes():
    assert MOONCAKE_BLOCK_TOKENS == 512


def test_mapping_finds_hash_ids_by_layout_and_alias():
    assert detect_mapping(["timestamp", "input_length", "output_length", "hash_ids"]).columns["hash_ids"] == "hash_ids"
    for alias in ("hash_ids", "Block Hashes", "prefix_hash_ids"):
        mapping = detect_mapping(["input_tokens", "output_tokens", alias])
        assert (mapping.layout, mapping.columns["hash_ids"]) == ("generic", alias)
    assert "hash_ids" not in detect_mapping(["timestamp", "input_length", "output_length", "hash_ids"],
                                            overrides={"hash_ids": ""}).columns


def test_mooncake_jsonl_stores_hash_ids_and_rejects_bad_rows(con, tmp_path):
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 12, "hash_ids": [1, 2]},
             {"timestamp": 1000, "input_length": 600, "output_length": 40, "hash_ids": [1, 3, 5]},  # 3 ids, 2 due
             {"timestamp": 2000, "input_length": 50, "output_length": 7, "hash_ids": "abc"},       # not a list
             {"timestamp": 3000, "input_length": 0, "output_length": 5, "hash_ids": []},
             {"timestamp": 4000, "input_length": 513, "output_length": 3, "hash_ids": [1, 9]}]
    r = ingest_file(con, jsonl(tmp_path, "conversation_trace.jsonl", lines))
    assert (r.layout, r.format, r.rows, r.rejected) == ("mooncake", "jsonl", 3, 2)
    assert r.mapping["hash_ids"] == "hash_ids"
    assert canonical_rows(con, r.trace_id, '"row", arrival, input_tokens, hash_ids') == [
        (1, 0.0, 1024, [1, 2]), (4, 3.0, 0, []), (5, 4.0, 513, [1, 9])]
    assert store.rejects_of(con, r.trace_id) == [
        (2, json.dumps(lines[1]), COUNT_REASON),      # a reject keeps its line as the file has it
        (3, json.dumps(lines[2]),
         "hash_ids (column 'hash_ids'): abc is not a list of integer ids")]
    assert view_type(con, r.trace_id) == "BIGINT[]"


def test_integer_list_column_casts_directly(con, tmp_path):
    # every value a list of integers: the reader types the column BIGINT[] and it is cast as it is
    lines = [{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [7, 8, 9]},
             {"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1, 3, 5]},
             {"timestamp": 9, "input_length": 10, "output_length": 3, "hash_ids": [1, None]},
             {"timestamp": 12, "input_length": 10, "output_length": 4, "hash_ids": None},
             {"timestamp": 20, "input_length": 10, "output_length": 5},
             {"timestamp": 30, "input_length": 1, "output_length": 6, "hash_ids": [9223372036854775807]}]
    r = ingest_file(con, jsonl(tmp_path, "mooncake.jsonl", lines))
    assert (r.layout, r.rows, r.rejected) == ("mooncake", 4, 2)
    assert canonical_rows(con, r.trace_id, '"row", hash_ids') == [
        (1, [7, 8, 9]), (4, None), (5, None), (6, [9223372036854775807])]
    assert [(row, reason) for row, _, reason in store.rejects_of(con, r.trace_id)] == [
        (2, COUNT_REASON), (3, "hash_ids (column 'hash_ids'): [1, NULL] is not a list of integer ids")]


def test_unsigned_64_bit_hash_ids_are_stored_as_the_same_bits(con, tmp_path):
    # hash ids are often unsigned 64-bit hashes: past BIGINT's range they were rejected with their requests
    ids = [[13683554807294777401, 2**63, 535051974151811365], [13683554807294777401, 18446744073709551615]]
    lines = [{"timestamp": t, "input_length": 512 * len(h), "output_length": 5, "hash_ids": h}
             for t, h in zip((0, 1000), ids, strict=True)]
    r = ingest_file(con, jsonl(tmp_path, "hashes.jsonl", lines))
    assert (r.rows, r.rejected) == (2, 0)
    assert canonical_rows(con, r.trace_id, "hash_ids") == [
        ([13683554807294777401 - 2**64, -(2**63), 535051974151811365],), ([13683554807294777401 - 2**64, -1],)]
    # past 64 bits an id is no hash of ours: that row is refused, not folded onto another id
    text = "timestamp,input_tokens,output_tokens,hash_ids\n0,512,5,[1]\n1,512,5,[18446744073709551616]\n"
    wide = ingest_file(con, write(tmp_path / "wide.csv", text))
    assert (wide.rows, wide.rejected) == (1, 1)


def test_float_ids_must_be_whole(con, tmp_path):
    lines = [{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1.0, 2.0]},
             {"timestamp": 1, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2.5]}]
    r = ingest_file(con, jsonl(tmp_path, "floats.jsonl", lines))
    assert (r.rows, r.rejected) == (1, 1)
    assert canonical_rows(con, r.trace_id, '"row", hash_ids') == [(1, [1, 2])]
    assert store.rejects_of(con, r.trace_id)[0][2] == \
        "hash_ids (column 'hash_ids'): [1.0, 2.5] is not a list of integer ids"


def test_csv_hash_ids_text_column(con, tmp_path):
    path = write(tmp_path / "blocks.csv",
                 "input_tokens,output_tokens,block_hashes\n"
                 '1024,5,"[10, 11]"\n'      # 1 ok
                 "0,5,[]\n"                 # 2 ok: no blocks for no input
                 "600,5,\n"                 # 3 ok: none given
                 '600,5,"[1, 2.5]"\n'       # 4 not whole
                 "600,5,1 2\n"              # 5 not a list
                 '600,5,"[1, 3, 5]"\n'      # 6 wrong count
                 "abc,5,[1]\n"              # 7 bad input_tokens: its own reason, no count reason
                 '513,5," [ -4 , +5 ] "\n')  # 8 ok
    r = ingest_file(con, path)
    assert (r.layout, r.format, r.rows, r.rejected) == ("generic", "csv", 4, 4)
    assert r.mapping["hash_ids"] == "block_hashes"
    assert canonical_rows(con, r.trace_id, '"row", input_tokens, hash_ids') == [
        (1, 1024, [10, 11]), (2, 0, []), (3, 600, None), (8, 513, [-4, 5])]
    assert store.rejects_of(con, r.trace_id) == [
        # a reject keeps its line as the file has it, quotes included
        (4, '600,5,"[1, 2.5]"', "hash_ids (column 'block_hashes'): [1, 2.5] is not a list of integer ids"),
        (5, "600,5,1 2", "hash_ids (column 'block_hashes'): 1 2 is not a list of integer ids"),
        (6, '600,5,"[1, 3, 5]"', COUNT_REASON.replace("'hash_ids'", "'block_hashes'")),
        (7, "abc,5,[1]", "input_tokens (column 'input_tokens'): abc is not a number")]
    assert view_type(con, r.trace_id) == "BIGINT[]"


def test_trace_without_hash_ids_has_null_column_and_stores_nothing(con, tmp_path):
    r = ingest_file(con, write(tmp_path / "plain.csv", "input_tokens,output_tokens\n10,5\n2000,3\n"))
    assert "hash_ids" not in r.mapping
    assert canonical_rows(con, r.trace_id, '"row", hash_ids') == [(1, None), (2, None)]
    assert view_type(con, r.trace_id) == "BIGINT[]"
    assert "hash_ids" not in data_columns(con, r.trace_id)
    mooncake = ingest_file(con, jsonl(tmp_path, "m.jsonl", [{"timestamp": 0, "input_length": 1, "output_length": 1,
                                                            "hash_ids": [3]}]))
    assert "hash_ids" in data_columns(con, mooncake.trace_id)
