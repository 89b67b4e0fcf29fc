"""The ``serve`` command: the production entrypoint. It checks the deployment (sign-in settings, the store's
volume) and only then becomes the Streamlit server, so a misconfigured service never starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from planner.cli.output import emit
from planner.service.launch import APP_DIR, preflight, streamlit_argv
from planner.traces.store_path import default_db_path


def cmd_serve(args) -> None:
    if args.db:
        os.environ["PLANNER_DB"] = args.db
    checked = preflight(APP_DIR, dict(os.environ), Path(default_db_path()))
    if args.check:
        emit(args, checked.to_dict(), checked.summary())
        return
    print(checked.summary(), file=sys.stderr, flush=True)
    os.chdir(APP_DIR)               # Streamlit reads .streamlit/config.toml and secrets.toml from the working folder
    argv = streamlit_argv(args.port, args.address)
    os.execv(argv[0], argv)         # the server becomes this process: signals reach it, the exit code is its own


def add_serve_command(command) -> None:
    p = command("serve", "check the deployment (sign-in settings, the store's folder) and run the app's server")
    p.add_argument("--port", type=int, help="port to listen on (default: Streamlit's, 8501)")
    p.add_argument("--address", help="address to bind (default: every interface)")
    p.add_argument("--check", action="store_true", help="only run the checks: exit 0 if the server would start")
    p.set_defaults(func=cmd_serve)
