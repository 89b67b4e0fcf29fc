"""The Docker image's production settings, booted on the host: its entrypoint with its environment and config, as a
user who can write only the volume and /tmp. Health answers (and fails once the server is gone), an upload from the
browser lands in the store on the volume, a restart keeps every trace, and nothing is written inside /app."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from helpers import IDLE
from image import free_port, lay_out, tree
from playwright.sync_api import expect

from planner.traces import store

pytestmark = pytest.mark.signin



def healthy(image, port: int) -> bool:
    """The image's HEALTHCHECK command, run as Docker would: exit 0 is healthy."""
    return subprocess.run(image.healthcheck(port), env=image.env(), capture_output=True, timeout=30).returncode == 0


def test_the_image_entrypoint_serves_stores_on_the_volume_and_keeps_traces_across_a_restart(page, tmp_path):
    rng = np.random.default_rng(7)
    trace = tmp_path / "volume-check.csv"
    trace.write_text("arrival,input_tokens,output_tokens\n" + "\n".join(
        f"{0.5 * k:.1f},{rng.integers(50, 900)},{rng.integers(10, 300)}" for k in range(321)) + "\n")
    image, port = lay_out(), free_port()
    app_files = tree(image.app)
    log = image.root / "server.log"
    try:
        server = image.start(port, log)
        assert healthy(image, port)
        assert "sign-in off: one shared workspace; store " + str(image.volume / "planner.duckdb") in log.read_text()
        url = f"http://127.0.0.1:{port}"
        page.goto(url + "/traces")
        page.wait_for_selector(IDLE, timeout=90_000)
        page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(trace))
        page.get_by_role("button", name="Ingest", exact=True).click()
        expect(page.get_by_test_id("stMetric").filter(has_text="Stored").get_by_test_id("stMetricValue")) \
            .to_have_text("321", timeout=120_000)
        server.terminate()
        assert server.wait(timeout=30) == 0
        assert not healthy(image, port)              # the check fails when nothing answers: it can tell

        assert "planner.duckdb" in tree(image.volume)
        assert tree(image.app) == app_files         # nothing written inside /app: only the volume and /tmp
        con = store.open_store(image.volume / "planner.duckdb")
        stored = {t.name: (t.trace_id, t.rows) for t in store.list_traces(con)}
        con.close()
        assert stored["volume-check"][1] == 321 and "sample_chat" in stored

        server = image.start(port, log)             # the container restarted on the same volume
        assert healthy(image, port)
        page.goto(url + "/overview?trace=volume-check")
        page.wait_for_selector(IDLE, timeout=90_000)
        expect(page.get_by_test_id("stSidebar").get_by_text(stored["volume-check"][0])).to_be_visible(timeout=60_000)
        server.terminate()
        assert server.wait(timeout=30) == 0
        con = store.open_store(image.volume / "planner.duckdb")
        assert {t.name: (t.trace_id, t.rows) for t in store.list_traces(con)} == stored     # every trace kept, once
        con.close()
    finally:
        image.remove()
