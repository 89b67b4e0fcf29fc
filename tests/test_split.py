"""One server's requests split off a trace holding several servers' traffic: the rows that model served, as a
trace every view then plans on its own, the same as a replay of those requests taken from the whole trace."""

import threading

import numpy as np
import pytest
from helpers import canonical_rows, cli_json, run_cli, write

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.samples import SAMPLE_PATH, ensure_sample
from planner.traces.queries import model_counts
from planner.traces.split import split_by_model, split_hash
from planner.workload.replay import from_trace, measured_latencies, served_models
from planner.workload.stats import trace_stats

TWO = ("timestamp,input_tokens,output_tokens,model,status\n"
       "10.0,100,20,a,200\n10.5,200,30,b,200\n11.0,300,0,a,500\n12.5,150,25,a,200\n13.0,50,5,,200\n14.0,70,9,b,200\n")


def test_the_split_of_the_sample_is_the_replay_of_its_requests_from_the_whole(con):
    whole = ensure_sample(con)
    split = split_by_model(con, "sample_chat", "llama-3-70b")
    assert (split.name, split.rows, split.failed, split.rejected) == ("sample_chat-llama-3-70b", 2443, 14, 0)
    assert model_counts(con, whole.trace_id) == {"llama-3-8b": 5954, "llama-3-70b": 2443}
    assert served_models(con, split.trace_id) == {"llama-3-70b": 2429}      # its non-failed rows, as replayed
    # the same requests, lengths, sessions and spacing, arrivals counted from its own first request
    alone, taken = from_trace(con, split.trace_id), from_trace(con, "sample_chat", served_by="llama-3-70b")
    assert alone.n == taken.n == 2429 and alone.arrival_s[0] == 0.0
    assert np.allclose(alone.arrival_s, taken.arrival_s - taken.arrival_s[0], rtol=0, atol=1e-9)
    assert (alone.input_tokens == taken.input_tokens).all() and (alone.output_tokens == taken.output_tokens).all()
    assert alone.group.tolist() == taken.group.tolist() and alone.prefix.describe() == taken.prefix.describe()
    # its measured latencies are that server's, without naming it
    assert np.array_equal(measured_latencies(con, split.trace_id).ttft_s,
                          measured_latencies(con, "sample_chat", trace_model="llama-3-70b").ttft_s, equal_nan=True)
    # rows keep their numbers in the source file
    rows = canonical_rows(con, split.trace_id, '"row", model')
    whole_rows = canonical_rows(con, whole.trace_id, '"row", model')
    assert rows == [r for r in whole_rows if r[1] == "llama-3-70b"]
    parent, child = store.get_trace(con, whole.trace_id), store.get_trace(con, split.trace_id)
    first = con.execute(f"SELECT min(arrival) FROM {store.requests_view(whole.trace_id)} "
                        "WHERE model = 'llama-3-70b'").fetchone()[0]
    assert child.start_epoch_s == pytest.approx(parent.start_epoch_s + first, abs=1e-6)
    assert (child.mapping, child.units, child.source_file) == (parent.mapping, parent.units, parent.source_file)
    assert child.notes == [f"split off sample_chat ({whole.trace_id}): the 2,443 rows its model column says "
                           "llama-3-70b served, numbered as there; 5,954 rows of other models left out"]
    assert trace_stats(con, split.trace_id)["rows"] == 2443


def test_splitting_again_finds_the_split_and_the_two_splits_make_the_whole(con):
    whole = ensure_sample(con)
    first = split_by_model(con, whole.trace_id, "llama-3-8b", name="eight")
    again = split_by_model(con, "sample_chat", "llama-3-8b", owner="ana@example.com")
    assert (again.trace_id, again.duplicate_of, again.name) == (first.trace_id, first.trace_id, "eight")
    source = store.get_trace(con, whole.trace_id)
    assert store.content_hash(con, first.trace_id) == split_hash(store.content_hash(con, whole.trace_id), source,
                                                                 "llama-3-8b")
    other = split_by_model(con, whole.trace_id, "llama-3-70b")
    assert first.rows + other.rows == whole.rows and first.failed + other.failed == whole.failed
    assert len(store.list_traces(con)) == 3
    # the split is a table of its own: removing the source leaves it whole
    store.delete_trace(con, whole.trace_id)
    assert from_trace(con, "eight").n == 5921


def test_a_split_says_how_far_it_is_and_a_refusal_says_nothing_first(con):
    ensure_sample(con)
    said = []
    split_by_model(con, "sample_chat", "llama-3-8b", on_progress=lambda f, m: said.append((f, m)))
    assert said[0] == (0.05, "copying 5,954 rows") and said[-1] == (1.0, "stored")
    assert all(a[0] <= b[0] for a, b in zip(said, said[1:]))
    said.clear()
    with pytest.raises(PlannerError):
        split_by_model(con, "sample_chat", "gpt-4", on_progress=lambda f, m: said.append((f, m)))
    assert said == []


def test_sessions_splitting_the_same_model_at_once_store_it_once(con):
    ensure_sample(con)
    results = []
    threads = [threading.Thread(target=lambda: results.append(split_by_model(con, "sample_chat", "llama-3-8b")))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.trace_id for r in results}) == 1 and sorted(r.duplicate_of is None for r in results) == [
        False, False, True]
    assert len(store.list_traces(con)) == 2


