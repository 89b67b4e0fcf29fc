"""Calibration on the pages: the cost model a session uses (an uploaded file, a fit to the trace, or the
defaults) and the Simulate page's fit to a trace's own latencies."""

import streamlit as st

from pages._shared import connection, kept, show_table
from planner.errors import PlannerError
from planner.sim.calibration_file import file_text, params_from_json
from planner.sim.cost_model import CostParams
from planner.sim.trace_calibration import fit_measured


@st.cache_data(max_entries=16, show_spinner="Reading measured latencies…")
def measured_latency(trace_id: str, served_by: str | None = None):
    """The trace's own TTFT and TPOT per request (seconds, its replay's order; ``served_by``'s requests only where
    given), or None where it carries none."""
    from planner.workload.replay import measured_latencies

    try:
        _, ttft, tpot, _ = measured_latencies(connection(), trace_id, trace_model=served_by)
    except PlannerError:
        return None
    return ttft, tpot


@st.cache_data(max_entries=16, show_spinner=False)
def served_models(trace_id: str) -> dict[str, int]:
    """Requests per model the trace's ``model`` column names (:func:`planner.workload.replay.served_models`)."""
    from planner.workload import replay

    return replay.served_models(connection(), trace_id)


ALL_REQUESTS = "all requests"


def served_by_choice(column, trace_id: str) -> str | None:
    """Where the trace names several serving models (several servers' traffic, and latencies measured on each):
    whose requests the replay takes, chosen in ``column``; None for all of them (the only choice otherwise)."""
    from pages._scenario import URL          # not at the top: the scenario's widgets import this module

    servers = served_models(trace_id)
    if len(servers) < 2:
        return None
    pick = column.selectbox("Requests served by", [ALL_REQUESTS, *servers], key="served_by", **URL,
                            help="The trace names the model that served each request: "
                                 + ", ".join(f"{name} {n:,}" for name, n in servers.items())
                                 + ". Its latencies were measured on each server: replay one server's requests "
                                   "to set them beside its latencies and to calibrate to them.")
    return None if pick == ALL_REQUESTS else pick


def show_warning(sentence: str) -> None:
    """A calibration warning (a sentence written to follow "warning:", as the CLI prints it), capitalised."""
    st.warning(sentence[0].upper() + sentence[1:])


def cost_params() -> CostParams:
    """The cost model: defaults, a calibration file uploaded in this session, or one the Simulate page fitted to
    the trace (kept across pages, until another replaces it or the defaults are asked for)."""
    upload = st.file_uploader("Cost model calibration (a file `calibrate -o` wrote)", type=["json"],
                              key="calibration_file")
    # an upload applies once: a calibration fitted later on the Simulate page is not overwritten on the next run
    if upload is not None and st.session_state.get("calibration_upload") != upload.file_id:
        try:
            st.session_state["cost_params"] = params_from_json(upload.getvalue().decode("utf-8", "replace"),
                                                               upload.name)
        except PlannerError as exc:
            st.error(str(exc))
            st.stop()
        st.session_state["calibration_upload"] = upload.file_id
    params = st.session_state.get("cost_params", CostParams())
    c = st.columns([4, 1])
    if params != CostParams() and c[1].button("Use the defaults", key="cost_defaults"):
        params = st.session_state["cost_params"] = CostParams()
    c[0].caption(f"Cost model: {params.source}")
    if params.fitted_on is not None and params.fitted_on.fit_notes:      # what the file says of its own fit
        c[0].caption(" · ".join(n[0].upper() + n[1:] for n in params.fitted_on.fit_notes))
    return params


def trace_calibration(trace_id: str, scenario, served_by: str | None = None, progress=None) -> dict:
    """``calibrate --trace``'s fit on the trace's own TTFT and TPOT in ``scenario`` (``--trace-model served_by``;
    :func:`planner.sim.trace_calibration.fit_measured`), kept per trace, server and scenario."""
    from planner.workload.replay import measured_latencies

    def fit() -> dict:
        measured = measured_latencies(connection(), trace_id, scenario.model, served_by)
        return fit_measured(scenario, measured, progress=progress)
    return kept(("calibrate", trace_id, served_by, scenario.key), fit)


def calibration_section(info, s, served_by: str | None, shown: tuple[str, ...] = ()) -> None:
    """The fit to the latencies of the trace (of ``served_by``'s requests, where given): fitted values, error and
    bias on the part fitted and the part held out, warnings (but those the page ``shown`` already), and the file
    to download or apply to this session."""
    bar = st.progress(0.0, text="calibrating…")
    try:
        report = trace_calibration(info.trace_id, s, served_by, lambda f, msg: bar.progress(min(f, 1.0), text=msg))
    except PlannerError as exc:
        bar.empty()
        st.error(str(exc))
        return
    bar.empty()
    fitted = ", ".join(f"{k.upper()} {report['params'][k]:.3g}" for k in report["fitted"])
    st.markdown(f"**Calibrated on this trace:** {fitted} (in place of "
                f"{', '.join(f'{k.upper()} {getattr(s.cost.resolved(s), k):.3g}' for k in report['fitted'])})")
    show_table([{"part": f"{split.replace('_', '-')} ({report[split]['requests']:,} requests)", **row}
                for split in ("in_sample", "held_out") for row in report[split]["metrics"]], "calibration_errors")
    st.caption(" · ".join(f"{split.replace('_', '-')}: median |error| {report[split]['median_abs_error']:.1%}, "
                          f"bias {report[split]['bias']:+.1%}" for split in ("in_sample", "held_out")
                          if report[split]["median_abs_error"] is not None))
    for warning in report["warnings"]:
        if warning not in shown:
            show_warning(warning)
    text = file_text(report, s)
    c = st.columns(2)
    c[0].download_button("Download the calibration file", text, file_name=f"calibration-{info.name}.json",
                         mime="application/json", key="calibration_download",
                         help="--calibration FILE on step, simulate, recommend and report")
    if c[1].button("Use it for this session", key="calibration_apply"):
        st.session_state["cost_params"] = params_from_json(text, f"{info.name}, Simulate page")
        st.rerun()
