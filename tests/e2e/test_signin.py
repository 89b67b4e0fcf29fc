"""The team deployment, signed in for real: Debian's chromium against the image's entrypoint on the host, signing in
through a real OpenID Connect provider (oidc-provider-mock, started here) with the secrets file docs/DEPLOY.md
tells an operator to write. Two users, each seeing the shared sample and their own traces and reports, never the
other's; report links for the signed-out; signing out; forged, expired and outside-domain sessions.

The tests share one server and run in file order: the last one stops it and reads the store it left.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import oidc_provider_mock
import pytest
from helpers import IDLE
from image import HostImage, deploy_secrets, free_port, lay_out
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from playwright.sync_api import expect

from planner.traces import store

pytestmark = pytest.mark.signin

DOMAIN = "corp.test"
ALICE, BOB, EVE = f"alice@{DOMAIN}", f"bob@{DOMAIN}", "eve@elsewhere.test"
USER_COOKIE = "_streamlit_user"          # Streamlit's signed session cookie (its salt is the cookie's name)
COOKIE_LIFETIME_S = 30 * 86400           # Streamlit's AUTH_COOKIE_MAX_AGE_SECONDS, plus its one-day grace below


@dataclass
class SignInServer:
    url: str
    image: HostImage
    cookie_secret: str
    proc: object

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def idp():
    """A real OIDC provider on localhost, knowing three users by their e-mail address."""
    with oidc_provider_mock.run_server_in_thread() as server:
        url = f"http://localhost:{server.server_port}"
        for user in (ALICE, BOB, EVE):
            httpx.put(f"{url}/users/{quote(user)}", json={"email": user, "email_verified": True}).raise_for_status()
        yield url


@pytest.fixture(scope="module")
def deployment(idp):
    """The image's entrypoint with DEPLOY.md's secrets file, every placeholder filled in as an operator would."""
    image, port = lay_out(), free_port()
    tables = deploy_secrets()
    cookie_secret = secrets.token_urlsafe(32)          # what DEPLOY.md tells the operator to run
    tables["auth"].update(redirect_uri=f"http://127.0.0.1:{port}/oauth2callback", cookie_secret=cookie_secret,
                          client_id="capacity-planner", client_secret=secrets.token_urlsafe(16),
                          server_metadata_url=f"{idp}/.well-known/openid-configuration")
    tables["planner"]["allowed_domains"] = [DOMAIN]
    image.write_secrets(tables)
    server = SignInServer(f"http://127.0.0.1:{port}", image, cookie_secret,
                          image.start(port, image.root / "server.log"))
    yield server
    server.stop()
    image.remove()


def settle(page, timeout=120_000):
    page.wait_for_selector(IDLE, timeout=timeout)


def sign_in(browser, url: str, user: str):
    """A new browser (its own cookies) signed in as ``user`` through the provider's authorization form."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.goto(url)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"http://localhost:\d+/oauth2/authorize"), timeout=30_000)
    page.fill("input[name=sub]", user)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(url + "/**", timeout=30_000)
    if user.endswith("@" + DOMAIN):
        expect(page.get_by_text(f"Workspace of {user}")).to_be_visible(timeout=90_000)
    settle(page)
    return page


def write_trace(path: Path, seed: int, bad_line: str) -> Path:
    rng = np.random.default_rng(seed)
    rows = [f"{0.3 * k:.2f},{rng.integers(50, 900)},{rng.integers(10, 300)}" for k in range(240)]
    rows.insert(100, bad_line)                     # one line the ingest rejects, kept for download
    path.write_text("arrival,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return path


def upload(page, url: str, path: Path, name: str) -> None:
    """Upload ``path`` on the Traces page as ``name`` and wait for its Stored figure."""
    page.goto(url + "/traces")
    settle(page)
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(path))
    ingest = page.get_by_role("button", name="Ingest", exact=True)
    expect(ingest).to_be_visible(timeout=60_000)
    page.get_by_label("Trace name").fill(name)
    page.get_by_label("Trace name").press("Enter")
    settle(page)
    ingest.click()
    expect(page.get_by_test_id("stMetric").filter(has_text="Stored")).to_be_visible(timeout=120_000)
    settle(page)