def test_a_split_in_a_workspace_is_listed_there(con):
    ensure_sample(con)
    split = split_by_model(con, "sample_chat", "llama-3-8b", owner="ana@example.com")
    assert store.owned_trace_ids(con, "ana@example.com") == {split.trace_id}
    assert split.trace_id not in {t.trace_id for t in store.list_traces(con, "bo@example.com")}


def test_a_split_without_timestamps_or_of_a_small_log(con, tmp_path):
    timed = ingest_file(con, write(tmp_path / "two.csv", TWO))
    b = split_by_model(con, timed.trace_id, "b")
    assert canonical_rows(con, b.trace_id) == [(2, 0.0, 200, 30), (6, 3.5, 70, 9)]
    a = split_by_model(con, timed.trace_id, "a")
    assert (a.rows, a.failed) == (3, 1)
    assert store.get_trace(con, a.trace_id).notes[0].endswith("2 rows of other models and 1 naming none left out")
    untimed = ingest_file(con, write(tmp_path / "untimed.csv", "input_tokens,output_tokens,model\n1,2,x\n3,4,y\n"))
    x = split_by_model(con, untimed.trace_id, "x")
    assert not x.has_timestamps and canonical_rows(con, x.trace_id) == [(1, None, 1, 2)]


def test_what_cannot_be_split_is_refused_and_nothing_is_stored(con, tmp_path):
    ensure_sample(con)
    with pytest.raises(PlannerError, match=r"--model 'gpt-4': trace 'sample_chat' names no such model; expected one "
                                           r"of the models its model column names: llama-3-8b \(5,954 rows\), "
                                           r"llama-3-70b \(2,443 rows\)"):
        split_by_model(con, "sample_chat", "gpt-4")
    one = ingest_file(con, write(tmp_path / "one.csv", "input_tokens,output_tokens,model\n1,2,x\n3,4,x\n"))
    with pytest.raises(PlannerError, match=r"names one model \(x \(2 rows\)\): its requests are one server's"):
        split_by_model(con, one.trace_id, "x")
    with pytest.raises(PlannerError, match=r"names one model \(x \(2 rows\)\)"):
        split_by_model(con, one.trace_id, "y")          # not "no such model": x would be refused too
    bare = ingest_file(con, write(tmp_path / "bare.csv", "input_tokens,output_tokens\n1,2\n"))
    with pytest.raises(PlannerError, match="trace 'bare' has no model column; expected a trace whose model column"):
        split_by_model(con, bare.trace_id, "x")
    blank = ingest_file(con, write(tmp_path / "blank.csv", "input_tokens,output_tokens,model\n1,2,\n3,4,\n"))
    with pytest.raises(PlannerError, match="trace 'blank' has a model column naming no model"):
        split_by_model(con, blank.trace_id, "x")
    with pytest.raises(PlannerError, match="expected a trace name with at least one visible character"):
        split_by_model(con, "sample_chat", "llama-3-8b", name="  ")
    assert len(store.list_traces(con)) == 4


def test_the_same_bytes_read_another_way_are_split_anew(con, tmp_path):
    # the model column read from another column of the same bytes, after the first ingest was deleted: the same
    # trace id, other models per row; the split of the first reading is not this one's
    path = write(tmp_path / "two.csv", "input_tokens,output_tokens,model,backend\n1,2,a,b\n3,4,b,a\n5,6,a,b\n7,8,b,a\n")
    first = ingest_file(con, path)
    a_first = split_by_model(con, first.trace_id, "a", name="a-first")
    assert [r[0] for r in canonical_rows(con, a_first.trace_id)] == [1, 3]
    store.delete_trace(con, first.trace_id)
    again = ingest_file(con, path, overrides={"model": "backend"})
    assert again.trace_id == first.trace_id
    a_again = split_by_model(con, again.trace_id, "a")
    assert a_again.duplicate_of is None and a_again.trace_id != a_first.trace_id
    assert [r[0] for r in canonical_rows(con, a_again.trace_id)] == [2, 4]


def test_the_split_cli(tmp_path):
    db = tmp_path / "s.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    obj = cli_json("split", "sample_chat", "--model", "llama-3-8b", db=db)
    assert (obj["name"], obj["rows"], obj["failed"], obj["duplicate_of"]) == ("sample_chat-llama-3-8b", 5954, 33, None)
    assert cli_json("split", "sample_chat", "--model", "llama-3-8b", db=db)["duplicate_of"] == obj["trace_id"]
    human = run_cli("split", "sample_chat", "--model", "llama-3-70b", "--name", "seventy", db=db).stdout
    assert human.startswith("stored seventy (") and "2,443 rows, 14 failed" in human
    bad = run_cli("split", "sample_chat", "--model", "nope", db=db, check=False)
    assert bad.returncode != 0 and bad.stdout == ""
    assert bad.stderr.startswith("error: --model 'nope': trace 'sample_chat' names no such model")
    # the recommendation on one server's split plans it without the several-servers warning
    rec = run_cli("recommend", "sample_chat-llama-3-8b", "--model", "llama-3-8b", "--gpu", "h100-sxm",
                  "--max-model-len", "8192", "--slo", "batch:throughput", "--resamples", "0", "--quiet", "--json",
                  db=db)
    assert "served by" not in rec.stderr
