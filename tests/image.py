"""The Docker image reproduced on the host from its Dockerfile: the files it copies, its environment, its user, its
entrypoint and its health check, so tests boot the service exactly as the image does without a container runtime.

``/app`` becomes a read-only copy of what the image copies and ``/data`` a writable folder. When the tests run as
root, the server runs without the capabilities that let root ignore file permissions (``setpriv``), so a write
anywhere but the volume and ``/tmp`` fails here as it does for the image's unprivileged user. (It keeps uid 0 rather
than the image's uid 10001 because a host's interpreter may live where only root can reach it, as pyenv's under
/root does.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from helpers import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, port: int, log: Path, timeout_s: float) -> None:
    """Wait until the server on ``port`` answers its health check; fail with its log if it exits or never does."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError("the server did not become healthy:\n" + log.read_text())


def directives() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as ``(INSTRUCTION, arguments)``, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [(ln.split()[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def json_list(text: str) -> list[str]:
    return json.loads(text.strip())


@dataclass(frozen=True)
class HostImage:
    """The image's filesystem on the host: ``app`` stands for ``/app``, ``volume`` for ``/data``, ``tmp`` for /tmp."""

    root: Path
    app: Path
    volume: Path
    tmp: Path

    def _host_path(self, value: str) -> str:
        for inside, outside in (("/data", self.volume), ("/app", self.app), ("/tmp", self.tmp)):
            if value == inside or value.startswith(inside + "/"):
                return str(outside) + value[len(inside):]
        return value

    def env(self, **extra: str) -> dict[str, str]:
        """The container's environment: the Dockerfile's ENV (paths moved onto the host), the image user's home."""
        env = {"PATH": os.environ["PATH"], "HOME": str(self.app), "TMPDIR": str(self.tmp), "LANG": "C.UTF-8"}
        for d, value in directives():
            if d == "ENV":
                for item in value.split():
                    key, _, val = item.partition("=")
                    env[key] = self._host_path(val)
        return {**env, **extra}

    def entrypoint(self, port: int) -> list[str]:
        """The ENTRYPOINT, with the venv's Python for the image's and the port moved off 8501."""
        entry = json_list(dict(directives())["ENTRYPOINT"])
        assert entry[0] == "python"
        argv = [sys.executable, *entry[1:]]
        return [a.replace("8501", str(port)) if a.startswith("--port") else a for a in argv]

    def healthcheck(self, port: int) -> list[str]:
        """The HEALTHCHECK's command, pointed at ``port``."""
        command = json_list(dict(directives())["HEALTHCHECK"].split("CMD", 1)[1])
        assert command[0] == "python"
        return [sys.executable, *[c.replace(":8501/", f":{port}/") for c in command[1:]]]

    def as_image_user(self) -> list[str]:
        """The prefix that makes file permissions bind a command as they bind the image's user (nothing when the
        tests are not root: they already do)."""
        if os.geteuid() != 0:
            return []
        return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]

    def start(self, port: int, log: Path, **extra_env: str) -> subprocess.Popen:
        """Boot the entrypoint as the container would and wait until its health check passes."""
        with open(log, "a") as out:
            proc = subprocess.Popen(self.as_image_user() + self.entrypoint(port), cwd=self.app,
                                    env=self.env(**extra_env), stdout=out, stderr=subprocess.STDOUT)
        wait_healthy(proc, port, log, timeout_s=120)
        return proc

    def write_secrets(self, tables: dict[str, dict]) -> Path:
        """Mount a secrets file where DEPLOY.md says: ``/app/.streamlit/secrets.toml`` (read-only, like ``:ro``)."""
        folder = self.app / ".streamlit"
        folder.chmod(0o755)
        path = folder / "secrets.toml"
        path.write_text(toml_text(tables))
        path.chmod(0o444)
        folder.chmod(0o555)
        return path

    def remove(self) -> None:
        for dirpath, dirnames, _ in os.walk(self.root):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        os.chmod(self.root, 0o755)
        shutil.rmtree(self.root, ignore_errors=True)


def toml_text(tables: dict[str, dict]) -> str:
    """Tables of strings and lists of strings as TOML (JSON's string escapes are TOML's basic-string escapes)."""
    return "".join(f"[{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in table.items()) + "\n"
                   for name, table in tables.items())


def deploy_secrets() -> dict[str, dict]:
    """The secrets file docs/DEPLOY.md tells an operator to write, as it stands there (placeholders included)."""
    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "DEPLOY.md").read_text(), flags=re.S)
    [block] = [b for b in blocks if "[auth]" in b]
    return tomllib.loads(block)


def lay_out() -> HostImage:
    """Copy what the Dockerfile's COPY instructions copy into a fresh ``/app``, make it read-only, and create the
    volume and /tmp for the image's user. Not under pytest's tmp folders: those are private to the test user."""
    root = Path(tempfile.mkdtemp(prefix="planner-image-"))
    root.chmod(0o755)
    image = HostImage(root=root, app=root / "app", volume=root / "data", tmp=root / "tmp")
    image.app.mkdir()
    for d, value in directives():
        if d != "COPY":
            continue
        src, dst = value.split()
        target = image.app / (Path(src).name if dst in (".", "./") else dst.removeprefix("./"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / src).is_dir():       # without the caches and stores .dockerignore keeps out of the build
            shutil.copytree(ROOT / src, target, ignore=shutil.ignore_patterns("__pycache__", "*.duckdb*"))
        else:
            shutil.copy2(ROOT / src, target)
    for dirpath, dirnames, filenames in os.walk(image.app, topdown=False):
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o444)
        os.chmod(dirpath, 0o555)
    image.volume.mkdir()
    image.tmp.mkdir()
    image.tmp.chmod(0o777 | stat.S_ISVTX)
    return image


def tree(path: Path) -> dict[str, int]:
    """Every file under ``path`` with its size: what a test compares to see nothing was written there."""
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}
