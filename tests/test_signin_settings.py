"""What an operator must set for sign-in (docs/DEPLOY.md), checked by the entrypoint before the server starts and by
the app before it shows anything; which signed-in identities are let in."""

from __future__ import annotations

import json
import secrets
import subprocess

import pytest
from helpers import ROOT
from hypothesis import given
from hypothesis import strategies as st
from image import deploy_secrets, free_port, lay_out

from planner.errors import PlannerError
from planner.service.launch import preflight
from planner.service.signin import MIN_COOKIE_SECRET_CHARS, PLACEHOLDER_SECRETS, REQUIRED_AUTH_KEYS, sign_in_settings

pytestmark = pytest.mark.signin

COOKIE_SECRET = secrets.token_urlsafe(32)


def valid(**changes) -> dict:
    """DEPLOY.md's secrets with every placeholder filled in; ``changes`` as ``section__key=value`` (None deletes)."""
    tables = deploy_secrets()
    tables["auth"].update(cookie_secret=COOKIE_SECRET, client_id="capacity-planner", client_secret="s3cr3t-client")
    for name, value in changes.items():
        section, key = name.split("__")
        if value is None:
            tables[section].pop(key, None)
        else:
            tables[section][key] = value
    return tables


def problem(secrets_tables: dict, base: str = "") -> str:
    with pytest.raises(PlannerError) as err:
        sign_in_settings(secrets_tables, base)
    return str(err.value)


def test_deploy_md_names_every_setting_an_operator_must_set_and_its_example_is_refused_as_it_stands():
    guide = (ROOT / "docs" / "DEPLOY.md").read_text()
    example = deploy_secrets()
    assert set(example["auth"]) == set(REQUIRED_AUTH_KEYS) and set(example["planner"]) == {"allowed_domains"}
    settings_table = "\n".join(ln.split("|")[1] for ln in guide.splitlines() if ln.startswith("| `"))
    for key in (*REQUIRED_AUTH_KEYS, "allowed_domains"):      # the table of what an operator must set
        assert f"{key}`" in settings_table, key
    assert "`PLANNER_SIGN_IN=required`" in guide
    text = problem(example)                  # copied unchanged: refused, naming each placeholder
    assert "cookie_secret is an example value" in text
    assert "client_id is still docs/DEPLOY.md's placeholder" in text and "client_secret is still" in text
    assert "REPLACE-ME" not in text          # never echoes a secret's value, not even a placeholder
    settings = sign_in_settings(valid())
    assert settings.redirect_uri == "https://planner.internal.example/oauth2callback"
    assert settings.allowed_domains == ("internal.example",)


@pytest.mark.parametrize("secret, expected", [
    (None, "[auth] cookie_secret is missing"),
    ("", "[auth] cookie_secret is missing"),
    ("a long random string", "cookie_secret is an example value"),     # the value this guide used to show
    ("xxx", "cookie_secret is an example value"),                       # Streamlit's documentation's
    ("Q" * 64, "too weak (64 characters, 1 distinct)"),
    ("k3y-" * 7, "too weak (28 characters, 4 distinct)"),
])
def test_a_missing_default_or_weak_cookie_secret_is_refused_by_name(secret, expected):
    text = problem(valid(auth__cookie_secret=secret))
    assert expected in text and "token_urlsafe(32)" in text
    if secret:
        assert secret not in text.replace("a long random string", "")   # the value itself is not printed


@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=80))
def test_any_cookie_secret_is_either_accepted_or_refused_with_the_reason(secret):
    try:
        sign_in_settings(valid(auth__cookie_secret=secret))
    except PlannerError as exc:
        assert "[auth] cookie_secret" in str(exc)
        assert len(secret) < MIN_COOKIE_SECRET_CHARS or len(set(secret)) < 10 or secret.lower() in PLACEHOLDER_SECRETS
    else:
        assert len(secret) >= MIN_COOKIE_SECRET_CHARS and len(set(secret)) >= 10


@pytest.mark.parametrize("uri, base, expected", [
    ("http://planner.internal.example/oauth2callback", "", "must use https (plain http only for localhost)"),
    ("https://planner.internal.example/callback", "", "must end in /oauth2callback"),
    ("https://planner.internal.example/oauth2callback", "planner", "must end in /planner/oauth2callback"),
    ("planner.internal.example/oauth2callback", "", "is not an absolute http(s) URL"),
])
def test_a_redirect_uri_the_provider_cannot_use_safely_is_refused(uri, base, expected):
    assert expected in problem(valid(auth__redirect_uri=uri), base)


def test_local_and_base_path_redirects_are_accepted():
    assert sign_in_settings(valid(auth__redirect_uri="http://localhost:8501/oauth2callback"))
    assert sign_in_settings(valid(auth__redirect_uri="https://x.example/planner/oauth2callback"), "/planner/")


@pytest.mark.parametrize("domains, expected", [
    (None, "[planner] allowed_domains is missing"),
    ([], "must be a non-empty list"),
    ("corp.example", "must be a non-empty list"),
    (["corp.example", "not a domain"], "'not a domain' is not an e-mail domain"),
    (["*", "corp.example"], '"*" admits everyone and must stand alone'),
])
def test_allowed_domains_must_be_set_and_be_domains(domains, expected):
    assert expected in problem(valid(planner__allowed_domains=domains))


