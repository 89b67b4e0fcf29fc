"""End to end in Debian's chromium: the app starts on the sample, an upload lands, a link reproduces the view."""

from helpers import IDLE
from playwright.sync_api import expect

UPLOAD = (b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
          b"5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,230,1317,Conversation log\n"
          b"50,GPT-4,0,0,0,Conversation log\n60,ChatGPT,abc,12,12,API log\n")


def metric(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def test_app_opens_on_the_bundled_sample(page, server):
    page.goto(server)
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(metric(page, "Requests")).to_have_text("8,397", timeout=60_000)
    expect(page.get_by_test_id("stSidebarNav")).to_contain_text("Traces")


def test_upload_ingest_and_share_a_link(page, server):
    page.goto(server + "/traces")
    page.wait_for_selector(IDLE, timeout=60_000)
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": "burst_e2e.csv", "mimeType": "text/csv", "buffer": UPLOAD}])
    ingest = page.get_by_role("button", name="Ingest")
    expect(ingest).to_be_visible(timeout=60_000)
    ingest.click()
    expect(metric(page, "Stored")).to_have_text("3", timeout=60_000)
    expect(metric(page, "Rejected")).to_have_text("1")
    expect(page.get_by_text("abc is not a number").first).to_be_attached()  # a data-grid cell (canvas-drawn)
    # the sidebar picker switched to the new trace and the URL carries it
    page.wait_for_function("() => window.location.search.includes('trace=burst_e2e')", timeout=60_000)

    page.goto(server + "/overview?trace=burst_e2e")
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(metric(page, "Requests")).to_have_text("3", timeout=60_000)
    expect(metric(page, "Failed")).to_have_text("1")


def test_a_shared_workload_link_reproduces_the_view_on_a_fresh_server(page, fresh_server):
    # the first request a server ever sees is a deep link: it must still go through app.py's frame
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(fresh_server + "/workload?trace=sample_chat&field=output_tokens&cap=512")
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(metric(page, "Cap")).to_have_text("512", timeout=60_000)
    expect(page.get_by_test_id("stSidebarNav")).not_to_contain_text("shared")   # not the legacy pages/ listing
    expect(page.locator("[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg")
           .first).to_be_visible(timeout=60_000)
    page.get_by_role("tab", name="Arrivals").click()
    expect(metric(page, "Poisson?")).to_have_text("rejected", timeout=60_000)
    page.wait_for_function("() => window.location.search.includes('view=Arrivals')", timeout=60_000)
    # back on Lengths, the controls kept their values while the tab was closed, and the URL carries them again
    page.get_by_role("tab", name="Lengths").click()
    expect(metric(page, "Cap")).to_have_text("512", timeout=60_000)
    page.wait_for_function("() => window.location.search.includes('cap=512')", timeout=60_000)
    assert "field=output_tokens" in page.url
    assert not errors, errors


def test_memory_page_link_reproduces_the_scenario(page, server):
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server + "/memory?model=llama-3-70b&tp=4&max_len=8192")
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(metric(page, "KV per token")).to_have_text("320 KiB", timeout=60_000)
    expect(metric(page, "Max concurrency")).to_contain_text("x")
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible(timeout=60_000)
    page.get_by_role("tab", name="Reservation policies").click()
    page.wait_for_function("() => window.location.search.includes('memory_view=')", timeout=60_000)
    expect(page.get_by_text("seed 002's procedure")).to_be_visible(timeout=60_000)
    assert not errors, errors


def test_a_link_value_the_scenario_cannot_take_is_named_not_silently_dropped(page, server):
    page.goto(server + "/memory?model=llama-3-70b&tp=3&util=1.5&max_len=8192")
    page.wait_for_selector(IDLE, timeout=60_000)
    notice = page.get_by_test_id("stAlertContentWarning").filter(has_text="Not applied from this link")
    expect(notice).to_contain_text("tp = 3 (showing 1)", timeout=60_000)
    expect(notice).to_contain_text("util = 1.5")
    expect(notice).not_to_contain_text("max_len")          # taken: it is no news
    expect(notice).not_to_contain_text("model")
    page.get_by_role("tab", name="Reservation policies").click()
    expect(notice).to_have_count(0, timeout=60_000)        # said on arrival, not on every run
    # a parameter of another page's control is not this page's to judge, here or once the user moves on
    page.goto(server + "/memory?cap=512&field=output_tokens")
    page.wait_for_selector(IDLE, timeout=60_000)
    page.get_by_test_id("stSidebarNav").get_by_text("Workload").click()
    expect(metric(page, "Cap")).to_be_visible(timeout=60_000)
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(page.get_by_text("Not applied from this link")).to_have_count(0)


