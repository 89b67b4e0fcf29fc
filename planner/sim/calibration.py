"""Fit the cost model's efficiencies and overheads to measurements: timed iterations, or a trace's TTFT/TPOT.

Iterations (a CSV of ``prefill_tokens, prefill_count, decode_count, decode_context, step_ms``; a row is a prefill
batch of ``prefill_count`` prompts of ``prefill_tokens`` each, or a decode batch) are fitted by least squares on
relative error. A trace with measured TTFT and TPOT is fitted by replaying it through the simulator and matching
each request's TTFT and TPOT (log error), so queueing and batching are accounted for, not assumed away.

The calibration file the fits' reports become is written and read by :mod:`planner.sim.calibration_file`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from scipy import optimize

from planner.errors import PlannerError, first_line
from planner.sim.cost_model import MAX_STEP_SEQUENCES, CostParams, batch_aggregates, coefficients, step_seconds

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.scenario import Scenario

POINT_COLUMNS = ("prefill_tokens", "prefill_count", "decode_count", "decode_context", "step_ms")
_POINT_PARAMS = ("mfu", "mbu", "step_overhead_s", "seq_overhead_s")
_TRACE_PARAMS = ("mfu", "mbu")
_TRACE_QUANTILES = np.linspace(0.05, 0.95, 19)
_BOUNDS = {"mfu": (0.02, 1.0), "mbu": (0.02, 1.0), "step_overhead_s": (0.0, 0.05), "seq_overhead_s": (0.0, 1e-3)}
HOLDOUT_SHARE = 0.3      # calibrate --trace: the last 30% of the arrivals are predicted, not fitted
# a parameter whose 10% change moves no fitted prediction by 1% is one the data does not pin down
_NUDGE, _WEAK = 0.1, 0.01
CV_FOLDS = 10            # calibrate --points: each row predicted by a fit without it (leave-one-out up to 10 rows)
# what each fit's report names as its source, and the parameters it fits (calibration files before the fitted
# names were recorded are read by it); the parameters a scenario leaves to its GPU and engine (None)
FIT_SOURCES = {"iterations": _POINT_PARAMS, "trace TTFT/TPOT quantiles": _TRACE_PARAMS}
LEFT_TO_THE_SERVER = ("roofline_p", "allreduce_latency_s", "tp_step_overhead_s")
_FIT_REPLAYS = 320       # about what fit_trace's search replays on two parameters (the bundled sample: 306)
_OVERFIT = 2.0           # cross-validated median error this many times the in-sample one (and over 5%) is warned of
LATENCY_METRICS = (("ttft", "mean"), ("ttft", "p50"), ("ttft", "p90"), ("ttft", "p99"),
                   ("tpot", "mean"), ("tpot", "p50"), ("tpot", "p90"), ("tpot", "p99"))


def read_points(path: str | Path) -> pl.DataFrame:
    """The measured-iterations CSV, checked: every column present, numbers, each row a prefill or a decode batch."""
    try:
        frame = pl.read_csv(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise PlannerError(f"--points {path}: cannot read it as CSV ({first_line(exc)})") from None
    missing = [c for c in POINT_COLUMNS if c not in frame.columns]
    if missing:
        raise PlannerError(f"--points {path} lacks columns {', '.join(missing)}: expected {','.join(POINT_COLUMNS)}")
    try:
        frame = frame.select(pl.col(c).cast(pl.Float64, strict=True) for c in POINT_COLUMNS).fill_null(0.0)
    except pl.exceptions.PolarsError as exc:
        raise PlannerError(f"--points {path}: every column must be numeric ({first_line(exc)})") from None
    counts = [c for c in POINT_COLUMNS if c != "step_ms"]
    bad = frame.with_row_index("row", 2).filter(
        pl.any_horizontal(~pl.col(c).is_finite() | (pl.col(c) < 0) | (pl.col(c) != pl.col(c).floor()) for c in counts)
        | (pl.col("prefill_count") > MAX_STEP_SEQUENCES) | (pl.col("decode_count") > MAX_STEP_SEQUENCES)
        | ~pl.col("step_ms").is_finite())
    if bad.height:
        raise PlannerError(f"--points {path}: line {bad['row'][0]} (and {bad.height - 1} more) holds a negative, "
                           f"fractional or non-finite count, or a count past {MAX_STEP_SEQUENCES:,}; expected whole "
                           "token and sequence counts and a finite step_ms")
    empty = frame.filter((pl.col("prefill_tokens") * pl.col("prefill_count") + pl.col("decode_count") <= 0)
                         | (pl.col("step_ms") <= 0))
    if empty.height:
        raise PlannerError(f"--points {path}: {empty.height} rows have no tokens or a non-positive step_ms")
    # a count without its lengths (or lengths without a count) would be dropped unseen: the row is mistyped
    half = frame.with_row_index("row", 2).filter(((pl.col("prefill_tokens") > 0) != (pl.col("prefill_count") > 0))
                                                 | ((pl.col("decode_count") > 0) != (pl.col("decode_context") > 0)))
    if half.height:
        raise PlannerError(f"--points {path}: line {half['row'][0]} (and {half.height - 1} more) gives prefill "
                           "tokens without a prefill count, a decode count without a context, or the reverse; "
                           "expected both of a pair or neither (a decode's context is at least 1 token)")
    distinct = frame.select(POINT_COLUMNS[:-1]).n_unique()
    if distinct < len(_POINT_PARAMS):
        raise PlannerError(f"--points {path}: {frame.height} rows time {distinct} distinct steps; the "
                           f"{len(_POINT_PARAMS)} parameters need at least {len(_POINT_PARAMS)} (repeats of a step "
                           "average its noise but pin no other parameter)")
    return frame


def _steps(frame: pl.DataFrame) -> np.ndarray:
    """Each row's step (0, 1, …, in order of first appearance): repeats of one step share it."""
    keys = frame.select(POINT_COLUMNS[:-1]).rows()
    first: dict[tuple, int] = {}
    return np.array([first.setdefault(k, len(first)) for k in keys], np.int64)


