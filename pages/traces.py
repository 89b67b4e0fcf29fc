"""Traces: upload a request log, check its detected mapping and preview, ingest it, see what was rejected."""

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path

import polars as pl
import streamlit as st

from pages._progress import with_progress
from pages._shared import connection, rejects_csv, require_frame
from pages._signin import workspace_owner
from pages._stored import stored_traces
from planner.errors import PlannerError
from planner.traces import store
from planner.traces.files import SERVER_PATHS_ENV, resolve_server_files, server_roots
from planner.traces.ingest import ingest_file
from planner.traces.layouts import FIELDS_HELP
from planner.traces.preview import inspect_file
from planner.traces.sources import FORMATS, Dialect

NONE = "—"
DELIMITERS = {"sniff": None, "comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}
ARRIVAL_UNITS = ("auto", "datetime", "s", "ms", "us", "ns")
LATENCY_UNITS = ("auto", "ms", "s", "us")

UPLOAD_PREFIX = "planner-upload-"
STALE_UPLOAD_S = 86_400      # an upload's temporary copy older than a day belongs to a session that has ended
MAX_UPLOAD_MB = int(os.environ.get("PLANNER_MAX_UPLOAD_MB", "1024"))  # an operator may lower server.maxUploadSize

require_frame()
st.title("Traces")
owner = workspace_owner()
uploaded = st.file_uploader(
    "Request log", key="traces_upload", max_upload_size=MAX_UPLOAD_MB,
    type=["csv", "tsv", "txt", "jsonl", "ndjson", "json", "parquet", "gz", "zst", "zstd"],
    help="CSV/TSV, JSON Lines, JSON, Parquet, optionally gzip/zstd-compressed. Azure, BurstGPT, Mooncake, Vidur, "
         "vLLM benchmark and OpenAI usage layouts map themselves.")
st.caption(f"Up to {MAX_UPLOAD_MB:,} MB per file here (a larger one is refused before it is sent: compress it, "
           "or ingest it on the server with `python -m planner ingest PATH` while the app is stopped: one process "
           "at a time opens a store).")


def saved_upload(file) -> Path:
    """Write the upload once per file id to a temporary file DuckDB can stream and sniff; drop stale ones: this
    session's earlier uploads, and any session's older than a day (a session that ends leaves its copy behind)."""
    key = f"traces_tmp_{file.file_id}"
    for stale in [k for k in st.session_state if str(k).startswith("traces_tmp_") and k != key]:
        Path(st.session_state.pop(stale)).unlink(missing_ok=True)
    for old in Path(tempfile.gettempdir()).glob(f"{UPLOAD_PREFIX}*"):
        with contextlib.suppress(OSError):      # another session may remove it first
            if time.time() - old.stat().st_mtime > STALE_UPLOAD_S:
                old.unlink()
    if key not in st.session_state:
        suffix = "".join(Path(file.name).suffixes[-2:])
        with tempfile.NamedTemporaryFile(delete=False, suffix=suffix, prefix=UPLOAD_PREFIX) as fh:
            fh.write(file.getbuffer())
        st.session_state[key] = fh.name
    return Path(st.session_state[key])


def said(message: PlannerError | str, path: Path, uploaded) -> str:
    """A message about the upload (copied to ``path``) in the page's terms: the user's file name, not its
    temporary copy's; the page's Format and column controls, not the command line's ``--format`` and ``--map``."""
    text = str(message).replace(str(path), uploaded.name).replace(path.name, uploaded.name)
    text = text.replace("use --format to pick another reader", "pick another Format above")
    return re.sub(r"\(or say which with --map [^)]*\)", "(or pick the columns below)", text)


def upload_section(uploaded) -> None:
    """Inspect, map and ingest one upload; errors are shown and the rest of the page still renders."""
    path = saved_upload(uploaded)
    c1, c2, c3 = st.columns(3)
    fmt = c1.selectbox("Format", ("auto",) + FORMATS, key="traces_format")
    delim = c2.selectbox("CSV delimiter", list(DELIMITERS), key="traces_delimiter")
    header = c3.checkbox("CSV has a header row", value=True, key="traces_header")
    dialect = None if DELIMITERS[delim] is None and header else Dialect(DELIMITERS[delim] or ",", header=header)
    try:
        seen = inspect_file(connection(), path, fmt, dialect)
    except PlannerError as exc:
        st.error(said(exc, path, uploaded))
        return
    src = seen.source
    st.caption(f"Format **{src.format}**, compression {src.compression}"
               + (f", layout **{seen.mapping.layout}**" if seen.mapping else "")
               + "".join(f" · {n}" for n in src.notes))
    st.dataframe(seen.preview, hide_index=True, key="traces_preview", height=240)
    if seen.mapping_error:
        st.warning(said(seen.mapping_error, path, uploaded))

    st.markdown("**Column mapping** (detected; change any field)")
    detected = seen.mapping.columns if seen.mapping else {}
    options = [NONE] + seen.columns
    overrides = {}
    grid = st.columns(5)
    for i, (fld, help_text) in enumerate(FIELDS_HELP.items()):
        current = detected.get(fld, NONE)
        choice = grid[i % 5].selectbox(fld, options, index=options.index(current), help=help_text,
                                       key=f"traces_map_{uploaded.file_id}_{fld}")
        if choice != current:
            overrides[fld] = "" if choice == NONE else choice
    u1, u2, u3 = st.columns(3)
    arrival_unit = u1.selectbox("Arrival unit", ARRIVAL_UNITS, key="traces_arrival_unit",
                                help="auto: datetimes are read as such, numbers by magnitude (epoch s/ms/µs/ns) "
                                     "or as seconds from the start unless the layout or column name says otherwise")
    latency_unit = u2.selectbox("Latency unit", LATENCY_UNITS, key="traces_latency_unit",
                                help="auto: from the column name (_ms, _s) or, for bare names, the typical values")
    name = u3.text_input("Trace name", value=Path(uploaded.name).name.split(".")[0], key="traces_name")
    units = {} if arrival_unit == "auto" else {"arrival": arrival_unit}
    mapped = set(detected) | {f for f, c in overrides.items() if c}
    if latency_unit != "auto":
        units.update({f: latency_unit for f in ("ttft_ms", "tpot_ms", "e2e_ms") if f in mapped})

    if st.button("Ingest", type="primary", key="traces_ingest"):
        ingest_with_progress(path, name=name or None, fmt=fmt, overrides=overrides, unit_overrides=units,
                             dialect=dialect, source_file=uploaded.name, said=lambda exc: said(exc, path, uploaded))


def ingest_with_progress(path, said=str, **options) -> None:
    """Ingest with a progress bar in a status box; on success select the new trace, on failure say why (as
    ``said`` words it)."""
    result = with_progress(
        "Ingesting…", "Ingest failed: nothing was stored",
        lambda show: ingest_file(connection(), path, on_progress=show, owner=owner, **options),
        lambda r: (f"Already stored as {r.name}" if r.duplicate_of else f"Stored {r.rows:,} rows as {r.name}"
                   + (f" from {r.files:,} files" if r.files > 1 else "")), said)
    if result is None:
        return
    st.session_state["traces_last"] = result.trace_id
    st.session_state["pending_trace"] = result.name  # the sidebar picker switches on the next run
    st.rerun()


def server_section(roots) -> None:
    """A file, folder or glob on the server (for files too large to upload), when the deployment allows it."""
    if not roots:
        st.info(f"Reading trace files on the server is off in this deployment: an operator turns it on with "
                f"`{SERVER_PATHS_ENV}` (the folders traces may be read from). Without it, ingest large files with "
                "`python -m planner ingest PATH` on the server while the app is stopped (one process at a time opens "
                "a store).")
        return
    st.caption("For files too large to upload: an absolute path, a folder or a glob under "
               + ", ".join(f"`{r}`" for r in roots) + ". Several files of one layout become one trace.")
    spec = st.text_input("Path, folder or glob", key="traces_server_path", placeholder=f"{roots[0]}/logs/*.parquet")
    if not spec:
        return
    try:
        fileset = resolve_server_files(spec, roots)
        seen = inspect_file(connection(), fileset.paths[0], "auto", None)
    except PlannerError as exc:
        st.error(str(exc))
        return
    st.caption(f"{len(fileset.paths):,} file{'s' if len(fileset.paths) > 1 else ''}, "
               f"{fileset.total_bytes / 1e6:,.1f} MB; format **{seen.source.format}**"
               + (f", layout **{seen.mapping.layout}**, mapping {seen.mapping.columns}" if seen.mapping else ""))
    st.dataframe(seen.preview, hide_index=True, key="traces_server_preview", height=200)
    if seen.mapping_error:      # a server path is the user's own name: nothing to translate
        st.warning(str(seen.mapping_error))
        return
    name = st.text_input("Trace name", key="traces_server_name", placeholder="the file's or the folder's name")
    if st.button("Ingest from the server", type="primary", key="traces_server_ingest"):
        ingest_with_progress(spec, name=name or None)


if uploaded is not None:
    upload_section(uploaded)
with st.expander("Or read a file, folder or glob on the server", expanded=uploaded is None and bool(server_roots())):
    server_section(server_roots())

last = st.session_state.get("traces_last")
if last and last not in {t.trace_id for t in store.list_traces(connection(), owner)}:
    st.session_state.pop("traces_last")          # removed since: nothing to summarise
    last = None
if last:
    info = store.get_trace(connection(), last)
    m = st.columns(3)
    m[0].metric("Stored", f"{info.rows:,}")
    m[1].metric("Failed", f"{info.failed:,}")
    m[2].metric("Rejected", f"{info.rejected:,}")
    if info.rejected:
        st.dataframe(pl.DataFrame(store.rejects_of(connection(), last, limit=200), orient="row",
                                  schema=["row", "raw", "reason"]), hide_index=True, key="traces_rejects")
        st.download_button("Download rejected rows (CSV)", rejects_csv(last), file_name=f"{info.name}-rejects.csv",
                           mime="text/csv", on_click="ignore", key="traces_rejects_download")

stored_traces(owner)
