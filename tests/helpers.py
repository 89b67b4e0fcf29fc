"""Helpers shared by the tests (a module of its own: tests/e2e has a conftest too)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.traces import store

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"

needs_shared = pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")


def write(path: Path, text: str | bytes, compress: str = "none") -> Path:
    data = text.encode() if isinstance(text, str) else text
    if compress == "gzip":
        data = gzip.compress(data)
    elif compress == "zstd":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def run_cli(*args: str, db: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PLANNER_DB": str(db)}
    env.pop("PLANNER_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "planner", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def cli_json(*args: str, db: Path) -> dict:
    proc = run_cli(*args, "--json", db=db)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def canonical_rows(con, trace_id: str, columns: str = '"row", arrival, input_tokens, output_tokens') -> list:
    return con.execute(f"SELECT {columns} FROM {store.requests_view(trace_id)} ORDER BY \"row\"").fetchall()
