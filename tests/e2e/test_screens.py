"""What a new user sees, in Debian's chromium against a real server: every tile's value whole, the memory bar drawn
with its six parts, defaults shown as the values that apply, no table running off the page, and prompts that do not
fit said plainly on every page that simulates."""

import io

import numpy as np
import pytest
from helpers import IDLE
from PIL import Image
from playwright.sync_api import expect

from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.samples import ensure_sample

QUICK = "slos=chat:ttft_p99<5000"          # one latency class: a short search
PAGES = ["/overview", "/workload", "/workload?view=Arrivals", "/workload?view=Latency", "/memory", "/simulate",
         f"/recommend?trace=long_prompts&{QUICK}", "/traces"]
# values that run past their tile or columns past their grid, as the browser lays them out
CUT_TILES = """() => [...document.querySelectorAll('[data-testid="stMetricValue"]')]
    .filter(e => { const d = e.querySelector('div') || e; return d.scrollWidth > d.clientWidth + 1; })
    .map(e => e.innerText)"""
WIDE_GRIDS = """() => [...document.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')]
    .filter(e => e.scrollWidth > e.clientWidth + 2).map(e => e.scrollWidth + ' > ' + e.clientWidth)"""
# grids whose rows hide behind a vertical scrollbar
TALL_GRIDS = """() => [...document.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')]
    .filter(e => e.scrollHeight > e.clientHeight + 2).map(e => e.scrollHeight + ' > ' + e.clientHeight)"""


@pytest.fixture(scope="module")
def screen_server(tmp_path_factory, launch_server):
    """A server whose store holds the sample and a trace where 40% of the prompts exceed Llama-3-8B's 8,192."""
    db = tmp_path_factory.mktemp("screens") / "screens.duckdb"
    rng = np.random.default_rng(5)
    prompts = np.where(rng.random(300) < 0.4, rng.integers(8_200, 12_000, 300), rng.integers(100, 3_000, 300))
    rows = "\n".join(f"{0.5 * k:.1f},{p},{o}" for k, (p, o) in enumerate(zip(prompts, rng.integers(20, 300, 300),
                                                                              strict=True)))
    path = tmp_path_factory.mktemp("trace") / "long_prompts.csv"
    path.write_text("arrival,input_tokens,output_tokens\n" + rows + "\n")
    con = store.open_store(db)
    ensure_sample(con)
    ingest_file(con, path)
    con.close()
    proc, url = launch_server(PLANNER_DB=str(db))
    yield url, int((prompts >= 8192).sum())
    proc.terminate()
    proc.wait(timeout=20)


def settle(page, url: str) -> None:
    page.goto(url)
    page.wait_for_timeout(1_000)
    page.wait_for_selector(IDLE, timeout=240_000)
    page.wait_for_timeout(2_000)          # tiles and grids lay out after the script run ends


def test_no_tile_value_or_table_is_cut_on_any_page(page, screen_server, artifacts):
    url, _ = screen_server
    page.set_viewport_size({"width": 1280, "height": 900})
    for path in PAGES:
        settle(page, url + path)
        page.screenshot(path=artifacts / f"screen{path.split('?')[0].replace('/', '-')}.png", full_page=True)
        assert page.evaluate(CUT_TILES) == [], path
        assert page.evaluate(WIDE_GRIDS) == [], path
        if path.startswith("/recommend"):     # the per-class tables (a figure per row) show every row
            assert page.evaluate(TALL_GRIDS) == [], path


def test_the_memory_bar_is_drawn_and_defaults_show_their_values(page, screen_server):
    url, _ = screen_server
    page.set_viewport_size({"width": 1280, "height": 900})
    settle(page, url + "/memory?model=llama-3-70b&tp=2&weights=fp8&block=32")
    chart = page.get_by_test_id("stVegaLiteChart").first
    chart.scroll_into_view_if_needed()
    image = np.asarray(Image.open(io.BytesIO(chart.screenshot())).convert("RGB")).astype(int)
    saturated = (image.max(axis=2) - image.min(axis=2)) > 60          # coloured, not grey text or white
    rows = saturated.mean(axis=1) > 0.5                              # rows the bar spans most of
    assert rows.sum() >= 20, f"the bar is {rows.sum()} px thick"
    colours = {tuple(c // 32) for c in image[rows][saturated[rows]]}
    assert len(colours) >= 5                                          # weights … outside budget, each its own
    # empty inputs say what applies instead of a 0
    expect(page.locator("input[placeholder='auto: 8,192']")).to_be_visible()
    page.get_by_text("Engine and scheduler limits").click()
    expect(page.locator("input[placeholder='auto: 256']")).to_be_visible()
    expect(page.locator("input[placeholder='auto: 2,048']")).to_be_visible()


def test_every_simulating_page_says_which_prompts_were_rejected(page, screen_server):
    url, too_long = screen_server
    for path in ("/simulate?trace=long_prompts", f"/recommend?trace=long_prompts&{QUICK}"):
        settle(page, url + path)
        warning = page.get_by_test_id("stAlertContentWarning").filter(has_text="were rejected")
        expect(warning).to_contain_text(f"{too_long:,} of 300 requests", timeout=120_000)
        expect(warning).to_contain_text("max_model_len 8,192")
        expect(warning).to_contain_text("serve a model with a longer context")


def captions(page) -> str:
    return " ".join(page.get_by_test_id("stCaptionContainer").all_inner_texts())


def test_the_scenario_follows_the_user_from_page_to_page(page, screen_server):
    url, _ = screen_server
    settle(page, url + "/memory?tp=2&kv_dtype=fp8&block=32&weights=fp8")
    page.get_by_test_id("stSidebarNav").get_by_text("Simulate").click()       # the link carries no query string
    page.wait_for_timeout(1_000)
    page.wait_for_selector(IDLE, timeout=240_000)
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text="blocks ·")).to_contain_text(
        "on 2× a100-80gb-sxm · weights fp8, KV fp8 in 32-token blocks", timeout=120_000)
    page.wait_for_function("() => window.location.search.includes('kv_dtype=fp8')", timeout=60_000)
    # a change on the page sticks, a change back to the default included
    kv = page.get_by_test_id("stSelectbox").filter(has_text="KV cache dtype")
    kv.click()
    page.get_by_role("option", name="auto").click()
    page.wait_for_timeout(1_000)
    page.wait_for_selector(IDLE, timeout=240_000)
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text="blocks ·")).to_contain_text(
        "KV auto in 32-token blocks", timeout=120_000)
    page.wait_for_timeout(2_000)
    assert "KV auto in 32-token blocks" in captions(page) and "kv_dtype" not in page.url
