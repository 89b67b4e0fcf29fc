"""Replay workloads from a stored trace: its non-failed requests at their own arrivals (time-scaled or rescaled to
a rate), and their measured TTFT/TPOT for calibration. The simulator itself never reads the store."""

from __future__ import annotations

import math
from typing import NamedTuple

import duckdb
import numpy as np
import polars as pl

from planner.catalog.models import ModelSpec
from planner.catalog.presets import preset_name
from planner.errors import PlannerError
from planner.sim.workload import RATE_RANGE, SimWorkload, poisson_or_gamma, sorted_workload
from planner.traces import store
from planner.traces.queries import REPLAYED_SQL, model_counts
from planner.workload.rates import arrival_rate_rps


def from_trace(con: duckdb.DuckDBPyConnection, trace_ref: str, *, rate_scale: float | None = None,
               qps: float | None = None, seed: int = 0, shared_prefix: str | None = None,
               served_by: str | None = None) -> SimWorkload:
    """A stored trace's non-failed requests: its own arrivals, sped up ``rate_scale`` times or rescaled to ``qps``
    (a trace without timestamps needs ``qps``: Poisson arrivals at that rate), with their prefix identity: the
    stored ``hash_ids``, else derived from sessions, else ``shared_prefix`` (``TOKENS[:SHARE]``) where declared.
    ``served_by`` keeps only the requests the trace's ``model`` column says that model served (one server's
    traffic, as :func:`served_models` names it)."""
    info = store.get_trace(con, trace_ref)
    low, high = RATE_RANGE
    if rate_scale is not None and not (math.isfinite(rate_scale) and low <= rate_scale <= high):
        raise PlannerError(f"--rate-scale {rate_scale}: expected a positive, finite factor from {low:g} to {high:g}")
    if qps is not None and not (math.isfinite(qps) and low <= qps <= high):
        raise PlannerError(f"--qps {qps}: expected a positive, finite request rate from {low:g} to {high:g} "
                           "requests/s")
    if info.layout == "summary":
        if served_by is not None:
            raise PlannerError(f"--trace-model {served_by!r}: summary {info.name!r} counts requests, not which "
                               "model served each")
        return _from_summary(con, info, rate_scale, qps, seed).with_shared_prefix(shared_prefix)
    frame = _replayed(con, info, served_by=served_by)
    if frame.height == 0:
        raise PlannerError(f"trace {info.name!r} has no completed requests to replay")
    if info.has_timestamps and frame["arrival"].null_count() == 0:
        arrival = _scaled(frame["arrival"].to_numpy().astype(float), rate_scale, qps)
    elif qps is not None:
        arrival = poisson_or_gamma(frame.height, qps, np.random.default_rng(seed))
    else:
        # recommend and report take no --qps: their searches scale the trace's own arrivals
        raise PlannerError(f"trace {info.name!r} has no timestamps: a replay needs arrival times; expected a trace "
                           "with an arrival column (simulate takes --qps for Poisson arrivals instead)")
    label = f"trace {info.name}" + (f" ({served_by}'s requests)" if served_by is not None else "") + (
        f" at {qps:g} req/s" if qps else f" ×{rate_scale:g}" if rate_scale else "")
    return _workload(frame, arrival, label).with_shared_prefix(shared_prefix)


def served_models(con: duckdb.DuckDBPyConnection, trace_ref: str) -> dict[str, int]:
    """How many of the trace's replayed requests each model its ``model`` column names served (as the column
    writes it, most first); empty where the trace names none. A trace with several holds several servers'
    traffic, and latencies measured on several servers."""
    info = store.get_trace(con, trace_ref)
    return {} if info.layout == "summary" else model_counts(con, info.trace_id, replayed=True)


def _counts(frame: pl.DataFrame) -> dict[str, int]:
    """Requests per model name in a frame with a ``model`` column, most first (then by name)."""
    grouped = frame.drop_nulls("model").group_by("model").len().sort(["len", "model"], descending=[True, False])
    return dict(grouped.iter_rows())


def _listed(counts: dict[str, int]) -> str:
    """``name (requests), …`` of :func:`_counts`, for messages."""
    return ", ".join(f"{name} ({n:,})" for name, n in counts.items())


def _served(trace: str, served_by: str, counts: dict[str, int]) -> None:
    """Refuse a model the trace does not name as serving any of its requests."""
    if served_by not in counts:
        raise PlannerError(f"--trace-model {served_by!r}: trace {trace!r} names no such model; it names "
                           f"{_listed(counts) or 'none'}")


