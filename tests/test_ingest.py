import json

import duckdb
import pytest
from helpers import canonical_rows, write

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.sources import Dialect

CSV = ("timestamp,prompt_tokens,completion_tokens,ttft_ms\n"
       "2024-01-01 00:00:01.5,100,10,50\n"
       "2024-01-01 00:00:00.5,200,0,60\n"
       "2024-01-01 00:00:03.0,300,30,70\n")
EXPECTED = [(1, 1.0, 100, 10), (2, 0.0, 200, 0), (3, 2.5, 300, 30)]


def rows_as_records():
    return [{"timestamp": "2024-01-01 00:00:01.5", "prompt_tokens": 100, "completion_tokens": 10, "ttft_ms": 50},
            {"timestamp": "2024-01-01 00:00:00.5", "prompt_tokens": 200, "completion_tokens": 0, "ttft_ms": 60},
            {"timestamp": "2024-01-01 00:00:03.0", "prompt_tokens": 300, "completion_tokens": 30, "ttft_ms": 70}]


def make_file(tmp_path, kind: str):
    records = rows_as_records()
    if kind.startswith("csv"):
        return write(tmp_path / "t.csv", CSV, "gzip" if kind == "csv.gz" else "zstd" if kind == "csv.zst" else "none")
    if kind == "tsv":
        return write(tmp_path / "t.tsv", CSV.replace(",", "\t"))
    if kind == "semicolon":
        return write(tmp_path / "t.txt", CSV.replace(",", ";"))
    if kind.startswith("jsonl"):
        text = "".join(json.dumps(r) + "\n" for r in records)
        return write(tmp_path / "t.jsonl", text, "gzip" if kind == "jsonl.gz" else "none")
    if kind == "json":
        return write(tmp_path / "t.json", json.dumps(records, indent=1))
    if kind == "parquet":
        path = tmp_path / "t.parquet"
        src = write(tmp_path / "src.csv", CSV)
        duckdb.connect().execute(f"COPY (SELECT * FROM read_csv('{src}', all_varchar=true)) TO '{path}' "
                                 "(FORMAT parquet)")
        return path
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, fmt", [("csv", "csv"), ("csv.gz", "csv"), ("csv.zst", "csv"), ("tsv", "tsv"),
                                       ("semicolon", "csv"), ("jsonl", "jsonl"), ("jsonl.gz", "jsonl"),
                                       ("json", "json"), ("parquet", "parquet")])
def test_every_format_gives_the_same_requests(con, tmp_path, kind, fmt):
    result = ingest_file(con, make_file(tmp_path, kind))
    assert result.format == fmt
    assert (result.rows, result.rejected, result.failed) == (3, 0, 1)
    assert canonical_rows(con, result.trace_id) == EXPECTED
    assert canonical_rows(con, result.trace_id, "ttft_ms") == [(50.0,), (60.0,), (70.0,)]
    assert result.mapping["input_tokens"] == "prompt_tokens"


def test_bad_values_go_to_rejects_with_row_and_reason(con, tmp_path):
    path = write(tmp_path / "bad.csv", "ts,input_tokens,output_tokens\n"
                 "1.0,10,5\n"       # 1 ok
                 "2.0,abc,5\n"      # 2 not a number
                 "3.0,-4,5\n"       # 3 negative
                 "4.0,,5\n"         # 4 missing
                 "5.0,12.5,5\n"     # 5 fractional
                 "xx,10,5\n"        # 6 bad time
                 "7.0,12.0,0\n")    # 7 ok, failed (zero output)
    result = ingest_file(con, path)
    assert (result.rows, result.rejected, result.failed) == (2, 5, 1)
    rejects = store.rejects_of(con, result.trace_id)
    assert [r[0] for r in rejects] == [2, 3, 4, 5, 6]
    reasons = [r[2] for r in rejects]
    assert "input_tokens (column 'input_tokens'): abc is not a number" in reasons[0]
    assert "is negative" in reasons[1] and "missing" in reasons[2] and "whole number" in reasons[3]
    assert "arrival (column 'ts'): cannot read xx" in reasons[4]
    assert rejects[0][1] == "2.0,abc,5"
    assert canonical_rows(con, result.trace_id) == [(1, 0.0, 10, 5), (7, 6.0, 12, 0)]
    csv_bytes = store.rejects_csv(con, result.trace_id).decode()
    assert csv_bytes.splitlines()[0] == "row,raw,reason" and len(csv_bytes.splitlines()) == 6