def test_every_problem_is_named_in_one_message():
    text = problem(valid(auth__cookie_secret=None, auth__redirect_uri="http://x.example/oauth2callback",
                         planner__allowed_domains=None, auth__client_id=None))
    assert text.count("; [") == 3 and text.startswith("sign-in is misconfigured in .streamlit/secrets.toml: ")
    assert sign_in_settings({}) is None and sign_in_settings({"other": {}}) is None     # no [auth]: sign-in off


def test_who_is_let_in():
    corp = sign_in_settings(valid(planner__allowed_domains=["Corp.Example"]))
    assert corp.refusal({"email": "ann@corp.example", "email_verified": True}) is None
    assert corp.refusal({"email": "Ann@CORP.EXAMPLE"}) is None                       # domains are case-blind
    assert "not allowed in this deployment: it admits e-mail addresses at corp.example" in corp.refusal(
        {"email": "eve@evil.example"})
    assert corp.refusal({"email": "eve@sub.corp.example"}) is not None                # exact domain, not subdomains
    assert corp.refusal({"email": "eve@corp.example.evil.example"}) is not None
    assert "not verified" in corp.refusal({"email": "ann@corp.example", "email_verified": False})
    assert corp.refusal({"sub": "12345"}) is not None                                 # no address: no domain
    anyone = sign_in_settings(valid(planner__allowed_domains=["*"]))
    assert anyone.refusal({"sub": "12345"}) is None and anyone.refusal({}) is not None
    assert anyone.workspace_key({"sub": "12345"}) == "12345"
    assert anyone.workspace_key({"email": "ann@corp.example", "sub": "1"}) == "ann@corp.example"


def entrypoint(image, *extra: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(image.as_image_user() + image.entrypoint(free_port()) + list(extra), cwd=image.app,
                          env=image.env(**env), capture_output=True, text=True, timeout=120)


@pytest.fixture
def image():
    laid_out = lay_out()
    yield laid_out
    laid_out.remove()


def test_the_entrypoint_refuses_to_start_with_a_default_or_missing_cookie_secret(image):
    for tables, expected in ((deploy_secrets(), "cookie_secret is an example value"),
                             (valid(auth__cookie_secret=None), "[auth] cookie_secret is missing")):
        image.write_secrets(tables)
        proc = entrypoint(image)                 # no --check: it would have started the server
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert proc.returncode == 2 and len(errors) == 1 and expected in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr and "You can now view" not in proc.stdout + proc.stderr
    image.write_secrets(valid(auth__redirect_uri="http://localhost:8501/oauth2callback"))
    proc = entrypoint(image, "--check")
    assert proc.returncode == 0 and "sign-in on, admitting internal.example" in proc.stdout, proc.stderr
    checked = json.loads(entrypoint(image, "--check", "--json").stdout)
    assert checked == {"sign_in": True, "allowed_domains": ["internal.example"],
                       "db": str(image.volume / "planner.duckdb")}


def test_sign_in_required_refuses_a_deployment_without_secrets(image):
    proc = entrypoint(image, "--check", PLANNER_SIGN_IN="required")
    assert proc.returncode == 2 and "PLANNER_SIGN_IN=required but no secrets file has an [auth] section" in proc.stderr
    assert entrypoint(image, "--check").returncode == 0
    assert "expected 'required' or 'optional'" in entrypoint(image, "--check", PLANNER_SIGN_IN="yes").stderr


def test_the_entrypoint_refuses_a_volume_it_cannot_write(image):
    image.volume.chmod(0o555)
    proc = entrypoint(image)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: PLANNER_DB={image.volume}/planner.duckdb: ")
    assert "is not writable" in proc.stderr and "Traceback" not in proc.stderr


def test_a_malformed_secrets_file_is_named(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text("[auth\ncookie_secret = 1\n")
    with pytest.raises(PlannerError, match=r"secrets.toml: not valid TOML"):
        preflight(tmp_path, {"HOME": str(tmp_path / "home")}, tmp_path / "db.duckdb")


def test_the_app_serves_nothing_on_a_secrets_file_that_does_not_read(tmp_path, monkeypatch):
    # a TOML syntax error read as "no secrets" opened every workspace to anyone: the sign-in it may hold is unknown
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    secrets_file = tmp_path / "secrets.toml"
    secrets_file.write_text('[auth\ncookie_secret = "x"\n')
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    before = config.get_option("secrets.files")
    config.set_option("secrets.files", [str(secrets_file)])
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    finally:
        config.set_option("secrets.files", before)
    assert not at.exception
    assert [e.value for e in at.error][0].startswith(f"the secrets file {secrets_file} cannot be read (")
    assert not at.get("selectbox") and not at.button


def test_the_app_shows_only_the_problem_when_started_around_the_entrypoint(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    for query in ({}, {"report": "x" * 22}):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.secrets["auth"] = {**valid()["auth"], "cookie_secret": "changeme"}
        at.secrets["planner"] = valid()["planner"]
        for key, value in query.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception
        assert [e.value for e in at.error] and "cookie_secret is an example value" in at.error[0].value
        assert not at.button and not at.get("selectbox") and not at.get("download_button")
