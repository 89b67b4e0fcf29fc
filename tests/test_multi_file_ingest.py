"""Many files, one trace: a directory or a glob ingests as the concatenation of its files, rows numbered through
them in path order, rejects naming their file, and an existing file read as itself whatever its name."""

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from helpers import canonical_rows, write

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.files import resolve_files
from planner.traces.ingest import ingest_file

ROOT = Path(__file__).resolve().parents[1]
HEADER = "timestamp,input_tokens,output_tokens\n"


def _parts(folder: Path, sizes: list[int]) -> list[Path]:
    """Parquet parts of one trace: part i holds ``sizes[i]`` requests, arrivals 1 s apart through all parts."""
    folder.mkdir(parents=True, exist_ok=True)
    con, paths, start = duckdb.connect(), [], 0
    for i, n in enumerate(sizes):
        path = folder / f"part-{i:03d}.parquet"
        con.execute(f"COPY (SELECT CAST(range AS DOUBLE) AS timestamp, 100 + range AS input_tokens, "
                    f"1 + range % 7 AS output_tokens FROM range({start}, {start + n})) TO '{path}' (FORMAT parquet)")
        paths.append(path)
        start += n
    return paths


def test_a_directory_of_parquet_parts_is_the_trace_their_concatenation_is(con, tmp_path):
    parts = _parts(tmp_path / "out", [40, 25, 35])
    (tmp_path / "out" / "_SUCCESS").write_text("")               # Spark's marker and checksums are not parts
    (tmp_path / "out" / ".part-000.parquet.crc").write_bytes(b"\x00\x01")
    whole = tmp_path / "whole.parquet"
    duckdb.connect().execute(f"COPY (SELECT * FROM read_parquet({[str(p) for p in parts]})) TO '{whole}'")

    many = ingest_file(con, tmp_path / "out")
    one = ingest_file(con, whole)
    assert (many.files, one.files) == (3, 1)
    assert (many.rows, many.rejected, many.name) == (100, 0, "out")
    assert canonical_rows(con, many.trace_id) == canonical_rows(con, one.trace_id)
    rows = canonical_rows(con, many.trace_id)
    assert rows[0] == (1, 0.0, 100, 1) and rows[-1] == (100, 99.0, 199, 1 + 99 % 7)
    assert [(f["first_row"], f["source_rows"]) for f in store.trace_files(con, many.trace_id)] == \
        [(1, 40), (41, 25), (66, 35)]
    assert store.trace_files(con, one.trace_id) == []
    assert store.get_trace(con, many.trace_id).files == 3


def test_a_glob_reads_its_matches_in_path_order_and_the_same_set_again_is_a_duplicate(con, tmp_path):
    _parts(tmp_path / "logs" / "day=2", [10])
    _parts(tmp_path / "logs" / "day=1", [5, 5])
    pattern = str(tmp_path / "logs" / "day=*" / "part-*.parquet")
    first = ingest_file(con, pattern)
    assert (first.files, first.rows, first.name) == (3, 20, "logs")
    # day=1's parts come first: their rows are numbered 1-10, day=2's 11-20
    assert [f["path"].split("logs/")[1] for f in store.trace_files(con, first.trace_id)] == \
        ["day=1/part-000.parquet", "day=1/part-001.parquet", "day=2/part-000.parquet"]
    assert ingest_file(con, tmp_path / "logs").duplicate_of == first.trace_id    # the same bytes, named otherwise
    # one file of the set alone is other bytes
    assert ingest_file(con, tmp_path / "logs" / "day=2" / "part-000.parquet").duplicate_of is None