def test_simulate_page_link_reproduces_the_run(page, server):
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server + "/simulate?source=synthetic&engine=static&spec=requests%3D200%2Cinput%3D512%2Coutput%3D128"
                       "%2Cqps%3D4&max_len=8192")
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(metric(page, "Completed")).to_have_text("200", timeout=60_000)
    expect(metric(page, "Preemptions")).to_have_text("0")
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible(timeout=60_000)
    assert "engine=static" in page.url
    assert not errors, errors


def test_preset_names_in_links_survive(page, server):
    # a bound selectbox with a format_func would put its label in the URL and drop a preset name
    page.goto(server + "/memory?gpu=h100-sxm&model=qwen2.5-7b")
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(metric(page, "KV per token")).to_have_text("56 KiB", timeout=60_000)
    page.wait_for_timeout(1000)
    assert "gpu=h100-sxm" in page.url and "model=qwen2.5-7b" in page.url


def test_recommend_page_renders_the_table_commands_and_charts(page, server):
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server + "/recommend?max_len=8192&slos=chat%3Attft_p99%3C3000")
    page.wait_for_selector(IDLE, timeout=180_000)
    expect(page.get_by_text("vllm serve meta-llama/Meta-Llama-3-8B --max-num-seqs").first).to_be_visible(
        timeout=180_000)
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible(timeout=60_000)
    assert "slos=chat" in page.url
    # the sample holds two servers' requests, planned here as one llama-3-8b server: the page says so
    expect(page.get_by_test_id("stAlertContentWarning").filter(has_text="served by 2 models")).to_contain_text(
        "all of them are replayed on one llama-3-8b server")
    assert not errors, errors


def test_a_calibration_from_another_gpu_is_applied_with_a_warning_and_can_be_dropped(page, server):
    calibration = (b'{"model": "llama-3-8b", "gpu": "a100-80gb-sxm", "tp": 1, "engine": "vllm-v1", '
                   b'"fitted": ["mfu", "mbu"], "params": {"mfu": 0.45, "mbu": 0.7}}')
    page.goto(server + "/memory?model=llama-3-8b&gpu=h100-sxm")
    page.wait_for_selector(IDLE, timeout=60_000)
    page.get_by_text("Memory overheads, startup log and cost model").click()
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": "a100.json", "mimeType": "application/json", "buffer": calibration}])
    expect(page.get_by_text("Cost model: calibrated (a100.json)")).to_be_visible(timeout=60_000)
    warning = page.get_by_test_id("stAlertContentWarning").filter(has_text="The calibration was fitted on")
    expect(warning).to_contain_text("fitted on a100-80gb-sxm and is applied to h100-sxm", timeout=60_000)
    expect(page.get_by_text("step costs at MFU 0.45, MBU 0.7,")).to_be_visible()
    # back to the defaults: the file still sits in the uploader, and is not applied again on the next run
    page.get_by_role("button", name="Use the defaults").click()
    expect(page.get_by_text("Cost model: defaults (reference/performance-models.md)")).to_be_visible(timeout=60_000)
    expect(warning).to_have_count(0)
    expect(page.get_by_text("step costs at MFU 0.55, MBU 0.8,")).to_be_visible()
    # another run of the page (the scenario changed): still the defaults
    page.get_by_test_id("stNumberInputStepUp").first.click()
    page.wait_for_function("() => window.location.search.includes('util=0.91')", timeout=60_000)
    page.wait_for_selector(IDLE, timeout=60_000)
    expect(page.get_by_text("Cost model: defaults (reference/performance-models.md)")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("step costs at MFU 0.55, MBU 0.8,")).to_be_visible()
