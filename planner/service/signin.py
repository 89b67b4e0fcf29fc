"""Sign-in settings of a deployment: what an operator must set in ``.streamlit/secrets.toml`` (docs/DEPLOY.md),
checked before the app serves anyone, and which signed-in identities it admits.

The same checks run twice: in the production entrypoint (``python -m planner serve``), which refuses to start the
server, and in the app itself, which shows nothing but the problem when it was started some other way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from planner.errors import PlannerError

# [auth] keys Streamlit's st.login() needs for its default provider (the app calls it without a provider name)
REQUIRED_AUTH_KEYS = ("redirect_uri", "cookie_secret", "client_id", "client_secret", "server_metadata_url")
# The cookie secret signs every session cookie: anyone who knows it can forge any user. 32 characters of
# secrets.token_urlsafe (what DEPLOY.md tells operators to run; it prints 43) carry 192 bits. Source: NIST SP
# 800-132 asks for at least 128 bits of key material; 32 characters with 10+ distinct ones is the floor enforced.
MIN_COOKIE_SECRET_CHARS = 32
MIN_COOKIE_SECRET_DISTINCT = 10
# Values copied from examples rather than generated: Streamlit's docs ("xxx"), this guide's earlier example and the
# usual stand-ins, compared case-insensitively; DEPLOY.md's own placeholders start with PLACEHOLDER_PREFIX.
PLACEHOLDER_SECRETS = frozenset({"a long random string", "xxx", "changeme", "change-me", "secret", "cookie_secret",
                                 "your-cookie-secret"})
PLACEHOLDER_PREFIX = "REPLACE-ME"               # how DEPLOY.md's example marks what the operator fills in
GENERATE_SECRET = "generate one with python -c 'import secrets; print(secrets.token_urlsafe(32))'"
ANY_DOMAIN = "*"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class SignInSettings:
    """A deployment's validated sign-in settings.

    Attributes
    ----------
    redirect_uri : str
        Where the identity provider sends users back (``…/oauth2callback``).
    allowed_domains : tuple of str
        Lower-case e-mail domains whose users are let in; ``("*",)`` lets in every identity the provider signs in.
    """

    redirect_uri: str
    allowed_domains: tuple[str, ...]

    def refusal(self, claims: Mapping) -> str | None:
        """Why this signed-in identity is not let in, or None when it is.

        Parameters
        ----------
        claims : mapping
            The identity provider's claims (``st.user``).
        """
        email = claims.get("email")
        if claims.get("email_verified") is False:
            return f"{email or 'this account'}: the identity provider says its e-mail address is not verified"
        if self.allowed_domains == (ANY_DOMAIN,):
            return None if (email or claims.get("sub")) else "the identity provider sent neither email nor sub"
        domain = str(email).rpartition("@")[2].lower() if email and "@" in str(email) else None
        if domain in self.allowed_domains:
            return None
        return (f"{email or claims.get('sub') or 'this account'} is not allowed in this deployment: it admits "
                f"e-mail addresses at {', '.join(self.allowed_domains)}")

    @staticmethod
    def workspace_key(claims: Mapping) -> str:
        """The workspace a signed-in identity sees: its ``email`` claim, else its ``sub``."""
        return str(claims.get("email") or claims.get("sub"))


def sign_in_settings(secrets: Mapping, base_url_path: str = "") -> SignInSettings | None:
    """Validate the sign-in part of a deployment's secrets.

    Parameters
    ----------
    secrets : mapping
        The parsed secrets file(s); ``[auth]`` turns sign-in on, ``[planner] allowed_domains`` lists who may enter.
    base_url_path : str
        Streamlit's ``server.baseUrlPath``; the redirect URI must carry it.

    Returns
    -------
    SignInSettings or None
        None when there is no ``[auth]`` section (a single shared workspace, no sign-in).

    Raises
    ------
    PlannerError
        Naming every problem at once, never a secret's value.
    """
    auth = secrets.get("auth")
    if auth is None:
        return None
    if not isinstance(auth, Mapping):
        raise PlannerError("sign-in: [auth] in secrets.toml must be a table (docs/DEPLOY.md, 'Sign-in')")
    problems = [f"[auth] {key} is missing" + (f": {GENERATE_SECRET}" if key == "cookie_secret" else "")
                for key in REQUIRED_AUTH_KEYS if not isinstance(auth.get(key), str) or not auth[key].strip()]
    problems += [f"[auth] {key} is still docs/DEPLOY.md's placeholder" for key in REQUIRED_AUTH_KEYS
                 if key != "cookie_secret" and str(auth.get(key, "")).startswith(PLACEHOLDER_PREFIX)]
    secret = auth.get("cookie_secret")
    if isinstance(secret, str) and secret.strip():
        problems += _cookie_secret_problems(secret)
    uri = auth.get("redirect_uri")
    if isinstance(uri, str) and uri.strip():
        problems += _redirect_problems(uri, base_url_path)
    planner = secrets.get("planner", {})
    domains = planner.get("allowed_domains") if isinstance(planner, Mapping) else None
    allowed, domain_problems = _allowed_domains(domains)
    problems += domain_problems
    if problems:
        raise PlannerError("sign-in is misconfigured in .streamlit/secrets.toml: " + "; ".join(problems)
                           + " (docs/DEPLOY.md, 'Sign-in and workspaces', lists what an operator must set)")
    return SignInSettings(redirect_uri=uri, allowed_domains=allowed)


def _cookie_secret_problems(secret: str) -> list[str]:
    if secret.strip().lower() in PLACEHOLDER_SECRETS or secret.startswith(PLACEHOLDER_PREFIX):
        return [f"[auth] cookie_secret is an example value, not a secret: {GENERATE_SECRET}"]
    if len(secret) < MIN_COOKIE_SECRET_CHARS or len(set(secret)) < MIN_COOKIE_SECRET_DISTINCT:
        return [f"[auth] cookie_secret is too weak ({len(secret)} characters, {len(set(secret))} distinct); expected "
                f"at least {MIN_COOKIE_SECRET_CHARS} random characters: {GENERATE_SECRET}"]
    return []


def _redirect_problems(uri: str, base_url_path: str) -> list[str]:
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [f"[auth] redirect_uri {uri!r} is not an absolute http(s) URL"]
    problems = []
    if parts.scheme != "https" and parts.hostname not in LOCAL_HOSTS:
        problems.append(f"[auth] redirect_uri {uri!r} must use https (plain http only for localhost): the "
                        "provider's code and the session cookie would cross the network in clear")
    base = base_url_path.strip("/")
    expected = f"/{base}/oauth2callback" if base else "/oauth2callback"
    if parts.path != expected:
        problems.append(f"[auth] redirect_uri {uri!r} must end in {expected} (Streamlit's callback"
                        + (f" under server.baseUrlPath {base!r})" if base else ")"))
    return problems


def _allowed_domains(domains) -> tuple[tuple[str, ...], list[str]]:
    hint = ('set [planner] allowed_domains = ["your-company.example"] (or ["*"] when the provider signs in only '
            "your own users)")
    if domains is None:
        return (), [f"[planner] allowed_domains is missing: {hint}"]
    if isinstance(domains, str) or not isinstance(domains, list | tuple) or not domains:
        return (), [f"[planner] allowed_domains must be a non-empty list of e-mail domains: {hint}"]
    cleaned = tuple(str(d).strip().lower().lstrip("@") for d in domains)
    if ANY_DOMAIN in cleaned:
        return ((ANY_DOMAIN,), []) if cleaned == (ANY_DOMAIN,) else \
            ((), ['[planner] allowed_domains: "*" admits everyone and must stand alone'])
    bad = [d for d, c in zip(domains, cleaned, strict=True) if not isinstance(d, str) or not _DOMAIN.match(c)]
    if bad:
        return (), [f"[planner] allowed_domains: {', '.join(repr(b) for b in bad)} is not an e-mail domain "
                    "(expected names like 'corp.example')"]
    return cleaned, []