def _aggregates(frame: pl.DataFrame) -> list[tuple[float, ...]]:
    rows = []
    for p, pc, dc, ctx, _ in frame.iter_rows():
        rows.append(batch_aggregates([(int(p), 0)] * int(pc), [(int(dc), int(ctx))] if dc else []))
    return rows


def predict_points(scenario: Scenario, frame: pl.DataFrame) -> np.ndarray:
    """Predicted step_ms of each measured row, with the scenario's cost model."""
    c = scenario.coefficients.as_tuple()
    return np.array([step_seconds.py_func(c, *agg)[0] * 1e3 for agg in _aggregates(frame)])


def _with(params: CostParams, names: tuple[str, ...], values: np.ndarray) -> CostParams:
    return replace(params, **{k: float(v) for k, v in zip(names, values, strict=True)})


def _solve(scenario: Scenario, aggs: list[tuple[float, ...]], measured: np.ndarray):
    """The least-squares fit of :data:`_POINT_PARAMS` to these rows, from the scenario's cost model."""
    start = scenario.cost.resolved(scenario)

    def residuals(vec):
        c = coefficients(scenario.replace(cost=_with(start, _POINT_PARAMS, vec))).as_tuple()
        return np.array([step_seconds.py_func(c, *a)[0] * 1e3 for a in aggs]) / measured - 1

    lo, hi = zip(*(_BOUNDS[k] for k in _POINT_PARAMS), strict=True)
    x0 = np.clip([getattr(start, k) for k in _POINT_PARAMS], lo, hi)
    return optimize.least_squares(residuals, x0, bounds=(lo, hi), x_scale=np.maximum(np.abs(x0), 1e-6))