def _scaled(arrival: np.ndarray, rate_scale: float | None, qps: float | None) -> np.ndarray:
    """Arrivals sped up ``rate_scale`` times or rescaled to ``qps`` (as they are with neither)."""
    if qps is not None:
        rate = arrival_rate_rps(arrival)
        if rate is None:
            raise PlannerError("--qps on a trace whose requests all arrive at once: use --rate-scale")
        return arrival * rate / qps
    return arrival / rate_scale if rate_scale is not None else arrival


def _from_summary(con: duckdb.DuckDBPyConnection, info, rate_scale: float | None, qps: float | None,
                  seed: int) -> SimWorkload:
    """A summary's replay: as many requests as each second counted, spread evenly at random within it (seeded),
    their lengths drawn from the fitted input and output distributions (they were counted apart, so drawn apart);
    without arrivals, Poisson at ``qps``."""
    from planner.sim.workload import from_fits
    from planner.traces.summary import summary_arrival_counts
    from planner.workload.fits import fit_length_field

    fits = [fit_length_field(con, info.trace_id, fld) for fld in ("input_tokens", "output_tokens")]
    rng = np.random.default_rng(seed)
    if info.has_timestamps:
        seconds, counts = summary_arrival_counts(con, info.trace_id)
        arrival = np.sort(np.repeat(seconds.astype(float), counts) + rng.random(int(counts.sum())))
        arrival = _scaled(arrival, rate_scale, qps)
    elif qps is not None:
        arrival = poisson_or_gamma(info.rows, qps, rng)
    else:
        raise PlannerError(f"summary {info.name!r} has no arrival_counts: a replay needs arrival times; expected a "
                           "summary with arrival counts (simulate takes --qps for Poisson arrivals instead)")
    label = f"summary {info.name} (lengths drawn from {fits[0].best} / {fits[1].best})" + (
        f" at {qps:g} req/s" if qps else f" ×{rate_scale:g}" if rate_scale else "")
    return from_fits(*fits, n=arrival.size, qps=None, seed=seed, arrival_s=arrival, label=label)


def _replayed(con: duckdb.DuckDBPyConnection, info, extra: str = "", where: str = "",
              served_by: str | None = None) -> pl.DataFrame:
    """The requests a replay takes, in arrival order (rows without one last): lengths, session and hash ids (NULL
    where the trace has none), plus ``extra`` columns; only ``served_by``'s where given (refused where the trace
    names no such model)."""
    if served_by is not None:
        _served(info.name, served_by, served_models(con, info.trace_id))
        where += " AND model = $served_by"
    view = store.requests_view(info.trace_id)
    columns = con.cursor().sql(f"SELECT * FROM {view} LIMIT 0").columns
    session = "session_id" if "session_id" in columns else "NULL::VARCHAR AS session_id"
    hashes = "hash_ids" if "hash_ids" in columns else "NULL AS hash_ids"
    sql = (f"SELECT arrival, input_tokens, output_tokens, {session}, {hashes}{extra} FROM {view} "
           f"WHERE {REPLAYED_SQL}{where} ORDER BY arrival NULLS LAST, \"row\"")
    return con.cursor().sql(sql, params=None if served_by is None else {"served_by": served_by}).pl()


def _workload(frame: pl.DataFrame, arrival: np.ndarray, label: str) -> SimWorkload:
    """The frame's requests at ``arrival`` with their prefix identity: hash ids, else sessions."""
    groups = frame["session_id"].to_numpy() if frame["session_id"].null_count() < frame.height else None
    hash_ids = frame["hash_ids"].to_list() if frame["hash_ids"].null_count() < frame.height else None
    return sorted_workload(arrival, frame["input_tokens"].to_numpy(), frame["output_tokens"].to_numpy(), label,
                           groups, hash_ids)


class Measured(NamedTuple):
    """A trace's requests with their measured latencies (:func:`measured_latencies`)."""

    workload: SimWorkload
    ttft_s: np.ndarray          # per request, seconds, NaN where absent
    tpot_s: np.ndarray
    notes: tuple[str, ...]      # which requests were kept, where the trace names the models that served them