def test_a_rejected_row_with_zero_output_is_not_counted_failed(con, tmp_path):
    # failed is tested over stored rows only: a bad row's zero output tokens must not count
    path = write(tmp_path / "zero.csv", "input_tokens,output_tokens\n5,0\n-1,0\n7,3\n")
    result = ingest_file(con, path)
    assert (result.rows, result.rejected, result.failed) == (2, 1, 1)
    assert canonical_rows(con, result.trace_id, '"row", failed') == [(1, True), (3, False)]
    assert store.rejects_of(con, result.trace_id) == [(2, "-1,0", "input_tokens (column 'input_tokens'): -1 is "
                                                          "negative")]


def test_datetimes_keep_microseconds_and_offsets(con, tmp_path):
    path = write(tmp_path / "dt.csv", "created,input_tokens,output_tokens\n"
                 "2024-05-10 00:00:00.064352+02:00,1,2\n"
                 "2024-05-09T22:00:01.000001Z,3,4\n"
                 "2024-05-09 22:00:00.5+0000,5,6\n"
                 "infinity,7,8\n")
    result = ingest_file(con, path)
    assert (result.rows, result.rejected) == (3, 1)
    assert result.time_kind == "datetime" and result.timestamp_resolution_s == pytest.approx(1e-6)
    arrivals = [r[0] for r in canonical_rows(con, result.trace_id, "arrival")]
    assert arrivals == pytest.approx([0.0, 0.935649, 0.435648], abs=1e-6)  # epoch doubles hold ~0.2 µs
    assert store.get_trace(con, result.trace_id).start_epoch_s == pytest.approx(1715292000.064352, abs=1e-6)
    assert "cannot read infinity as datetime" in store.rejects_of(con, result.trace_id)[0][2]


def test_datetimes_named_in_zones_are_read_in_them(con, tmp_path):
    # two Los Angeles minutes and a New York one: 18:19 New York is 15:19 in Los Angeles, first by three hours
    path = write(tmp_path / "zones.csv", "timestamp,input_tokens,output_tokens\n"
                 "2023-11-16 18:17:03 America/Los_Angeles,100,5\n2023-11-16 18:18:03 America/Los_Angeles,100,5\n"
                 "2023-11-16 18:19:03 America/New_York,100,5\n2023-11-16 23:20:03.123456789 UTC,100,5\n")
    result = ingest_file(con, path)
    assert (result.rows, result.rejected) == (4, 0) and result.timestamp_resolution_s == pytest.approx(1e-6)
    assert [r[0] for r in canonical_rows(con, result.trace_id, "arrival")] == pytest.approx(
        [10_680.0, 10_740.0, 0.0, 60.123456], abs=1e-6)        # nanoseconds cut to microseconds, as stored
    assert store.get_trace(con, result.trace_id).start_epoch_s == 1700176743.0       # 23:19:03 UTC
    # one abbreviation or word after every time is no zone the cast knows: read as the plain clock time it follows
    for tail in ("PDT", "retry"):
        rows = "".join(f"2024-07-01 10:00:{s:02d} {tail},100,5\n" for s in range(20))
        plain = ingest_file(con, write(tmp_path / f"{tail}.csv", "timestamp,input_tokens,output_tokens\n" + rows))
        assert (plain.rows, plain.rejected) == (20, 0)
    # two of them are two zones the cast cannot tell apart: refused, not read hours apart in silence
    mixed = write(tmp_path / "mixed.csv", "timestamp,input_tokens,output_tokens\n2024-01-01 09:00:00 EST,10,5\n"
                  "2024-01-01 06:00:05 PST,10,5\n")
    with pytest.raises(PlannerError, match=r"end in 'EST' and 'PST'; expected one form for the whole column"):
        ingest_file(con, mixed)


def test_twelve_hour_times_are_read_on_the_24_hour_clock(con, tmp_path):
    path = write(tmp_path / "ampm.csv", "timestamp,input_tokens,output_tokens\n2024-01-01 11:59:00 AM,10,5\n"
                 "2024-01-01 12:30:00 pm,10,5\n2024-01-01 01:00:00 PM,10,5\n2024-01-02 12:15:00 AM,10,5\n"
                 "2024-01-02 13:15:00 PM,10,5\n2024-01-02 01:15:00,10,5\n")
    result = ingest_file(con, path)
    assert (result.rows, result.rejected) == (4, 2)          # hour 13 PM, and a time without AM or PM
    assert [r[0] for r in canonical_rows(con, result.trace_id, "arrival")] == [0.0, 1860.0, 3660.0, 44_160.0]
    reasons = [r[0] for r in con.execute("SELECT reason FROM rejects WHERE trace_id = ?", [result.trace_id]).fetchall()]
    assert all("ending in AM or PM (hours 1 to 12)" in r for r in reasons), reasons