def fit_points(scenario: Scenario, frame: pl.DataFrame) -> dict:
    """Least-squares fit of MFU, MBU and the overheads to measured step times (relative residuals), starting from
    the scenario's cost model; its model, GPU, TP and dtypes are the measured server's. The report adds
    ``cross_validated``: each row predicted by a fit that did not see it (:data:`CV_FOLDS`), the error to expect
    on iterations like these but not among them, and a warning when it is far above the in-sample error."""
    longest = frame.with_row_index("row", 2).filter(
        pl.max_horizontal("prefill_tokens", pl.col("decode_context") + (pl.col("decode_count") > 0))
        > scenario.max_model_len)
    if longest.height:
        raise PlannerError(f"--points: line {longest['row'][0]} (and {longest.height - 1} more) holds a sequence "
                           f"longer than --max-model-len ({scenario.max_model_len:,}): no engine runs that step; "
                           "raise --max-model-len to the measured server's")
    measured = frame["step_ms"].to_numpy()
    aggs = _aggregates(frame)
    fit = _solve(scenario, aggs, measured)
    params = _with(scenario.cost, _POINT_PARAMS, fit.x)
    predicted = predict_points(scenario.replace(cost=params), frame)
    report = _report(params, measured, predicted, "iterations")
    # residuals are relative, so the Jacobian times a 10% step is each row's relative change
    moves = {name: float(np.max(np.abs(fit.jac[:, j] * _NUDGE * fit.x[j]))) for j, name in enumerate(_POINT_PARAMS)}
    remedy = ("rows of the kind it governs (prefill-bound for mfu, decode-bound for mbu, many small steps for the "
              "overheads)")
    report["warnings"] = _at_bound(params, _POINT_PARAMS) + _weak(moves, "step times", remedy) + _traded_off(
        fit, [j for j, name in enumerate(_POINT_PARAMS) if moves[name] >= _WEAK])
    steps = _steps(frame)
    report["cross_validated"] = _cross_validated(scenario, frame, aggs, measured, steps)
    cv = report["cross_validated"]
    in_sample = float(np.median(np.abs(predicted / measured - 1)))
    if cv is None:
        report["warnings"].append(f"{steps.max() + 1} distinct steps are too few to predict any of them from a fit "
                                  f"without it ({len(_POINT_PARAMS)} parameters need at least "
                                  f"{len(_POINT_PARAMS) + 1}): its error off these rows is unknown")
    elif cv["median_abs_error"] > max(_OVERFIT * in_sample, _WEAK * 5):
        report["warnings"].append(
            f"a row the fit did not see is predicted at {cv['median_abs_error']:.1%} median error (worst "
            f"{cv['worst_abs_error']:.1%}), against a median of {in_sample:.1%} on the rows it fitted: the cost "
            "model follows these rows more closely than it predicts others; expect errors of the cross-validated "
            "size, and add rows nearer the steps you will predict")
    report["warnings"] += _inherited(scenario, _POINT_PARAMS)
    return report