def measured_latencies(con: duckdb.DuckDBPyConnection, trace_ref: str, model: ModelSpec | None = None,
                       trace_model: str | None = None) -> Measured:
    """A trace's replay workload (its own arrivals and prefix identity) with each request's measured TTFT and TPOT
    in seconds (NaN where absent), in the workload's order.

    Where the trace's ``model`` column names the models that served its requests, only one server's are kept:
    those of ``trace_model`` (as the column writes it), else those naming ``model`` (its preset name or Hugging Face
    id). Latencies measured on several servers are not one server's to calibrate.
    """
    info = store.get_trace(con, trace_ref)
    if info.layout == "summary":
        raise PlannerError(f"trace {info.name!r} is a summary: its latencies are histograms, not each request's; "
                           "calibrating and comparing latencies need the requests")
    if not info.has_timestamps:
        raise PlannerError(f"trace {info.name!r} has no timestamps: calibrating from latencies needs its arrivals")
    # every optional field is a column of the view (NULL where the trace has none), the model included
    frame = _replayed(con, info, ", ttft_ms, tpot_ms, model", " AND arrival IS NOT NULL")
    if frame["ttft_ms"].null_count() == frame.height and frame["tpot_ms"].null_count() == frame.height:
        raise PlannerError(f"trace {info.name!r} has no TTFT or TPOT column: expected measured latencies")
    frame, notes = _one_server(frame, info.name, model, trace_model)
    # in arrival order already, so the workload's order (a stable sort by arrival) is the frame's
    workload = _workload(frame, frame["arrival"].to_numpy().astype(float), f"trace {info.name}")
    as_s = [frame[c].cast(float).fill_null(float("nan")).to_numpy() / 1e3 for c in ("ttft_ms", "tpot_ms")]
    return Measured(workload, as_s[0], as_s[1], notes)


def _one_server(frame: pl.DataFrame, trace: str, model: ModelSpec | None,
                trace_model: str | None) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """The requests of one model where the trace names several (see :func:`measured_latencies`)."""
    counts = _counts(frame)
    listed = _listed(counts)
    notes = []
    if trace_model is not None:
        _served(trace, trace_model, counts)
        keep = trace_model
        if model is not None and not names_model(keep, model):
            notes.append(replayed_as_another(keep, model))
    elif model is None or len(counts) == 0:
        return frame, ()
    else:
        named = [name for name in counts if names_model(name, model)]
        if len(named) > 1:           # a base and its fine-tune (FINE_TUNES) are one preset but two servers
            raise PlannerError(f"trace {trace!r} holds the latencies of several servers of {model.name} ({listed}): "
                               "calibrate on one server's, naming it with --trace-model")
        keep = named[0] if named else None
        if keep is None and len(counts) > 1:
            raise PlannerError(f"trace {trace!r} holds the latencies of several models ({listed}) and none is "
                               f"{model.name}: calibrate on one server's, naming its model (--model, or the "
                               "trace's own name for it with --trace-model)")
        if keep is None:
            return frame, (f"the trace's requests were served by {listed.rsplit(' (', 1)[0]}, and are replayed "
                           f"as {model.name}: check that its latencies were measured on this model",)
    others = {name: n for name, n in counts.items() if name != keep}
    left = frame.height - counts[keep]
    if left:
        notes.insert(0, f"calibrated on the {counts[keep]:,} requests the trace says {keep} served; {left:,} others "
                        f"left out ({', '.join(f'{name}: {n:,}' for name, n in others.items())}"
                        f"{', no model named' if left > sum(others.values()) else ''})")
    return frame.filter(pl.col("model") == keep), tuple(notes)


def several_servers(served: dict[str, int], model: ModelSpec) -> str | None:
    """The note where a trace's requests (``served``, :func:`served_models`) were served by several models and a
    plan replays them all on one ``model`` server; None where they name one model or none."""
    if len(served) < 2:
        return None
    own = next((name for name in served if names_model(name, model)), "NAME")
    return (f"the trace's requests were served by {len(served)} models ({_listed(served)}), and all of them are "
            f"replayed on one {model.name} server: the plan sizes that server for their sum; to plan one server, "
            f"split its requests off as a trace of their own (`split TRACE --model {own}`, or the Traces page)")


def replayed_as_another(trace_model: str, model: ModelSpec) -> str:
    """The note where one server's requests (``trace_model``, as the trace names it) are replayed as ``model``,
    which is not that server's: their measured latencies then describe another model."""
    return (f"the trace says {trace_model} served these requests, and they are replayed as {model.name}: check "
            "that this is the model they measured")


def names_model(name: str, model: ModelSpec) -> bool:
    """Whether a trace's model name is ``model``: its preset name or Hugging Face id (or a fine-tune's sharing its
    config, :data:`planner.catalog.presets.FINE_TUNES`), either case."""
    key = name.strip().lower()
    return bool(key) and (key in (model.name.lower(), (model.hf_id or "").lower()) or preset_name(key) == model.name)