def test_an_offset_first_seen_past_the_sample_is_rejected_not_dropped(con, tmp_path):
    # the column's first 20,000 rows are naive; a plain cast read "10:35:00+05:00" as 10:35, five hours off
    naive = "".join(f"2024-01-01 {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d},10,5\n" for s in range(20_100))
    zoned = "".join(f"2024-01-01 10:35:{s:02d}+05:00,10,5\n" for s in range(10))
    result = ingest_file(con, write(tmp_path / "late.csv", "timestamp,input_tokens,output_tokens\n" + naive + zoned))
    assert (result.rows, result.rejected) == (20_100, 10)
    reason = con.execute("SELECT reason FROM rejects WHERE trace_id = ? LIMIT 1", [result.trace_id]).fetchone()[0]
    assert "cannot read 2024-01-01 10:35:00+05:00 as a datetime with no UTC offset, zone or AM/PM" in reason


def test_an_arrival_column_empty_throughout_is_named_as_what_is_missing(con, tmp_path):
    path = write(tmp_path / "nots.csv", "timestamp,input_tokens,output_tokens\n,100,5\n,200,6\n")
    with pytest.raises(PlannerError, match=r"expected arrival times in the arrival column, or the trace ingested "
                                           r"without times \(--map arrival=\)$"):
        ingest_file(con, path)
    assert not ingest_file(con, path, overrides={"arrival": ""}).has_timestamps


def test_structurally_broken_lines_keep_row_numbers_straight(con, tmp_path):
    path = write(tmp_path / "broken.csv", "t,input_tokens,output_tokens\n1,10,1\n2,20,2,99\n3,30,3\n4,40\n5,50,5\n")
    result = ingest_file(con, path)
    assert (result.rows, result.rejected) == (3, 2)
    assert [r[0] for r in store.rejects_of(con, result.trace_id)] == [2, 4]
    assert [r[0] for r in canonical_rows(con, result.trace_id)] == [1, 3, 5]
    assert [r[2] for r in canonical_rows(con, result.trace_id)] == [10, 30, 50]


def test_identical_bytes_store_nothing_new(con, tmp_path):
    path = make_file(tmp_path, "csv")
    first = ingest_file(con, path)
    copy = write(tmp_path / "copy.csv", path.read_bytes())
    again = ingest_file(con, copy, name="other")
    assert again.duplicate_of == first.trace_id and again.trace_id == first.trace_id
    assert len(store.list_traces(con)) == 1
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'requests_%'").fetchall() == [(1,)]


@pytest.mark.parametrize("background", [False, True])
def test_the_same_bytes_read_another_way_are_another_trace(con, tmp_path, monkeypatch, background):
    # a unit guessed wrong and corrected with --unit was answered with the first reading, the flag ignored
    from planner.traces import content_hash

    if background:      # a large file: the duplicate is found once its background hash is done, under the lock
        monkeypatch.setattr(content_hash, "BACKGROUND_FROM_BYTES", 0)
    path = write(tmp_path / "ms.csv", "timestamp,input_tokens,output_tokens\n" +
                 "".join(f"{250 * i},{100 + i},20\n" for i in range(1, 9)))
    seconds = ingest_file(con, path)
    millis = ingest_file(con, path, unit_overrides={"arrival": "ms"})
    assert millis.duplicate_of is None and millis.trace_id != seconds.trace_id
    assert (seconds.units, millis.units) == ({"arrival": "relative_s"}, {"arrival": "relative_ms"})
    assert millis.notes[-2:] == [f"the same bytes are stored as ms ({seconds.trace_id}), read with other units: "
                                 "this is another reading of them", "named ms-2: a trace named ms is stored already"]
    spans = [con.execute(f"SELECT max(arrival) FROM {store.requests_view(t.trace_id)}").fetchone()[0]
             for t in (seconds, millis)]
    assert spans == [1750.0, 1.75]
    # each reading, asked for again, is itself
    assert ingest_file(con, path, unit_overrides={"arrival": "ms"}).duplicate_of == millis.trace_id
    assert ingest_file(con, path).duplicate_of == seconds.trace_id
    assert len(store.list_traces(con)) == 2


