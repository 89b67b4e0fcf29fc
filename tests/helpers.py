"""Helpers shared by the tests (a module of its own: tests/e2e has a conftest too)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.sim.engines import ENGINES
from planner.sim.engines.base import ONE_REPLICA
from planner.traces import store

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"

# a Streamlit page whose script run has finished: what e2e tests wait for before they read the page
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"

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


def compiled_v1(arrival, prompt, output, cfg, coeffs, fleet=None):
    """The compiled vLLM V1 loop's run, checked to be the same whether it logs every step (each step its own
    iteration) or rarely (long decode stretches advanced in one go by ``decode_run``): identical requests and
    the sparse timeline exactly every 1,000th row of the full one. Returns the every-step run."""
    every, sparse = (ENGINES["vllm-v1"].run(arrival, prompt, output, cfg, coeffs, log_every, fleet or ONE_REPLICA)
                     for log_every in (1, 1000))
    for name in ("first_token", "finish", "first_scheduled", "preemptions", "rejected", "generated", "replica",
                 "hits", "rehits"):
        np.testing.assert_array_equal(getattr(every, name), getattr(sparse, name), err_msg=name)
    assert every.steps == sparse.steps and every.free_blocks_at_end == sparse.free_blocks_at_end
    np.testing.assert_array_equal(every.timeline[999::1000], sparse.timeline)
    return every


def app_page(page: str, db: Path, monkeypatch, timeout: float = 120, **params: str):
    """Streamlit's AppTest of the whole app (``app.py``, its frame included) on the store ``db``, opened with
    ``params`` in its URL and then switched to ``page`` (``pages/memory.py``): how a shared link is followed."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PLANNER_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    return at.switch_page(page).run()
