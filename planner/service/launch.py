"""The production entrypoint's checks and command line: what ``python -m planner serve`` verifies before it hands
the process to Streamlit (the Docker image's ENTRYPOINT, and ``make run``)."""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from planner.errors import PlannerError
from planner.service.signin import SignInSettings, sign_in_settings

APP_DIR = Path(__file__).resolve().parents[2]      # where app.py, pages/ and .streamlit/ sit (/app in the image)
SIGN_IN_ENV = "PLANNER_SIGN_IN"                    # "required": refuse to start without an [auth] section


@dataclass(frozen=True)
class Preflight:
    """What the entrypoint found: the sign-in settings (None: one shared workspace) and the store path."""

    sign_in: SignInSettings | None
    db_path: Path

    def to_dict(self) -> dict:
        return {"sign_in": self.sign_in is not None, "db": str(self.db_path),
                "allowed_domains": list(self.sign_in.allowed_domains) if self.sign_in else None}

    def summary(self) -> str:
        who = ("sign-in off: one shared workspace" if self.sign_in is None
               else f"sign-in on, admitting {', '.join(self.sign_in.allowed_domains)}")
        return f"planner: {who}; store {self.db_path}"


def secrets_files(app_dir: Path, home: Path) -> list[Path]:
    """Streamlit's default ``secrets.files``, in its order (a later file overrides an earlier one's sections)."""
    return [home / ".streamlit" / "secrets.toml", app_dir / ".streamlit" / "secrets.toml"]


def read_secrets(paths: list[Path]) -> dict:
    """The secrets Streamlit will load from ``paths``, merged section by section like Streamlit does."""
    merged: dict = {}
    for path in paths:
        if not path.is_file():
            continue
        try:
            merged.update(tomllib.loads(path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise PlannerError(f"{path}: not valid TOML ({exc}); expected the secrets file of docs/DEPLOY.md") \
                from None
        except OSError as exc:
            raise PlannerError(f"{path}: cannot be read ({exc.strerror}); expected a readable secrets file") from None
    return merged


def base_url_path(app_dir: Path) -> str:
    """``server.baseUrlPath`` from the app's ``.streamlit/config.toml`` ('' when unset)."""
    config = app_dir / ".streamlit" / "config.toml"
    if not config.is_file():
        return ""
    return str(tomllib.loads(config.read_text(encoding="utf-8")).get("server", {}).get("baseUrlPath", ""))


def check_store_path(db_path: Path) -> None:
    """Refuse a store the server could not write: its folder must exist (or be creatable) and be writable."""
    folder = db_path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if db_path.exists() and not db_path.is_file():
        raise PlannerError(f"PLANNER_DB={db_path}: not a file; expected the DuckDB store's path")
    target = db_path if db_path.exists() else folder
    if not os.access(target, os.W_OK):
        raise PlannerError(f"PLANNER_DB={db_path}: {target} is not writable by uid {os.getuid()}; expected a "
                           "writable volume there (docker run -v planner-data:/data …)")


def preflight(app_dir: Path, env: dict[str, str], db_path: Path) -> Preflight:
    """Every check the entrypoint makes, in the order an operator would fix them.

    Raises
    ------
    PlannerError
        A misconfigured sign-in, sign-in required but not configured, or a store that cannot be written.
    """
    secrets = read_secrets(secrets_files(app_dir, Path(env.get("HOME", "~")).expanduser()))
    settings = sign_in_settings(secrets, base_url_path(app_dir))
    mode = env.get(SIGN_IN_ENV, "").strip().lower()
    if mode not in ("", "optional", "required"):
        raise PlannerError(f"{SIGN_IN_ENV}={env[SIGN_IN_ENV]!r}: expected 'required' or 'optional'")
    if settings is None and mode == "required":
        raise PlannerError(f"{SIGN_IN_ENV}=required but no secrets file has an [auth] section; expected "
                           f"{app_dir / '.streamlit' / 'secrets.toml'} as docs/DEPLOY.md describes")
    check_store_path(db_path)
    return Preflight(sign_in=settings, db_path=db_path)


def streamlit_argv(port: int | None, address: str | None) -> list[str]:
    """The command the entrypoint becomes: Streamlit running the app with the production config."""
    argv = [sys.executable, "-m", "streamlit", "run", str(APP_DIR / "app.py")]
    if port is not None:
        argv.append(f"--server.port={port}")
    if address is not None:
        argv.append(f"--server.address={address}")
    return argv