def _cross_validated(scenario: Scenario, frame: pl.DataFrame, aggs: list, measured: np.ndarray,
                     steps: np.ndarray) -> dict | None:
    """Each row predicted by a fit on the others: steps i, i + k, i + 2k, ... left out together (leave-one-out up
    to :data:`CV_FOLDS` steps), a step's repeats with it, so no row is predicted by a fit that saw its copy; None
    where a fold would leave fewer distinct steps than parameters."""
    distinct = int(steps.max()) + 1
    folds = min(distinct, CV_FOLDS)
    if distinct - -(-distinct // folds) < len(_POINT_PARAMS):
        return None
    fold = steps % folds
    held = np.empty(len(aggs))
    for k in range(folds):
        rest = fold != k
        fitted = _with(scenario.cost, _POINT_PARAMS, _solve(scenario, [a for a, r in zip(aggs, rest) if r],
                                                            measured[rest]).x)
        held[~rest] = predict_points(scenario.replace(cost=fitted), frame.filter(pl.Series(~rest)))
    rel = held / measured - 1
    return {"folds": folds, "median_abs_error": float(np.median(np.abs(rel))),
            "worst_abs_error": float(np.max(np.abs(rel))), "bias": float(np.median(rel)),
            "residuals": [{"measured_ms": float(m), "predicted_ms": float(p), "error": float(r)}
                          for m, p, r in zip(measured, held, rel, strict=True)]}


def _traded_off(fit, columns: list[int]) -> list[str]:
    """A warning where the parameters at ``columns`` (each constrained on its own) trade off: some combination of
    changes of up to 10% each moves no fitted step time by ``_WEAK``, so the data fix their mix, not each one."""
    if len(columns) < 2:
        return []
    scaled = fit.jac[:, columns] * _NUDGE * fit.x[columns]        # each row's relative move per 10% change
    weakest = np.linalg.svd(scaled, full_matrices=False)[2][-1]   # the unit combination moving the rows least
    move = float(np.max(np.abs(scaled @ weakest)))
    if move >= _WEAK:
        return []
    # those with a fifth of the combination or more (one alone would have moved the rows by itself)
    names = [_POINT_PARAMS[j] for j, w in zip(columns, weakest, strict=True) if abs(w) >= 0.2]
    if len(names) < 2:
        return []
    return [f"{' and '.join(names)} trade off: changed together (by up to 10% each) they move no predicted step "
            f"time by more than {move:.2%}, so these rows fix their mix, not each value; add rows that load them "
            "differently (prefills and decode batches of several sizes)"]


def _inherited(scenario: Scenario, fitted: tuple[str, ...]) -> list[str]:
    """Where the fit (setting ``fitted``) started from a calibration of another server: what the new file keeps
    of it unchecked; nothing where this fit sets everything that calibration had fitted."""
    on = scenario.cost.fitted_on
    if on is None:
        return []
    kept = tuple(name for name in on.fitted if name not in fitted) if on.fitted else on.fitted
    if on.fitted and not kept:
        return []
    cost = replace(scenario.cost, fitted_on=replace(on, fitted=kept))
    return [f"the parameters this fit did not set are kept from {scenario.cost.source}, and {warning}"
            for warning in cost.transfer_warnings(scenario)]


def _at_bound(params: CostParams, names: tuple[str, ...]) -> list[str]:
    """A warning per fitted parameter that ended on a bound of its range: the model could not follow the data."""
    out = []
    for name in names:
        value, (lo, hi) = getattr(params, name), _BOUNDS[name]
        if value >= hi * 0.99 or (lo > 0 and value <= lo * 1.01):
            out.append(f"{name} ended at {value:.4g}, the {'top' if value >= hi * 0.99 else 'bottom'} of its range "
                       f"[{lo:g}, {hi:g}]: no setting of it reproduces the data; check that the scenario is the "
                       "measured server's (GPU, TP, engine limits, replicas behind a router)")
    return out


def _weak(moves: dict[str, float], what: str, remedy: str) -> list[str]:
    """A warning per parameter whose 10% change moves no prediction by ``_WEAK``."""
    return [f"{name} is poorly constrained: a 10% change moves no predicted {what} by more than {move:.2%}, below "
            f"measurement noise, so its fitted value is not to be trusted; add {remedy}"
            for name, move in moves.items() if move < _WEAK]


def latency_errors(predicted_ttft_s: np.ndarray, predicted_tpot_s: np.ndarray, measured_ttft_s: np.ndarray,
                   measured_tpot_s: np.ndarray) -> list[dict]:
    """Predicted against measured TTFT and TPOT: mean, p50, p90 and p99 of each (ms, finite values), with the
    error ``predicted / measured − 1``; the calibration report's and the Simulate page's table."""
    rows = []
    for metric, stat in LATENCY_METRICS:
        pair = {"ttft": (predicted_ttft_s, measured_ttft_s), "tpot": (predicted_tpot_s, measured_tpot_s)}[metric]
        values = []
        for v in pair:
            v = np.asarray(v, float)
            v = v[np.isfinite(v)]
            values.append(float("nan") if v.size == 0 else
                          float(v.mean() if stat == "mean" else np.percentile(v, float(stat[1:]))) * 1e3)
        rows.append({"metric": f"{metric.upper()} {stat}", "measured_ms": values[1], "predicted_ms": values[0],
                     "error": values[0] / values[1] - 1 if values[1] > 0 else float("nan")})
    return rows


def fit_trace_held_out(scenario: Scenario, workload, ttft_s: np.ndarray, tpot_s: np.ndarray,
                       holdout: float = HOLDOUT_SHARE, progress: Callable[[float, str], None] | None = None) -> dict:
    """:func:`fit_trace` on the first ``1 − holdout`` of the trace's arrivals, then the whole trace replayed with
    the fitted parameters: per-metric error and bias on the requests fitted (in-sample) and on the later ones
    (held out, predicted from a replay that carries on from the fitted part), and a warning per parameter the
    fitted part hardly constrains. ``progress(fraction, message)`` hears of each replay."""
    from planner.sim.run import simulate

    say = progress or (lambda fraction, message: None)

    n = workload.n
    fitted_n = int(round(n * (1 - holdout)))
    head = np.arange(n) < fitted_n
    timed = np.isfinite(ttft_s) | np.isfinite(tpot_s)
    sides = int(timed[head].sum()), int(timed[~head].sum())
    if min(sides) < 10:
        raise PlannerError(f"the trace's first {1 - holdout:.0%} of arrivals hold {sides[0]:,} requests with a "
                           f"measured TTFT or TPOT and the last {holdout:.0%} {sides[1]:,}: a held-out split needs "
                           "at least 10 on each side (change --holdout, or calibrate on a trace timed throughout)")
    part = workload.subset(head)
    report = fit_trace(scenario, part, ttft_s[head], tpot_s[head],
                       progress=lambda fraction, message: say(0.9 * fraction, message))
    params = CostParams(**{**report["params"], "source": "calibrated"})
    say(0.9, "replaying the whole trace with the fitted parameters")
    result = simulate(workload, scenario.replace(cost=params))
    for name, keep in (("in_sample", head), ("held_out", ~head)):
        rows = latency_errors(result.ttft_s[keep], result.tpot_s[keep], ttft_s[keep], tpot_s[keep])
        errors = [r["error"] for r in rows if np.isfinite(r["error"])]
        report[name] = {"requests": int(keep.sum()), "metrics": rows,
                        "median_abs_error": float(np.median(np.abs(errors))) if errors else None,
                        "bias": float(np.median(errors)) if errors else None}
    say(0.94, "probing how firmly the fitted part pins each parameter")
    base = _trace_quantiles(simulate(part, scenario.replace(cost=params)))
    moves = {}
    for name in _TRACE_PARAMS:
        value = getattr(params, name)
        # 10% more, or 10% less for one on the top of its range
        value *= 1 + _NUDGE if value * (1 + _NUDGE) <= _BOUNDS[name][1] else 1 - _NUDGE
        nudged = _trace_quantiles(simulate(part, scenario.replace(cost=replace(params, **{name: value}))))
        moves[name] = float(np.nanmax(np.abs(nudged / base - 1)))
    report["warnings"] = _at_bound(params, _TRACE_PARAMS) + _weak(
        moves, "TTFT/TPOT quantiles", "requests at loads where it binds (prefill-heavy arrivals for mfu, "
        "decode-bound steps for mbu), or timed iterations (--points)") + _inherited(scenario, _TRACE_PARAMS)
    report["holdout"] = holdout
    say(1.0, f"calibrated on {fitted_n:,} requests, {n - fitted_n:,} held out")
    return report


def fit_measured(scenario: Scenario, measured, holdout: float = HOLDOUT_SHARE,
                 progress: Callable[[float, str], None] | None = None) -> dict:
    """:func:`fit_trace_held_out` on a trace's measured requests
    (:func:`planner.workload.replay.measured_latencies`), its notes on which requests were kept first among the
    warnings: ``calibrate --trace`` and the Simulate page's fit."""
    report = fit_trace_held_out(scenario, measured.workload, measured.ttft_s, measured.tpot_s, holdout, progress)
    return {**report, "warnings": [*measured.notes, *report["warnings"]]}


def _trace_quantiles(result) -> np.ndarray:
    return np.concatenate([np.nanquantile(v, _TRACE_QUANTILES) for v in (result.ttft_s, result.tpot_s)
                           if np.isfinite(v).any()])


def fit_trace(scenario: Scenario, workload, ttft_s: np.ndarray, tpot_s: np.ndarray,
              blocks_factors: tuple[float, ...] = (1.0,), progress: Callable[[float, str], None] | None = None) -> dict:
    """Fit MFU and MBU so the simulated replay of the trace in ``scenario`` (the measured server's engine, limits
    and memory) reproduces the trace's TTFT and TPOT distributions.

    The loss compares 19 quantiles (p5-p95) of each, in log: a request's own TTFT jumps when a parameter moves a
    step boundary across its arrival, its quantiles do not. The per-step and per-sequence overheads stay at the
    scenario's values: in decode they are constants beside the weight read, so a trace cannot tell them from
    MBU (timed iterations can: :func:`fit_points`). ``blocks_factors`` profiles the KV block pool too (each factor
    scales the scenario's block count; the best fit wins): worth it when the server's startup log is missing and
    the trace reaches loads where KV capacity binds. The chosen pool is returned as ``num_blocks``.
    ``progress(fraction, message)`` hears of each replay (a fit takes ~300 on two parameters).
    """
    from planner.sim.run import simulate

    start = scenario.cost.resolved(scenario)
    ttft, tpot = ttft_s[np.isfinite(ttft_s) & (ttft_s > 0)], tpot_s[np.isfinite(tpot_s) & (tpot_s > 0)]
    if ttft.size + tpot.size < 10:
        raise PlannerError("the trace has fewer than 10 measured TTFT/TPOT values: nothing to calibrate against")
    targets = [(name, np.quantile(v, _TRACE_QUANTILES)) for name, v in (("ttft", ttft), ("tpot", tpot)) if v.size]

    lo, hi = (np.array(b) for b in zip(*(_BOUNDS[k] for k in _TRACE_PARAMS), strict=True))

    def fit_for(pool: Scenario) -> tuple[float, CostParams]:
        # the search runs unbounded in log space and each point is projected onto the ranges: a fit that wants
        # more than full compute or bandwidth ends exactly on the bound (which the report then warns of), where
        # a penalty wall left it anywhere near one
        def loss(log_vec):
            replays[0] += 1
            say(min(replays[0] / (_FIT_REPLAYS * len(pools)), 0.99), f"fitting MFU and MBU: replay {replays[0]:,}")
            values = np.clip(np.exp(log_vec), lo, hi)
            result = simulate(workload, pool.replace(cost=_with(start, _TRACE_PARAMS, values)))
            got = {"ttft": result.ttft_s, "tpot": result.tpot_s}
            return float(sum(np.mean(np.log(np.nanquantile(got[name], _TRACE_QUANTILES) / want) ** 2)
                             for name, want in targets))
        x0 = np.log(np.clip([getattr(start, k) for k in _TRACE_PARAMS], lo, hi))
        fit = optimize.minimize(loss, x0, method="Nelder-Mead",
                                options={"xatol": 1e-5, "fatol": 1e-12, "maxiter": 800})
        return float(fit.fun), _with(scenario.cost, _TRACE_PARAMS, np.clip(np.exp(fit.x), lo, hi))

    say = progress or (lambda fraction, message: None)
    replays = [0]
    blocks = scenario.settings.num_blocks
    pools = [scenario.replace(num_gpu_blocks=max(1, int(blocks * f))) if f != 1.0 else scenario
             for f in blocks_factors]
    fits = [fit_for(pool) for pool in pools]
    best = int(np.argmin([loss for loss, _ in fits]))
    params, pool = fits[best][1], pools[best]
    result = simulate(workload, pool.replace(cost=params))
    got = {"ttft": result.ttft_s, "tpot": result.tpot_s}
    measured = np.concatenate([want for _, want in targets]) * 1e3
    predicted = np.concatenate([np.nanquantile(got[name], _TRACE_QUANTILES) for name, _ in targets]) * 1e3
    report = _report(params, measured, predicted, "trace TTFT/TPOT quantiles")
    report["num_blocks"] = pool.settings.num_blocks
    return report


def _report(params: CostParams, measured: np.ndarray, predicted: np.ndarray, source: str) -> dict:
    """A fit's report: the parameters (those ``source``'s fit sets, per :data:`FIT_SOURCES`, named in
    ``fitted``) and its in-sample residuals."""
    rel = predicted / measured - 1
    # what the scenario left to its GPU and engine (None) stays so, and follows the server the file is applied to
    return {"params": {k: v for k, v in params.as_dict().items() if k not in ("source", "fitted_on")},
            "fitted": list(FIT_SOURCES[source]), "source": source,
            "mape": float(np.mean(np.abs(rel))), "max_abs_error": float(np.max(np.abs(rel))),
            "residuals": [{"measured_ms": float(m), "predicted_ms": float(p), "error": float(r)}
                          for m, p, r in zip(measured, predicted, rel, strict=True)]}