@pytest.mark.parametrize("column, stray, kind", [
    ([str(1_700_000_000 + i) for i in range(30)], "0", "epoch_s"),
    ([str(1_700_000_000 + i) for i in range(30)], "1700000040000", "epoch_s"),
    ([f"2024-01-01 00:00:{i:02d}" for i in range(30)], "1970-01-01 00:00:00", "datetime")])
def test_a_stray_timestamp_is_a_reject_not_decades_of_trace(con, tmp_path, column, stray, kind):
    # stored whole, one epoch 0 or one row in milliseconds made a 54-year trace that no rate could be drawn from
    path = write(tmp_path / "stray.csv", "timestamp,input_tokens,output_tokens\n" +
                 "".join(f"{t},{100 + i},20\n" for i, t in enumerate([*column[:12], stray, *column[12:]])))
    result = ingest_file(con, path)
    assert (result.rows, result.rejected, result.units["arrival"]) == (30, 1, kind)
    expected = ("the column's dates (a placeholder such as 1970-01-01?)" if kind == "datetime" else
                "one unit for the whole column (another row's unit, or a placeholder such as 0?)")
    assert store.rejects_of(con, result.trace_id) == [(13, f"{stray},112,20", (
        f"arrival (column 'timestamp'): {stray} read as {kind} is not a time between 1973 and 2100 like the "
        f"column's others; expected {expected}"))]
    assert con.execute(f"SELECT max(arrival) FROM {store.requests_view(result.trace_id)}").fetchone()[0] == 29.0


def test_relative_times_written_as_1970_datetimes_are_a_time_axis_not_strays(con, tmp_path):
    # what pandas' to_datetime(unit="s") makes of seconds from the start: every row before 1973, none a stray
    path = write(tmp_path / "dt1970.csv", "timestamp,input_tokens,output_tokens\n" +
                 "".join(f"1970-01-01 00:00:{i:02d},{100 + i},20\n" for i in range(10)))
    result = ingest_file(con, path)
    assert (result.rows, result.rejected, result.units["arrival"]) == (10, 0, "datetime")


def test_names_are_made_unique(con, tmp_path):
    a = ingest_file(con, write(tmp_path / "a.csv", CSV), name="same")
    b = ingest_file(con, write(tmp_path / "b.csv", CSV + "2024-01-01 00:00:04,1,1,1\n"), name="same")
    assert (a.name, b.name) == ("same", "same-2")
    assert store.get_trace(con, "same-2").trace_id == b.trace_id
    # a name not given is said, the user's chosen one or the file's (a changed file ingested again had been
    # stored apart in silence, its old trace still answering to the name)
    assert b.notes[-1] == "named same-2: a trace named same is stored already"
    (tmp_path / "sub").mkdir()
    c = ingest_file(con, write(tmp_path / "sub" / "same.csv", CSV + "2024-01-01 00:00:05,1,1,1\n"))
    assert c.name == "same-3" and c.notes[-1] == "named same-3: a trace named same is stored already"
    # a file named as a stored trace's id is not given that name: the id would be found first
    d = ingest_file(con, write(tmp_path / f"{a.trace_id}.csv", CSV + "2024-01-01 00:00:06,1,1,1\n"))
    assert d.name == f"{a.trace_id}-2"


def test_a_name_that_reads_as_a_trace_id_is_refused(con, tmp_path):
    # `stats NAME` finds the trace whose id it is first: a trace so named could not be found by its name
    first = ingest_file(con, write(tmp_path / "a.csv", CSV))
    with pytest.raises(PlannerError, match=rf"--name '{first.trace_id}': reads as a trace id \(16 hex digits\)"):
        ingest_file(con, write(tmp_path / "b.csv", CSV + "2024-01-01 00:00:04,1,1,1\n"), name=first.trace_id)
    assert len(store.list_traces(con)) == 1