def picker_options(page) -> list[str]:
    """The sidebar trace picker's choices, read from its open dropdown."""
    picker = page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").first
    picker.click()
    options = page.get_by_role("option")
    expect(options.first).to_be_visible(timeout=10_000)
    names = [options.nth(i).inner_text().strip() for i in range(options.count())]
    page.keyboard.press("Escape")
    return names


def listed_traces(page, url: str) -> dict[str, str]:
    """The Traces page's list of stored traces: name → trace id (read from the grid's accessible cells)."""
    page.goto(url + "/traces")
    settle(page)
    table = page.get_by_test_id("stDataFrame").last     # the list comes last on the page
    # the grid draws on a canvas; its cells are also in an accessible table inside it
    expect(table.locator("[role=gridcell]").first).to_be_attached(timeout=30_000)
    rows = table.locator("[role=row]")
    listed = {}
    for i in range(rows.count()):
        cells = [c.strip() for c in rows.nth(i).locator("[role=gridcell]").all_inner_texts()]
        if len(cells) >= 2:
            listed[cells[0]] = cells[1]
    return listed


def selected_trace_id(page) -> str:
    caption = page.get_by_test_id("stSidebar").get_by_text(re.compile(r"requests · .* rejected · "))
    return re.search(r"([0-9a-f]{16})", caption.inner_text()).group(1)


def test_each_user_sees_the_sample_and_their_own_traces_never_the_others(deployment, browser, tmp_path):
    url = deployment.url
    alice, bob = sign_in(browser, url, ALICE), sign_in(browser, url, BOB)
    upload(alice, url, write_trace(tmp_path / "a.csv", 1, "alice-bad-line"), "alice-trace")
    with alice.expect_download() as got:
        alice.get_by_role("button", name="Download rejected rows (CSV)").click()
    alice_rejects = Path(got.value.path()).read_text()
    upload(bob, url, write_trace(tmp_path / "b.csv", 2, "bob-bad-line"), "bob-trace")
    with bob.expect_download() as got:
        bob.get_by_role("button", name="Download rejected rows (CSV)").click()
    bob_rejects = Path(got.value.path()).read_text()
    assert "alice-bad-line" in alice_rejects and "bob-bad-line" not in alice_rejects
    assert "bob-bad-line" in bob_rejects and "alice-bad-line" not in bob_rejects

    alice_list, bob_list = listed_traces(alice, url), listed_traces(bob, url)
    assert {"sample_chat", "alice-trace"} <= set(alice_list) and "bob-trace" not in alice_list
    assert {"sample_chat", "bob-trace"} <= set(bob_list) and "alice-trace" not in bob_list
    for page, mine, theirs in ((alice, "alice-trace", "bob-trace"), (bob, "bob-trace", "alice-trace")):
        options = picker_options(page)
        assert "sample_chat" in options and mine in options and theirs not in options
    bob_id = bob_list["bob-trace"]
    # Bob's trace named in Alice's URL, by name and by id: her own default is shown, nothing of his
    for ref in ("bob-trace", bob_id):
        alice.goto(f"{url}/overview?trace={quote(ref)}")
        settle(alice)
        expect(alice.get_by_text(f"Workspace of {ALICE}")).to_be_visible()
        assert selected_trace_id(alice) == alice_list["sample_chat"]
        assert bob_id not in alice.content() and "bob-trace" not in alice.locator("body").inner_text()
    bob.context.close()
    alice.context.close()


