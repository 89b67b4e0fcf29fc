"""Fits of a stored trace's lengths and arrivals, and their JSON-ready summaries (the ``fit`` CLI object)."""

from __future__ import annotations

import math

import duckdb

from planner.errors import PlannerError
from planner.traces import store
from planner.traces.queries import arrival_times, gap_summary_of_trace, length_counts, poisson_test_of_trace
from planner.workload.fitting.arrivals import ArrivalFit, dispersion_curve, fit_gaps, peak_summary
from planner.workload.fitting.lengths import LengthFit, fit_lengths

FIT_FIELDS = ("input_tokens", "output_tokens", "interarrival")


def fit_length_field(con: duckdb.DuckDBPyConnection, trace_id: str, fld: str, *, cap: float | None = None,
                     detect: bool = True, seed: int = 0) -> LengthFit:
    """Censored maximum-likelihood fits of one length field (:func:`planner.workload.fitting.lengths.fit_lengths`)."""
    if cap is not None and not (math.isfinite(cap) and cap > 0):
        raise PlannerError(f"--cap {cap!r}: expected a positive number of tokens")
    x, w = length_counts(con, trace_id, fld)
    if w.sum() < 2:
        raise PlannerError(f"{fld}: the trace has fewer than two non-failed requests with a value; nothing to fit")
    try:
        return fit_lengths(x, w, cap=cap, detect=detect, seed=seed)
    except ValueError as exc:       # too few positive values (zero-length outputs dropped): the data, not a defect
        raise PlannerError(f"{fld}: {exc} (the trace has {len(x):,} distinct values, {int(w[x > 0].sum()):,} "
                           "requests above 0); expected at least two positive values to fit") from None


def fit_interarrival(con: duckdb.DuckDBPyConnection, info: store.TraceInfo) -> ArrivalFit:
    """Inter-arrival fits, quantization check and Poisson test of a trace's arrivals."""
    if not info.has_timestamps:
        raise PlannerError(f"trace {info.name!r} has no timestamps: expected an arrival column to fit "
                           "inter-arrival times")
    if info.layout == "summary":
        raise PlannerError(f"trace {info.name!r} is a summary: it counts arrivals per second, not the gaps between "
                           "requests, so inter-arrival times cannot be fitted; `stats` gives its rate and the "
                           "dispersion of counts per second, 10 s and 60 s")
    gaps = gap_summary_of_trace(con, info.trace_id, info.timestamp_resolution_s)
    return fit_gaps(gaps, info.timestamp_resolution_s, lambda min_bin_s: poisson_test_of_trace(
        con, info.trace_id, gaps.arrivals, gaps.span_s, min_bin_s))


def fit_report(con: duckdb.DuckDBPyConnection, trace_ref: str, fld: str, *, cap: float | None = None,
               detect: bool = True) -> dict:
    """The ``fit`` CLI object for ``input_tokens``, ``output_tokens``, ``total_tokens`` or ``interarrival``."""
    info = store.get_trace(con, trace_ref)
    if fld == "interarrival":
        if cap is not None:
            raise PlannerError(f"--cap {cap:g}: a cap censors token lengths; expected no --cap with "
                               "--field interarrival")
        arrivals = fit_interarrival(con, info)
        if arrivals.n < 3:
            raise PlannerError(f"trace {info.name!r} has fewer than three arrivals; nothing to fit")
        summary = arrival_fit_dict(arrivals)
        out = {"field": fld, "n": summary["n"], "best": summary["best"], "censored_at": None,
               "censored_fraction": 0.0, "empirical_quantiles": summary["empirical_quantiles"],
               "candidates": summary["candidates"]}
        out.update({k: summary[k] for k in ("cv", "poisson_consistent", "poisson_test", "quantized", "quantum_s",
                                             "tie_fraction")})
        return out
    return length_fit_dict(fld, fit_length_field(con, info.trace_id, fld, cap=cap, detect=detect))


def length_fit_dict(fld: str, fit: LengthFit) -> dict:
    """JSON-ready summary of a :class:`LengthFit` (the ``fit`` CLI object for a length field): ``n`` counts the
    non-failed requests with a value, ``dropped_nonpositive`` those of them of zero length, which no family fits."""
    return {"field": fld, "n": fit.n, "best": fit.best, "censored_at": fit.censored_at,
            "censored_fraction": fit.censored_fraction, "empirical_quantiles": fit.empirical_quantiles,
            "candidates": [c.as_dict() for c in fit.candidates], "dropped_nonpositive": fit.dropped_nonpositive}


def arrival_overview(con: duckdb.DuckDBPyConnection, info: store.TraceInfo) -> dict | None:
    """Everything the arrival views show: fits, Poisson test, dispersion curve and peak rates (None without times,
    and for a summary, which keeps no gaps: its rate and dispersion are in its ``stats``)."""
    if not info.has_timestamps or info.layout == "summary":
        return None
    t = arrival_times(con, info.trace_id)
    if t.size < 3:
        return None
    return {"span_s": float(t[-1] - t[0]), "fit": fit_interarrival(con, info),
            "dispersion": dispersion_curve(t), "peaks": peak_summary(t)}


def arrival_fit_dict(arrivals: ArrivalFit) -> dict:
    """JSON-ready summary of an :class:`ArrivalFit` (fit candidates without their scipy objects); ``n`` counts the
    gaps fitted, one fewer than the ``arrivals``, as the ``fit`` CLI object counts them."""
    return {"n": arrivals.n - 1, "arrivals": arrivals.n, "cv": arrivals.cv, "tie_fraction": arrivals.tie_fraction,
            "quantized": arrivals.quantized, "quantum_s": arrivals.quantum_s,
            "poisson_test": arrivals.poisson.__dict__ if arrivals.poisson else None,
            "poisson_consistent": bool(arrivals.poisson.consistent) if arrivals.poisson else None,
            "best": arrivals.fit.best if arrivals.fit else "empirical",
            "empirical_quantiles": arrivals.gap_quantiles,
            # a coarse clock leaves nothing for a gap family to fit: the empirical gaps stand alone
            "candidates": ([c.as_dict() for c in arrivals.fit.candidates] if arrivals.fit else
                           [{"family": "empirical", "params": {}, "aic": None, "bic": None, "ks": 0.0,
                             "quantiles": arrivals.gap_quantiles}])}

