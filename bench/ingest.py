"""Ingest benchmark: a 10M-row CSV through the CLI vs a bare DuckDB load of the same file, in the same run.

Prints the time ratio (goal <= 1.5) and peak RSS of the ingest (goal <= 1.5 GB). Usage:
    python bench/ingest.py [--rows 10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


def write_csv(path: Path, rows: int) -> None:
    """An Azure-like log: microsecond datetimes, a model column and heavy-tailed lengths."""
    duckdb.connect().execute(f"""
        COPY (
            SELECT strftime(TIMESTAMP '2024-05-10 00:00:00'
                                + to_microseconds(CAST(i * 36000 + hash(i) % 30000 AS BIGINT)),
                            '%Y-%m-%d %H:%M:%S.%f') AS "TIMESTAMP",
                   CASE WHEN i % 3 = 0 THEN 'llama-3-70b' ELSE 'llama-3-8b' END AS model,
                   1 + CAST(exp(6.5 + 1.2 * sin(i * 0.37) + (hash(i * 7) % 1000) / 1000.0) AS BIGINT) % 8000
                       AS "ContextTokens",
                   CAST(1 + (hash(i * 13) % 100000) / 100000.0 * 600 AS BIGINT) AS "GeneratedTokens"
            FROM range({rows}) t(i)
        ) TO '{path}' (HEADER, DELIMITER ',')""")




def run_measured(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    wrapper = [sys.executable, "-c",
               "import resource, subprocess, sys, time, json;"
               "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
               "dt = time.perf_counter() - t;"
               "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024;"
               "print(json.dumps({'s': dt, 'rss_mb': rss, 'rc': p.returncode, 'out': p.stdout, 'err': p.stderr}))",
               *cmd]
    proc = subprocess.run(wrapper, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    res = json.loads(proc.stdout)
    if res["rc"] != 0:
        sys.exit(f"benchmark command failed: {' '.join(cmd)}\n{res['err']}")
    return res["s"], res["rss_mb"], res["out"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        csv = tmp / "trace.csv"
        t = time.perf_counter()
        write_csv(csv, args.rows)
        print(f"wrote {args.rows:,} rows, {csv.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t:.1f} s",
              flush=True)
        bare, ours = [], []
        for i in range(args.repeat):
            db_bare, db_ours = tmp / f"bare{i}.duckdb", tmp / f"ours{i}.duckdb"
            bare.append(run_measured([sys.executable, "-c",
                                      "import duckdb, sys; duckdb.connect(sys.argv[1]).execute("
                                      "f\"CREATE TABLE t AS SELECT * FROM read_csv('{sys.argv[2]}')\")",
                                      str(db_bare), str(csv)]))
            env = {**os.environ, "PLANNER_DB": str(db_ours)}
            ours.append(run_measured([sys.executable, "-m", "planner", "ingest", str(csv), "--json", "--quiet"],
                                     env=env))
            result = json.loads(ours[-1][2])
            assert result["rows"] == args.rows and result["rejected"] == 0, result
            print(f"run {i + 1}: bare {bare[-1][0]:.2f} s ({bare[-1][1]:.0f} MB), "
                  f"ingest {ours[-1][0]:.2f} s ({ours[-1][1]:.0f} MB)", flush=True)
            for db in (db_bare, db_ours):
                db.unlink()
        bare_s = statistics.median(b[0] for b in bare)
        ours_s = statistics.median(o[0] for o in ours)
        peak = max(o[1] for o in ours)
        print(f"median bare DuckDB load: {bare_s:.2f} s; planner ingest: {ours_s:.2f} s; "
              f"ratio {ours_s / bare_s:.2f} (goal <= 1.5)")
        print(f"ingest peak RSS {peak:,.0f} MB (goal <= 1536 MB); bare load peak RSS "
              f"{max(b[1] for b in bare):,.0f} MB")


if __name__ == "__main__":
    main()
