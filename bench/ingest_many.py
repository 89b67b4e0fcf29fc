"""Many-file ingest benchmark: a trace of 100M requests in 20 Parquet files, ingested through a glob, against a bare
DuckDB ``CREATE TABLE AS SELECT * FROM read_parquet(glob)`` of the same files in the same run; then ``stats`` and
``fit`` on the stored trace.

Prints the time ratio (goal <= 1.5), the ingest's peak RSS (goal <= 4 GiB) and the seconds ``stats`` and each
``fit`` take (goal: stats + fit within 30 s). Each command runs as a child process, interpreter start included.
Usage: python bench/ingest_many.py [--rows 100000000] [--files 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import run_measured, warm_cache  # noqa: E402

FIT_FIELDS = ("input_tokens", "output_tokens", "interarrival")


def write_parts(folder: Path, rows: int, files: int) -> list[Path]:
    """A fleet's log split as a job writes it: ``files`` Parquet parts in arrival order, about 1,000 req/s with
    jittered gaps, two models, heavy-tailed lengths."""
    con = duckdb.connect()
    per = -(-rows // files)
    paths = []
    for k in range(files):
        lo, hi = k * per, min(rows, (k + 1) * per)
        path = folder / f"part-{k:05d}.parquet"
        con.execute(f"""
            COPY (
                SELECT i / 1000.0 + (hash(i) % 1000) / 1.0e6 AS "timestamp",
                       CASE WHEN i % 3 = 0 THEN 'llama-3-70b' ELSE 'llama-3-8b' END AS model,
                       1 + CAST(exp(6.0 + 1.2 * sin(i * 0.37) + (hash(i * 7) % 1000) / 1000.0) AS BIGINT) % 8000
                           AS input_tokens,
                       CAST(1 + (hash(i * 13) % 100000) / 100000.0 * 600 AS BIGINT) AS output_tokens
                FROM range({lo}, {hi}) t(i)
            ) TO '{path}' (FORMAT parquet)""")
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-ingest-many-", dir=os.environ.get("BENCH_TMP")) as tmp:
        tmp = Path(tmp)
        parts = tmp / "parts"
        parts.mkdir()
        t = time.perf_counter()
        paths = write_parts(parts, args.rows, args.files)
        size = sum(p.stat().st_size for p in paths)
        print(f"wrote {args.rows:,} rows in {len(paths)} Parquet files, {size / 1e6:,.0f} MB, in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        glob = str(parts / "part-*.parquet")
        bare_runs, ours_runs = [], []
        for i in range(args.repeat):
            db_bare, db_ours = tmp / f"bare{i}.duckdb", tmp / f"ours{i}.duckdb"
            commands = {
                "bare": ([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).execute("
                          "f\"CREATE TABLE t AS SELECT * FROM read_parquet('{sys.argv[2]}')\")", str(db_bare), glob],
                         None),
                "ingest": ([sys.executable, "-m", "planner", "ingest", glob, "--json", "--quiet"],
                           {**os.environ, "PLANNER_DB": str(db_ours)}),
            }
            for key in ("bare", "ingest") if i % 2 == 0 else ("ingest", "bare"):
                for p in paths:
                    warm_cache(p)
                (bare_runs if key == "bare" else ours_runs).append(run_measured(*commands[key]))
            bare, ours = bare_runs[-1], ours_runs[-1]
            result = json.loads(ours[2])
            assert result["rows"] == args.rows and result["rejected"] == 0 and result["files"] == len(paths), result
            print(f"run {i + 1}: bare {bare[0]:.1f} s ({bare[1]:,.0f} MB), ingest {ours[0]:.1f} s ({ours[1]:,.0f} MB),"
                  f" ratio {ours[0] / bare[0]:.2f}; store {db_ours.stat().st_size / 1e6:,.0f} MB", flush=True)
            db_bare.unlink()
            if i < args.repeat - 1:
                db_ours.unlink()
        env = {**os.environ, "PLANNER_DB": str(db_ours)}
        trace = result["trace_id"]
        timings = {"stats": run_measured([sys.executable, "-m", "planner", "stats", trace, "--json"], env)}
        for fld in FIT_FIELDS:
            timings[f"fit {fld}"] = run_measured([sys.executable, "-m", "planner", "fit", trace, "--field", fld,
                                                  "--json"], env)
        for name, (seconds, rss, _) in timings.items():
            print(f"{name}: {seconds:.1f} s, peak RSS {rss:,.0f} MB")
        bare_s = statistics.median(r[0] for r in bare_runs)
        ours_s = statistics.median(r[0] for r in ours_runs)
        ratio = statistics.median(o[0] / b[0] for o, b in zip(ours_runs, bare_runs, strict=True))
        lengths_s = timings["stats"][0] + timings["fit input_tokens"][0] + timings["fit output_tokens"][0]
        print(f"{args.rows:,} rows in {len(paths)} files: median bare DuckDB load {bare_s:.1f} s; planner ingest "
              f"{ours_s:.1f} s; median ratio {ratio:.2f} (goal <= 1.5); ingest peak RSS "
              f"{max(r[1] for r in ours_runs) / 1024:.2f} GiB (goal <= 4); stats + both length fits "
              f"{lengths_s:.1f} s, + the inter-arrival fit {lengths_s + timings['fit interarrival'][0]:.1f} s "
              "(goal <= 30)")


if __name__ == "__main__":
    main()
