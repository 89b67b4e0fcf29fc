"""End to end in Debian's chromium: a real trace uploaded, analysed, recommended on and reported; the report opens
offline and from its link; a script payload stays text; an upload over the limit is refused with a message.
Screenshots of every page are left in the artifacts folder."""

import re

import numpy as np
import pytest
from helpers import IDLE, SHARED_TRACES, needs_shared
from playwright.sync_api import expect

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.recommend.plan import RecommendOptions
from planner.report.build import build_report
from planner.report.render import SECTIONS, chart_svgs, to_html
from planner.scenario import Scenario
from planner.traces import store
from planner.traces.ingest import ingest_file

AZURE = SHARED_TRACES / "AzureLLMInferenceTrace_conv.csv"
NAME = "AzureLLMInferenceTrace_conv"


def settle(page, timeout=300_000):
    page.wait_for_selector(IDLE, timeout=timeout)



def open_offline(browser, path, artifacts, shot: str):
    """The file in a context with no network at all; returns the page and every URL it asked for."""
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requested, dialogs = [], []
    page.on("request", lambda r: requested.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    page.screenshot(path=artifacts / shot, full_page=False)
    return page, requested, dialogs


@needs_shared
def test_upload_analyse_recommend_report_and_share(page, browser, fresh_server, artifacts, tmp_path):
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(fresh_server + "/traces")
    settle(page, 90_000)
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(AZURE))
    ingest = page.get_by_role("button", name="Ingest")
    expect(ingest).to_be_visible(timeout=90_000)
    ingest.click()
    rows = sum(1 for _ in AZURE.open()) - 1
    expect(page.get_by_test_id("stMetric").filter(has_text="Stored").get_by_test_id("stMetricValue")) \
        .to_have_text(f"{rows:,}", timeout=120_000)
    page.screenshot(path=artifacts / "traces.png")

    page.goto(f"{fresh_server}/workload?trace={NAME}")
    settle(page)
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible(timeout=120_000)
    page.screenshot(path=artifacts / "workload.png")

    page.goto(f"{fresh_server}/recommend?trace={NAME}&max_len=8192")
    # the infeasible class's command sits in a collapsed expander: look at visible ones only
    expect(page.get_by_text("vllm serve meta-llama/Meta-Llama-3-8B --max-num-seqs").locator("visible=true")
           .first).to_be_visible(timeout=300_000)
    settle(page)
    page.screenshot(path=artifacts / "recommend.png")

    page.goto(f"{fresh_server}/report?trace={NAME}&max_len=8192")
    settle(page)
    page.get_by_role("button", name="Build and save the report").click()
    expect(page.get_by_text("Saved:")).to_be_visible(timeout=600_000)
    settle(page)
    page.screenshot(path=artifacts / "report.png")
    link = page.get_by_test_id("stCode").inner_text().strip()
    report_id = re.search(r"\?report=([A-Za-z0-9_-]{22})$", link).group(1)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download HTML").click()
    saved = tmp_path / "report.html"
    download.value.save_as(saved)

    offline, requested, dialogs = open_offline(browser, saved, artifacts, "report-offline.png")
    expect(offline.locator("h1")).to_contain_text(f"Capacity report: {NAME}")
    for key, title in SECTIONS:
        expect(offline.locator(f"section#{key} h2")).to_have_text(title)
    charts = offline.locator("figure img")
    assert charts.count() >= 8
    assert all(charts.nth(i).evaluate("img => img.complete && img.naturalWidth > 0") for i in range(charts.count()))
    assert offline.locator("section#recommendations pre").first.inner_text().startswith("vllm serve ")
    assert requested == [saved.as_uri()] and not dialogs            # nothing fetched, nothing executed
    offline.context.close()

    page.goto(f"{fresh_server}/?report={report_id}")
    settle(page)
    expect(page.get_by_text("Shared capacity report")).to_be_visible(timeout=60_000)
    expect(page.get_by_role("heading", name=f"Capacity report: {NAME}")).to_be_visible(timeout=60_000)
    expect(page.locator("figure img").first).to_be_visible()           # charts survive st.html's sanitizer
    page.screenshot(path=artifacts / "shared-report.png")
    for path in ("overview", "memory", "simulate"):
        page.goto(f"{fresh_server}/{path}?trace={NAME}&max_len=8192")
        settle(page)
        page.screenshot(path=artifacts / f"{path}.png")


def test_a_script_payload_in_a_trace_name_stays_text_in_chromium(browser, artifacts, tmp_path):
    payload = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    con = store.open_store(tmp_path / "p.duckdb")
    rng = np.random.default_rng(1)
    rows = "\n".join(f"{0.4 * k:.1f},{rng.integers(50, 900)},{rng.integers(10, 300)}" for k in range(200))
    (tmp_path / "t.csv").write_text("arrival,input_tokens,output_tokens\n" + rows + "\n")
    info = ingest_file(con, tmp_path / "t.csv", name=payload)
    report = build_report(con, info.trace_id, Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"),
                                                       max_model_len=4096), RecommendOptions())
    path = tmp_path / "payload.html"
    path.write_text(to_html(report, chart_svgs(report.charts)))
    page, requested, dialogs = open_offline(browser, path, artifacts, "payload-report.png")
    expect(page.locator("h1")).to_contain_text(payload)                  # shown literally, as text
    assert page.locator("script").count() == 0
    assert page.locator("img:not([src^='data:image/svg+xml;base64,'])").count() == 0   # only the chart images
    page.wait_for_timeout(500)
    assert not dialogs and requested == [path.as_uri()]
    page.context.close()


@pytest.mark.parametrize("megabytes", [2])
def test_an_upload_over_the_limit_is_refused_with_a_message(page, small_upload_server, artifacts, megabytes):
    page.goto(small_upload_server + "/traces")
    settle(page, 90_000)
    big = b"arrival,input_tokens,output_tokens\n" + b"1.0,100,20\n" * (megabytes * 1024 * 1024 // 11)
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": "big.csv", "mimeType": "text/csv", "buffer": big}])
    expect(page.get_by_text("File must be 1.0MB or smaller.")).to_be_attached(timeout=30_000)
    expect(page.get_by_text("Up to 1 MB per file here")).to_be_visible()
    page.screenshot(path=artifacts / "upload-over-limit.png")
    expect(page.get_by_role("button", name="Ingest")).to_have_count(0)
