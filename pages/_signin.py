"""Who is using the app: the deployment's sign-in settings, whether this session is signed in, whose workspace
it sees."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from planner.errors import PlannerError
from planner.service.signin import SignInSettings, sign_in_settings


def deployment_sign_in() -> SignInSettings | None:
    """The deployment's sign-in settings (None: one shared workspace). A misconfigured sign-in stops the run here
    with the reason and nothing else: ``python -m planner serve`` refuses to start on it, and this covers a server
    started some other way."""
    try:
        secrets = st.secrets.to_dict()
    except (FileNotFoundError, st.errors.StreamlitSecretNotFoundError) as exc:
        # no secrets file: one shared workspace. A file that does not read (a TOML syntax error) may hold a
        # sign-in: serving every workspace to anyone would be the wrong guess, so nothing is served
        present = [path for path in st.get_option("secrets.files") if Path(path).is_file()]
        if present:
            st.title("LLM capacity planner")
            st.error(f"the secrets file {present[0]} cannot be read ({exc}); expected valid TOML (`python -m "
                     "planner serve --check` names the problem): until it reads, no page is served")
            st.stop()
        secrets = {}
    try:
        return sign_in_settings(secrets, st.get_option("server.baseUrlPath"))
    except PlannerError as exc:
        st.title("LLM capacity planner")
        st.error(str(exc))
        st.stop()


def signed_in() -> bool:
    # st.user holds no is_logged_in key until an identity provider has answered (and never under AppTest)
    return bool(st.user.get("is_logged_in", False))


def workspace_owner() -> str | None:
    """The signed-in user whose workspace this session sees; None in a single-workspace app."""
    settings = deployment_sign_in()
    if settings is None or not signed_in():
        return None
    return settings.workspace_key(st.user.to_dict())