def test_saved_reports_are_listed_to_their_owner_and_links_open_read_only_signed_out(deployment, browser):
    url = deployment.url
    alice = sign_in(browser, url, ALICE)
    alice.goto(f"{url}/report?trace=alice-trace")
    settle(alice)
    alice.get_by_role("button", name="Build and save the report").click()
    expect(alice.get_by_text("Saved:")).to_be_visible(timeout=600_000)
    settle(alice)
    link = alice.get_by_test_id("stCode").inner_text().strip()
    report_id = re.search(r"\?report=([A-Za-z0-9_-]{22})$", link).group(1)
    alice.goto(f"{url}/report?trace=alice-trace")       # a fresh run lists the saved reports
    settle(alice)
    expect(alice.get_by_role("heading", name="Saved reports")).to_be_visible()
    bob = sign_in(browser, url, BOB)
    bob.goto(f"{url}/report")
    settle(bob)
    expect(bob.get_by_role("button", name="Build and save the report")).to_be_visible()
    expect(bob.get_by_role("heading", name="Saved reports")).to_have_count(0)
    assert report_id not in bob.content()

    stranger = browser.new_context().new_page()          # nobody signed in
    stranger.goto(link)
    settle(stranger)
    expect(stranger.get_by_text("Shared capacity report")).to_be_visible(timeout=60_000)
    expect(stranger.get_by_role("heading", name="Capacity report: alice-trace")).to_be_visible(timeout=60_000)
    expect(stranger.get_by_role("button", name="Sign in")).to_have_count(0)
    expect(stranger.get_by_test_id("stSidebar")).to_have_count(0)            # no picker, no pages: read-only
    for wrong in ("A" * 22, quote("<script>alert(1)</script>"), "..%2F..%2Fetc%2Fpasswd"):
        stranger.goto(f"{url}/?report={wrong}")
        settle(stranger)
        expect(stranger.get_by_test_id("stAlertContentError")).to_contain_text("report", timeout=30_000)
        expect(stranger.get_by_role("heading", name=re.compile("Capacity report:"))).to_have_count(0)
        assert "Traceback" not in stranger.content()
    for page in (alice, bob, stranger):
        page.context.close()


def test_the_same_bytes_are_stored_once_and_removing_takes_them_from_one_workspace(deployment, browser, tmp_path):
    url = deployment.url
    shared = write_trace(tmp_path / "same.csv", 3, "same-bad-line")
    alice, bob = sign_in(browser, url, ALICE), sign_in(browser, url, BOB)
    upload(alice, url, shared, "team-trace")
    upload(bob, url, shared, "bobs-copy")     # the same bytes: already stored
    alice_list, bob_list = listed_traces(alice, url), listed_traces(bob, url)
    assert alice_list["team-trace"] == bob_list["team-trace"] and "bobs-copy" not in bob_list

    alice.goto(url + "/traces")
    settle(alice)
    alice.get_by_text("Remove a trace from my workspace").click()
    box = alice.get_by_test_id("stExpander").filter(has_text="Remove a trace from my workspace")
    choose = box.get_by_test_id("stSelectbox").locator("input")
    choose.click()
    choose.fill("team-trace")
    choose.press("Enter")
    settle(alice)
    expect(choose).to_have_value(re.compile(r"^team-trace \("))
    box.get_by_role("button", name="Remove").click()
    # wait for the removal's own word: settling alone can return before the click's rerun starts, and leaving
    # the page then stops that run before it removes anything
    expect(alice.get_by_test_id("stAlertContentSuccess")).to_contain_text(
        f"Removed team-trace ({alice_list['team-trace']}) from your workspace.", timeout=60_000)
    settle(alice)
    assert "team-trace" not in listed_traces(alice, url) and "team-trace" not in picker_options(alice)
    assert listed_traces(bob, url)["team-trace"] == bob_list["team-trace"]     # still Bob's
    assert "team-trace" in picker_options(bob)
    alice.context.close()
    bob.context.close()


