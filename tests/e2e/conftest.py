import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from image import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def pytest_collection_modifyitems(items):
    for item in items:
        if "e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
            if not os.path.exists(CHROMIUM) and not os.environ.get("E2E_REQUIRED"):
                item.add_marker(pytest.mark.skip(reason="Debian chromium is not installed (apt-get install chromium)"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run"]}


def start_server(tmp_path_factory, **extra_env):
    """A real Streamlit server on a fresh store, as `make run` starts it."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    env = {**os.environ, "PLANNER_DB": str(tmp_path_factory.mktemp("db") / "e2e.duckdb"), **extra_env}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true",
                                 f"--server.port={port}", "--server.address=127.0.0.1",
                                 "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wait_healthy(proc, port, log, timeout_s=90)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def launch_server(tmp_path_factory):
    """Start a server with extra environment (``PLANNER_DB`` for a store the test prepared): the caller stops it."""
    return lambda **extra_env: start_server(tmp_path_factory, **extra_env)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    proc, url = start_server(tmp_path_factory)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
def small_upload_server(tmp_path_factory):
    """A server whose operator lowered the upload limit to 1 MB."""
    proc, url = start_server(tmp_path_factory, PLANNER_MAX_UPLOAD_MB="1")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where end-to-end tests leave screenshots (E2E_ARTIFACTS, else tests/artifacts)."""
    path = Path(os.environ.get("E2E_ARTIFACTS", ROOT / "tests" / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def fresh_server(tmp_path_factory):
    """A server nobody has visited yet: its first request is the one under test."""
    proc, url = start_server(tmp_path_factory)
    yield url
    proc.terminate()
    proc.wait(timeout=20)
