"""The app as a shared service: SQL metacharacters in names and columns, concurrent ingests, a killed ingest,
per-user workspaces, and the deployment files."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib

import numpy as np
import pytest
from helpers import ROOT
from image import directives as dockerfile_directives
from image import json_list

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.samples import SAMPLE_PATH
from planner.workload.stats import trace_stats

NASTY_NAME = "x'); DROP TABLE traces; --\"; SELECT 1; --"
NASTY_COLUMN = 'in"put\'; DROP TABLE traces; --'


def schema_tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def test_sql_metacharacters_in_names_and_columns_are_data(con, tmp_path):
    path = tmp_path / "nasty.csv"
    path.write_text(f'"{NASTY_COLUMN.replace(chr(34), chr(34) * 2)}",output;--,"arrival"\n10,5,0.5\n20,6,1.5\n')
    info = ingest_file(con, path, name=NASTY_NAME,
                       overrides={"input_tokens": NASTY_COLUMN, "output_tokens": "output;--", "arrival": "arrival"})
    assert info.rows == 2 and info.name == NASTY_NAME
    stored = store.get_trace(con, NASTY_NAME)
    assert stored.mapping["input_tokens"] == NASTY_COLUMN and stored.mapping["output_tokens"] == "output;--"
    stats = trace_stats(con, NASTY_NAME)
    assert stats["input_tokens"]["max"] == 20 and stats["output_tokens"]["mean"] == 5.5
    assert {"traces", "rejects", "workspace_traces", "reports"} <= schema_tables(con)
    store.delete_trace(con, stored.trace_id)
    assert store.list_traces(con) == [] and {"traces", "rejects"} <= schema_tables(con)


def write_trace(path, n: int, seed: int):
    rng = np.random.default_rng(seed)
    rows = "\n".join(f"{t:.4f},{i},{o}" for t, i, o in zip(np.cumsum(rng.exponential(1.0, n)),
                                                           rng.integers(1, 4000, n), rng.integers(1, 900, n),
                                                           strict=True))
    path.write_text("arrival,input_tokens,output_tokens\n" + rows + "\n")
    return path


def test_eight_concurrent_ingests_lose_no_row(con, tmp_path):
    sizes = [5_000 + 1_337 * i for i in range(8)]
    files = [write_trace(tmp_path / f"t{i}.csv", n, seed=i) for i, n in enumerate(sizes)]
    results, errors = {}, []
    start = threading.Barrier(8)

    def upload(i):
        try:
            start.wait()
            results[i] = ingest_file(con, files[i], name="upload")      # every session asks for the same name
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(exc))
    threads = [threading.Thread(target=upload, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.rows for r in results.values()) == sizes
    names = {r.name for r in results.values()}
    assert names == {"upload"} | {f"upload-{k}" for k in range(2, 9)}          # unique, none lost
    for i, result in results.items():
        counted = con.execute(f"SELECT count(*), sum(input_tokens) FROM {store.requests_view(result.trace_id)}")
        rows, tokens = counted.fetchone()
        raw = np.loadtxt(files[i], delimiter=",", skiprows=1)
        assert rows == sizes[i] and tokens == raw[:, 1].sum()


def test_a_killed_ingest_leaves_the_store_consistent(tmp_path):
    db = tmp_path / "k.duckdb"
    first = store.open_store(db)
    ingest_file(first, SAMPLE_PATH, name="kept")
    before = schema_tables(first)
    first.close()
    big = tmp_path / "big.csv"
    rng = np.random.default_rng(0)
    n = 6_000_000
    block = np.column_stack([np.arange(n) * 0.01, rng.integers(1, 8000, n), rng.integers(1, 2000, n)])
    np.savetxt(big, block, fmt=("%.2f", "%d", "%d"), delimiter=",", header="arrival,input_tokens,output_tokens",
               comments="")
    env = {**os.environ, "PLANNER_DB": str(db)}
    proc = subprocess.Popen([sys.executable, "-m", "planner", "ingest", str(big), "--name", "doomed"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    deadline = time.time() + 120
    while "parsing rows" not in seen and time.time() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    time.sleep(0.3)                                    # well inside the transaction's bulk load
    assert proc.poll() is None, "the ingest finished before it could be killed: make the file larger"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    after = store.open_store(db)
    assert [t.name for t in store.list_traces(after)] == ["kept"]
    assert schema_tables(after) == before                         # no half-written table or view
    again = ingest_file(after, big, name="doomed")                # and the store takes the same file whole
    assert again.rows == n and after.execute(f"SELECT count(*) FROM {store.requests_view(again.trace_id)}") \
        .fetchone()[0] == n
    after.close()


def test_workspaces_list_each_users_traces_and_the_shared_ones(con, tmp_path):
    shared = ingest_file(con, SAMPLE_PATH, name="sample")
    alice = ingest_file(con, write_trace(tmp_path / "a.csv", 50, 1), name="a", owner="alice@example.com")
    bob = ingest_file(con, write_trace(tmp_path / "b.csv", 60, 2), name="b", owner="bob@example.com")
    listed = {who: {t.name for t in store.list_traces(con, who)} for who in ("alice@example.com", "bob@example.com")}
    assert listed == {"alice@example.com": {"sample", "a"}, "bob@example.com": {"sample", "b"}}
    assert {t.name for t in store.list_traces(con)} == {"sample", "a", "b"}   # no sign-in: one workspace
    # the same bytes uploaded by bob join his workspace without a second copy
    again = ingest_file(con, tmp_path / "a.csv", owner="bob@example.com")
    assert again.duplicate_of == alice.trace_id
    assert {t.name for t in store.list_traces(con, "bob@example.com")} == {"sample", "a", "b"}
    store.remove_trace(con, alice.trace_id, "bob@example.com")                # bob's link goes, alice keeps it
    assert "a" in {t.name for t in store.list_traces(con, "alice@example.com")}
    assert "a" not in {t.name for t in store.list_traces(con, "bob@example.com")}
    # the same bytes read another way: a trace of bob's own, and no note naming alice's trace or its id
    other = ingest_file(con, tmp_path / "a.csv", owner="bob@example.com", unit_overrides={"arrival": "ms"})
    assert other.trace_id != alice.trace_id and not any(alice.trace_id in n for n in other.notes)
    store.remove_trace(con, other.trace_id, "bob@example.com")
    # the shared sample uploaded again by a signed-in user stays shared, not taken into one workspace
    assert ingest_file(con, SAMPLE_PATH, owner="bob@example.com").duplicate_of == shared.trace_id
    assert "sample" in {t.name for t in store.list_traces(con, "alice@example.com")}
    assert shared.trace_id not in store.owned_trace_ids(con, "bob@example.com")
    # a shared trace is nobody's to remove, and no user's trace takes its id for a name
    with pytest.raises(PlannerError, match="reads as a trace id"):
        ingest_file(con, write_trace(tmp_path / "c.csv", 40, 3), name=shared.trace_id, owner="bob@example.com")
    with pytest.raises(PlannerError, match="not in your workspace"):
        store.remove_trace(con, shared.trace_id, "bob@example.com")
    assert store.get_trace(con, shared.trace_id).name == "sample"
    store.remove_trace(con, bob.trace_id, "bob@example.com")                  # nobody else has it: deleted
    assert {t.name for t in store.list_traces(con)} == {"sample", "a"}
    assert store.owned_trace_ids(con, "alice@example.com") == {alice.trace_id} and shared.rows == 8397


def test_dockerfile_runs_unprivileged_healthy_and_on_a_volume():
    text = (ROOT / "Dockerfile").read_text()
    directives = dockerfile_directives()
    kinds = [d for d, _ in directives]
    assert directives[0] == ("FROM", "python:3.11-slim")
    user = [v for d, v in directives if d == "USER"]
    assert user and user[-1] not in ("root", "0") and kinds.index("USER") < kinds.index("ENTRYPOINT")
    assert re.search(r"useradd .*--uid 10001", text)
    health = dict(directives)["HEALTHCHECK"]
    assert "/_stcore/health" in health and "b'ok'" in health
    env = dict(directives)["ENV"]
    assert "PLANNER_DB=/data/planner.duckdb" in env
    assert "PLANNER_SERVER_PATHS" not in text       # reading server files stays off unless an operator turns it on
    assert json_list(dict(directives)["VOLUME"]) == ["/data"] and dict(directives)["EXPOSE"] == "8501"
    entry = json_list(dict(directives)["ENTRYPOINT"])
    assert entry == ["python", "-m", "planner", "serve", "--port=8501", "--address=0.0.0.0"]
    copied = {v.split()[0] for d, v in directives if d == "COPY"}
    assert {"app.py", "planner", "pages", "traces", ".streamlit/config.toml"} <= copied
    for path in copied:
        assert (ROOT / path).exists(), path
    # the healthcheck's command is valid Python
    command = json_list(health.split("CMD", 1)[1])
    compile(command[2], "healthcheck", "exec")
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "*.duckdb", ".streamlit/secrets.toml"} <= set(ignored)


def test_production_streamlit_config():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    server = config["server"]
    assert server["headless"] and server["fileWatcherType"] == "none" and server["enableXsrfProtection"]
    assert server["maxUploadSize"] >= 200
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"] == {"toolbarMode": "viewer", "showErrorDetails": "type"}
    guide = (ROOT / "docs" / "DEPLOY.md").read_text()
    for needle in ("proxy_set_header Upgrade", "/_stcore/stream", "/_stcore/health", "[auth]", "one replica"):
        assert needle.lower() in guide.lower(), needle
    assert "-v planner-data:/data" in guide and "docker build -t llm-capacity-planner ." in guide