def test_signing_out_returns_to_the_gate(deployment, browser):
    url = deployment.url
    alice = sign_in(browser, url, ALICE)
    alice.get_by_test_id("stSidebar").get_by_role("button", name="Sign out").click()
    # st.logout ends the session at the provider too (RP-initiated logout), which sends the browser back
    alice.wait_for_url(re.compile(r"http://localhost:\d+/oauth2/end_session"), timeout=30_000)
    alice.get_by_role("button", name="End session").click()
    alice.wait_for_url(deployment.url + "/**", timeout=30_000)
    expect(alice.get_by_role("button", name="Sign in")).to_be_visible(timeout=30_000)
    assert USER_COOKIE not in {c["name"] for c in alice.context.cookies()}
    for path in ("/traces", "/overview?trace=alice-trace", "/report"):
        alice.goto(url + path)
        settle(alice)
        expect(alice.get_by_role("button", name="Sign in")).to_be_visible()
        expect(alice.get_by_test_id("stSidebar")).to_have_count(0)
        assert "alice-trace" not in alice.content()
    alice.context.close()


class _LongAgo(TimestampSigner):
    def get_timestamp(self) -> int:
        return int(time.time()) - COOKIE_LIFETIME_S - 2 * 86400


def test_an_expired_or_tampered_session_cookie_gets_the_gate(deployment, browser):
    url = deployment.url
    alice = sign_in(browser, url, ALICE)
    cookie = next(c for c in alice.context.cookies() if c["name"] == USER_COOKIE)
    payload = URLSafeTimedSerializer(deployment.cookie_secret, salt=USER_COOKIE).loads(cookie["value"])
    alice.context.close()

    def visit(value: str):
        context = browser.new_context()
        context.add_cookies([{**cookie, "value": value}])
        page = context.new_page()
        page.goto(url + "/traces")
        settle(page)
        return page

    fresh = URLSafeTimedSerializer(deployment.cookie_secret, salt=USER_COOKIE).dumps(payload)
    expired = URLSafeTimedSerializer(deployment.cookie_secret, salt=USER_COOKIE, signer=_LongAgo).dumps(payload)
    other = URLSafeTimedSerializer(secrets.token_urlsafe(32), salt=USER_COOKIE).dumps(payload)
    body, _, signature = fresh.rpartition(".")
    tampered = body.replace(body[-5], "A" if body[-5] != "A" else "B") + "." + signature
    page = visit(fresh)                       # the control: a cookie made this way is honoured when it is valid
    expect(page.get_by_text(f"Workspace of {ALICE}")).to_be_visible(timeout=30_000)
    page.context.close()
    for value in (expired, tampered, other, fresh + "x"):
        page = visit(value)
        expect(page.get_by_role("button", name="Sign in")).to_be_visible(timeout=30_000)
        expect(page.get_by_text(f"Workspace of {ALICE}")).to_have_count(0)
        assert "alice-trace" not in page.content()
        page.context.close()


def test_an_address_outside_the_allowed_domains_is_refused(deployment, browser):
    eve = sign_in(browser, deployment.url, EVE)
    expect(eve.get_by_test_id("stAlertContentError")).to_contain_text(
        f"{EVE} is not allowed in this deployment: it admits e-mail addresses at {DOMAIN}", timeout=30_000)
    for path in ("/traces", "/overview?trace=sample_chat"):
        eve.goto(deployment.url + path)
        settle(eve)
        expect(eve.get_by_test_id("stSidebar")).to_have_count(0)
        assert "sample_chat" not in eve.content()
    eve.context.close()


def test_the_store_left_behind_holds_each_upload_once_in_the_right_workspaces(deployment):
    deployment.stop()
    con = store.open_store(deployment.image.volume / "planner.duckdb")
    names = sorted(t.name for t in store.list_traces(con))
    assert names.count("team-trace") == 1 and "bobs-copy" not in names
    ids = {t.name: t.trace_id for t in store.list_traces(con)}
    assert store.owned_trace_ids(con, ALICE) == {ids["alice-trace"]}
    assert store.owned_trace_ids(con, BOB) == {ids["bob-trace"], ids["team-trace"]}
    assert store.owned_trace_ids(con, EVE) == set()
    con.close()