def test_rejects_name_their_file_and_row_and_trace_rows_run_through_the_files(con, tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    write(folder / "a.csv", HEADER + "1,10,5\n2,20,6\nbad\n4,30,x\n")
    write(folder / "b.csv", HEADER + "5,40,7\n6,1\n7,50,8\n")
    result = ingest_file(con, folder)
    assert (result.rows, result.rejected, result.files) == (4, 3, 2)
    # a.csv holds trace rows 1-4, b.csv rows 5-7; a one-field line is one reject, not one per missing column
    assert [r[:2] for r in store.rejects_of(con, result.trace_id)] == [(3, "bad"), (4, "4,30,x"), (6, "6,1")]
    reasons = [r[2] for r in store.rejects_of(con, result.trace_id)]
    assert reasons[0].startswith("a.csv row 3: missing columns")
    assert reasons[1].startswith("a.csv row 4: output_tokens") and reasons[2].startswith("b.csv row 2: missing")
    assert [r[0] for r in canonical_rows(con, result.trace_id)] == [1, 2, 5, 7]


def test_an_existing_file_is_itself_even_with_glob_characters_in_its_name(con, tmp_path):
    write(tmp_path / "t1.csv", HEADER + "0,1,1\n")
    write(tmp_path / "t2.csv", HEADER + "0,2,2\n")
    literal = write(tmp_path / "t*.csv", HEADER + "0,3,3\n1,4,4\n2,5,5\n")
    result = ingest_file(con, literal)
    assert (result.rows, result.files) == (3, 1)
    fileset = resolve_files(str(tmp_path / "t[12].csv"))    # no file has that name: a glob, of t1 and t2
    assert fileset.kind == "glob" and [p.name for p in fileset.paths] == ["t1.csv", "t2.csv"]
    assert [p.name for p in resolve_files(str(tmp_path / "t?.csv")).paths] == ["t*.csv", "t1.csv", "t2.csv"]


@pytest.mark.parametrize("setup, expected", [
    ("nothing", "no files match"),
    ("empty_dir", "no trace files in it"),
    ("fifo", "not a regular file"),
    ("mixed", "same format and compression"),
    ("columns", "b.csv adds prompt, time; lacks input_tokens, timestamp against a.csv's columns; expected every "
                "file of one trace to have the same columns"),
    # DuckDB's reader had dropped the second file's extra column without a word
    ("extra", "b.csv adds model against a.csv's columns"),
])
def test_what_cannot_be_one_trace_is_refused_by_name_and_stores_nothing(con, tmp_path, setup, expected):
    target = tmp_path / "in"
    if setup == "nothing":
        target = tmp_path / "none-*.csv"
    elif setup == "empty_dir":
        target.mkdir()
        (target / "_SUCCESS").write_text("")
    elif setup == "fifo":
        os.mkfifo(target)
    elif setup == "mixed":
        target.mkdir()
        write(target / "a.csv", HEADER + "0,1,1\n")
        write(target / "b.jsonl", json.dumps({"timestamp": 1, "input_tokens": 2, "output_tokens": 3}) + "\n")
    elif setup == "extra":
        target.mkdir()
        write(target / "a.csv", HEADER + "0,1,1\n")
        write(target / "b.csv", "timestamp,input_tokens,output_tokens,model\n1,1,1,x\n")
    else:
        target.mkdir()
        write(target / "a.csv", HEADER + "0,1,1\n")
        write(target / "b.csv", "time,prompt,output_tokens\n0,1,1\n")
    with pytest.raises(PlannerError, match=expected):
        ingest_file(con, target)
    assert store.list_traces(con) == []
    assert con.execute("SELECT count(*) FROM trace_files").fetchone()[0] == 0


def test_the_cli_takes_a_quoted_glob_and_reports_the_file_count(db_path, tmp_path):
    _parts(tmp_path / "p", [3, 4])
    out = subprocess.run([sys.executable, "-m", "planner", "ingest", str(tmp_path / "p" / "*.parquet"), "--db",
                          str(db_path), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert (obj["files"], obj["rows"], obj["rejected"]) == (2, 7, 0)


def test_a_store_from_before_multi_file_ingest_opens_with_one_file_per_trace(tmp_path):
    path = tmp_path / "old.duckdb"
    old = duckdb.connect(str(path))
    old.execute(store.SCHEMA.split("    files BIGINT")[0].rstrip().rstrip(",") + "\n);")
    old.execute("INSERT INTO traces VALUES ('t', 'old', 'a.csv', 'h', 'csv', 'none', 'generic', '{}', '{}', NULL, "
                "1, 0, 0, false, NULL, NULL, NULL, '[]', now()::TIMESTAMP)")
    old.close()
    con = store.open_store(path)
    assert store.get_trace(con, "old").files == 1


def test_a_bad_value_in_a_parquet_part_names_its_part_and_row(con, tmp_path):
    """Parquet parts store no file column (their footers give each part's rows): a reject still names its part."""
    folder = tmp_path / "parts"
    folder.mkdir()
    c = duckdb.connect()
    c.execute(f"COPY (SELECT range AS input_tokens, 5 AS output_tokens FROM range(4)) TO '{folder / 'a.parquet'}'")
    c.execute(f"COPY (SELECT CASE WHEN range = 2 THEN -7 ELSE range END AS input_tokens, 5 AS output_tokens "
              f"FROM range(3)) TO '{folder / 'b.parquet'}'")
    result = ingest_file(con, folder)
    assert (result.rows, result.rejected) == (6, 1)
    [(row, raw, reason)] = store.rejects_of(con, result.trace_id)
    assert row == 7 and reason.startswith("b.parquet row 3: input_tokens (column 'input_tokens'): -7 is negative")
    assert "file" not in con.sql(f"SELECT * FROM {store.requests_data_table(result.trace_id)} LIMIT 0").columns


def test_files_whose_relative_times_start_alike_are_said_to_overlay(con, tmp_path):
    # two parts each counting seconds from 0: read as one clock their requests interleave, at twice the rate
    (tmp_path / "rel").mkdir()
    for name in ("part0.csv", "part1.csv"):
        write(tmp_path / "rel" / name, "arrival_s,input_tokens,output_tokens\n"
              + "".join(f"{i},100,5\n" for i in range(50)))
    result = ingest_file(con, tmp_path / "rel")
    assert any(n.startswith("2 files count their times from the same start (part0.csv, part1.csv)")
               for n in result.notes)
    # one following the other is a stretch of time after it: nothing to say
    write(tmp_path / "rel" / "part1.csv", "arrival_s,input_tokens,output_tokens\n"
          + "".join(f"{60 + i},100,5\n" for i in range(50)))
    later = ingest_file(con, tmp_path / "rel")
    assert not any("same start" in n for n in later.notes)