@pytest.mark.parametrize("content, needle", [
    (b"", "is empty"),
    (b"\n\n  \n", "is empty"),
    (b"\x00\x01\x02\x03binary\xff\xfe", "looks binary"),
    (b'[{"input_tokens": 1, "output_tokens": 2}, {"input_tok', "cannot read"),
    (b"when,words\n1,2\n", "no recognisable token columns"),
    (b"ts,input_tokens,output_tokens\n", "no usable requests"),
])
def test_bad_files_fail_cleanly_and_leave_the_store_unchanged(con, tmp_path, content, needle):
    ingest_file(con, make_file(tmp_path, "csv"))
    before = (store.list_traces(con), con.execute("SELECT count(*) FROM rejects").fetchall(),
              con.execute("SELECT count(*) FROM duckdb_tables()").fetchall())
    path = write(tmp_path / "bad.data", content)
    with pytest.raises(PlannerError, match=needle):
        ingest_file(con, path)
    after = (store.list_traces(con), con.execute("SELECT count(*) FROM rejects").fetchall(),
             con.execute("SELECT count(*) FROM duckdb_tables()").fetchall())
    assert before == after


def test_truncated_gzip_fails_cleanly(con, tmp_path):
    big = "t,input_tokens,output_tokens\n" + "".join(f"{i},{i % 500 + 1},{i % 90 + 1}\n" for i in range(50000))
    full = write(tmp_path / "full.csv.gz", big, "gzip")
    cut = write(tmp_path / "cut.csv.gz", full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(PlannerError, match="truncated or corrupt"):
        ingest_file(con, cut)
    assert store.list_traces(con) == []
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'requests_%'").fetchall() == [(0,)]


def test_all_rows_rejected_is_an_error_not_an_empty_trace(con, tmp_path):
    with pytest.raises(PlannerError, match="no usable requests.*abc is not a number"):
        ingest_file(con, write(tmp_path / "x.csv", "input_tokens,output_tokens\nabc,1\n"))
    assert store.list_traces(con) == []


def test_missing_file_is_named(con, tmp_path):
    with pytest.raises(PlannerError, match="no such file"):
        ingest_file(con, tmp_path / "nope.csv")


def test_dialect_override(con, tmp_path):
    path = write(tmp_path / "p.csv", "prompt_tokens|completion_tokens\n5|6\n7|8\n")
    result = ingest_file(con, path, dialect=Dialect(delimiter="|"))
    assert canonical_rows(con, result.trace_id, "input_tokens, output_tokens") == [(5, 6), (7, 8)]


def test_headerless_csv_needs_a_map(con, tmp_path):
    path = write(tmp_path / "h.csv", "5,6\n7,8\n")
    with pytest.raises(PlannerError, match="no recognisable token columns"):
        ingest_file(con, path, dialect=Dialect(header=False))
    result = ingest_file(con, path, dialect=Dialect(header=False),
                         overrides={"input_tokens": "column0", "output_tokens": "column1"})
    assert result.rows == 2 and not result.has_timestamps


def test_failure_status_is_flagged(con, tmp_path):
    path = write(tmp_path / "s.csv", "input_tokens,output_tokens,status\n1,5,200\n2,6,500\n3,7,timeout\n4,8,ok\n")
    result = ingest_file(con, path)
    assert result.failed == 2
    assert [r[0] for r in canonical_rows(con, result.trace_id, "failed")] == [False, True, True, False]


def test_large_duplicates_found_by_the_background_hash_store_nothing(con, tmp_path, monkeypatch):
    from planner.traces import content_hash

    monkeypatch.setattr(content_hash, "BACKGROUND_FROM_BYTES", 0)
    path = make_file(tmp_path, "csv")
    first = ingest_file(con, path)
    tables = con.execute("SELECT count(*) FROM duckdb_tables()").fetchall()
    again = ingest_file(con, write(tmp_path / "again.csv", path.read_bytes()))
    assert again.duplicate_of == first.trace_id
    assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall() == tables
    assert len(store.list_traces(con)) == 1


def test_long_ingest_reports_progress(con, tmp_path):
    path = tmp_path / "big.csv"
    duckdb.connect().execute(f"COPY (SELECT i AS arrival, 1 + i % 700 AS input_tokens, 1 + i % 90 AS output_tokens "
                             f"FROM range(3000000) t(i)) TO '{path}' (HEADER)")
    seen = []
    result = ingest_file(con, path, on_progress=lambda f, m: seen.append((f, m)))
    assert result.rows == 3_000_000
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(m == "parsing rows" and 0.1 < f < 0.9 for f, m in seen), seen


def test_a_json_field_first_seen_past_the_sample_is_read(con, tmp_path):
    # an error field only failed requests carry, first seen on line 20,501: left out of the sampled structure, the
    # failures had counted as successes and their TTFT had gone unread
    from planner.traces.sources import JSON_SAMPLE

    ok = "".join(json.dumps({"arrival_s": i * 0.1, "input_tokens": 100, "output_tokens": 10}) + "\n"
                 for i in range(JSON_SAMPLE + 20))
    failed = "".join(json.dumps({"arrival_s": 3000 + i * 0.1, "input_tokens": 100, "output_tokens": 0,
                                 "error": "timeout", "ttft_ms": 5000}) + "\n" for i in range(100))
    result = ingest_file(con, write(tmp_path / "late.jsonl", ok + failed))
    assert result.failed == 100 and result.mapping["status"] == "error" and result.mapping["ttft_ms"] == "ttft_ms"
    assert any(n.endswith("are read too: error, ttft_ms") for n in result.notes)


def test_units_read_from_the_values_alone_are_said_and_checked_against_the_tokens(con, tmp_path):
    # a bare `latency` of median ~200 beside 1-8 output tokens: 200 s a request is 40 s a token, past any server;
    # read in ms, and the ingest says which unit it chose from the values and how to choose the other
    rows = "".join(f"{100 + i},{1 + i % 8},{150 + i}\n" for i in range(100))
    lat = ingest_file(con, write(tmp_path / "lat.csv", "input_tokens,output_tokens,latency\n" + rows))
    assert lat.units["e2e_ms"] == "ms"
    assert "e2e (column 'latency') read in ms from its values (median 200); give --unit e2e_ms=s if not" in lat.notes
    # the same median beside 4,000-token outputs is 50 ms a token in seconds: seconds stand
    long = ingest_file(con, write(tmp_path / "long.csv", "input_tokens,output_tokens,latency\n"
                                  + "".join(f"100,4000,{150 + i}\n" for i in range(100))))
    assert long.units["e2e_ms"] == "s"
    # relative times carry no clock: their unit is a guess, said
    rel = ingest_file(con, write(tmp_path / "rel.csv", "ts,input_tokens,output_tokens\n"
                                 + "".join(f"{i * 200},100,5\n" for i in range(50))))
    assert rel.time_kind == "relative_s"
    assert any(n.startswith("arrival (column 'ts') read as seconds") for n in rel.notes)
    # a changed file ingested again under its default name is stored apart: said, though no --name was given
    again = ingest_file(con, write(tmp_path / "lat.csv", "input_tokens,output_tokens,latency\n" + rows + "1,1,1\n"))
    assert again.name == "lat-2" and "named lat-2: a trace named lat is stored already" in again.notes


@pytest.mark.parametrize("chunk_bytes", [64, 1 << 22])
def test_a_file_of_two_line_endings_is_refused_naming_the_line(con, tmp_path, chunk_bytes):
    # 1,000 CRLF rows then LF ones: DuckDB's reader said only "The CSV Parser state machine reached an invalid state"
    from pathlib import Path

    from planner.traces.csv_lines import mixed_line_ending

    body = "timestamp,input_tokens,output_tokens\r\n" + "".join(f"{i},100,5\r\n" for i in range(1000)) + \
        "".join(f"{1000 + i},100,5\n" for i in range(1000))
    path = write(tmp_path / "mixed.csv", body.encode())
    assert mixed_line_ending(Path(path), chunk_bytes) == (1002, "CRLF", "LF")
    with pytest.raises(PlannerError, match=r"^mixed.csv: line 1,002 ends in LF where the lines before it end in "
                                           r"CRLF; expected one line ending throughout"):
        ingest_file(con, path)
    assert store.list_traces(con) == []          # nothing half-written


def test_datetimes_written_otherwise_than_the_first_are_read_alike(con, tmp_path):
    # the first row's layout is read by a strict format, the rest by the cast: both read the same instants
    path = write(tmp_path / "forms.csv", "timestamp,input_tokens,output_tokens\n2024-01-01 00:00:00.5,1,1\n"
                 "2024-01-01 00:00:01,1,1\n2024-01-01T00:00:02.25,1,1\n2024-01-01 0:00:03.000001,1,1\n")
    result = ingest_file(con, path)
    assert (result.rows, result.rejected) == (4, 0)
    assert [r[0] for r in canonical_rows(con, result.trace_id, "arrival")] == pytest.approx([0.0, 0.5, 1.75, 2.500001],
                                                                                           abs=1e-6)
