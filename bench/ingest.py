"""Ingest benchmark: a 10M-row CSV through the CLI vs a bare DuckDB load of the same file, in the same run.

Prints the time ratio (goal <= 1.5) and peak RSS of the ingest (goal <= 1.5 GB). Usage:
    python bench/ingest.py [--rows 10000000] [--repeat 3] [--busy]

With ``--busy`` one CPU-bound process runs beside both measurements (the goal holds on a busy machine too).
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
_READ_CHUNK_BYTES = 1 << 24


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


def warm_cache(path: Path) -> None:
    """Read the file once, so that each measured command finds it in the page cache, as the other one did."""
    with open(path, "rb", buffering=0) as fh:
        while fh.read(_READ_CHUNK_BYTES):
            pass


def run_measured(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stdout of ``cmd`` run as a child process (interpreter start included)."""
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
    parser.add_argument("--busy", action="store_true", help="run one CPU-bound process beside the measurements")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        csv = tmp / "trace.csv"
        t = time.perf_counter()
        write_csv(csv, args.rows)
        print(f"wrote {args.rows:,} rows, {csv.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t:.1f} s",
              flush=True)
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
        try:
            runs: dict[str, list[tuple[float, float, str]]] = {"bare": [], "ingest": []}
            for i in range(args.repeat):
                db_bare, db_ours = tmp / f"bare{i}.duckdb", tmp / f"ours{i}.duckdb"
                commands = {
                    "bare": ([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).execute("
                              "f\"CREATE TABLE t AS SELECT * FROM read_csv('{sys.argv[2]}')\")",
                              str(db_bare), str(csv)], None),
                    "ingest": ([sys.executable, "-m", "planner", "ingest", str(csv), "--json", "--quiet"],
                               {**os.environ, "PLANNER_DB": str(db_ours)}),
                }
                # alternate which goes first, so that a drift in the machine's load falls on both alike
                for key in ("bare", "ingest") if i % 2 == 0 else ("ingest", "bare"):
                    warm_cache(csv)
                    runs[key].append(run_measured(*commands[key]))
                bare, ours = runs["bare"][-1], runs["ingest"][-1]
                result = json.loads(ours[2])
                assert result["rows"] == args.rows and result["rejected"] == 0, result
                print(f"run {i + 1}: bare {bare[0]:.2f} s ({bare[1]:.0f} MB), ingest {ours[0]:.2f} s "
                      f"({ours[1]:.0f} MB), ratio {ours[0] / bare[0]:.2f}; load average {os.getloadavg()[0]:.1f}",
                      flush=True)
                for db in (db_bare, db_ours):
                    db.unlink()
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        bare_s = statistics.median(r[0] for r in runs["bare"])
        ours_s = statistics.median(r[0] for r in runs["ingest"])
        print(f"{args.rows:,} rows{', one CPU-bound process beside' if args.busy else ''}: median bare DuckDB "
              f"load {bare_s:.2f} s; planner ingest {ours_s:.2f} s; ratio {ours_s / bare_s:.2f} (goal <= 1.5)")
        print(f"ingest peak RSS {max(r[1] for r in runs['ingest']):,.0f} MB (goal <= 1536 MB); bare load peak RSS "
              f"{max(r[1] for r in runs['bare']):,.0f} MB")


if __name__ == "__main__":
    main()
