"""Fit the cost model's efficiencies and overheads to timed iterations, and what every fit shares: the parameters'
ranges, the report, and the warnings where the data cannot pin a parameter.

Iterations (a CSV of ``prefill_tokens, prefill_count, decode_count, decode_context, step_ms``; a row is a prefill
batch of ``prefill_count`` prompts of ``prefill_tokens`` each, or a decode batch) are fitted by least squares on
relative error. A trace's measured TTFT and TPOT are fitted by :mod:`planner.sim.trace_calibration`. The
calibration file the fits' reports become is written and read by :mod:`planner.sim.calibration_file`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from scipy import optimize

from planner.errors import PlannerError, first_line
from planner.sim.cost_model import PARAM_RANGES, SHARPEST_KNEE, CostParams, coefficients, step_seconds
from planner.sim.step_spec import MAX_STEP_SEQUENCES, batch_aggregates, beyond_limits

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.scenario import Scenario

POINT_COLUMNS = ("prefill_tokens", "prefill_count", "decode_count", "decode_context", "step_ms")
LINE = "line"        # the line of the --points file each row came from (read_points)
_POINT_PARAMS = ("mfu", "mbu", "step_overhead_s", "seq_overhead_s")
# The roofline's knee too, where the rows are enough to cross-validate a fit that sets it (a distinct step to leave
# out beyond the five parameters): how sharply steps near the ridge turn from memory- to compute-bound is the GEMM
# library's and the runtime's (the early-2024 vLLM V0 of bench/calibrate_points.py fits 1.33, near the two bounds
# added, where the A100's vLLM 0.14 GEMMs give 8); with fewer rows it stays the server's.
KNEE = "roofline_p"
# the knees a fit also starts from, besides the scenario's: least squares from one side of the ridge's curvature
# can stop on a ledge of the other (from 8, the bench's six stopped at p = 58, MAPE 2.3%; from 2 they reach 1.1%)
_KNEE_STARTS = (2.0, SHARPEST_KNEE)
TRACE_PARAMS = ("mfu", "mbu")
# a parameter whose 10% change moves no fitted prediction by 1% is one the data does not pin down
NUDGE, WEAK = 0.1, 0.01
CV_FOLDS = 10            # calibrate --points: each row predicted by a fit without it (leave-one-out up to 10 rows)
# calibration files written before the fitted names were recorded, by the source their fit's report names: what
# that fit set, and what it froze at the measured GPU's and engine's values, which a scenario now leaves to its own
LEGACY_FITTED = {"iterations": _POINT_PARAMS, "trace TTFT/TPOT quantiles": TRACE_PARAMS}
LEFT_TO_THE_SERVER = ("roofline_p", "allreduce_latency_s", "tp_step_overhead_s", "link_efficiency")
# a fit still this far off (median |error| of its own data) is refused: the data are not the scenario's server's
# (the bench's six DistServe rows fit at 1.7%, the bundled sample's llama-3-8b TTFT/TPOT at 3.4%; step_ms or
# ttft_ms given in seconds, at 100% and more)
UNFOLLOWED = 0.5
OVERFIT = 2.0            # an unseen part's median error this many times the fitted one's (and over 5%) is warned of


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
        frame = frame.select(pl.col(c).cast(pl.Float64, strict=True) for c in POINT_COLUMNS)
    except pl.exceptions.PolarsError as exc:
        raise PlannerError(f"--points {path}: every column must be numeric ({first_line(exc)})") from None
    # a blank line (one an editor leaves at the end) is no row; the others keep their line numbers
    numbered = frame.with_row_index("row", 2).filter(~pl.all_horizontal(pl.col(POINT_COLUMNS).is_null())
                                                     ).with_columns(pl.col(POINT_COLUMNS).fill_null(0.0))
    frame = numbered.rename({"row": LINE})
    counts = [c for c in POINT_COLUMNS if c != "step_ms"]
    for bad, what in (
            (pl.any_horizontal(~pl.col(c).is_finite() | (pl.col(c) < 0) | (pl.col(c) != pl.col(c).floor())
                               for c in counts)
             | (pl.col("prefill_count") > MAX_STEP_SEQUENCES) | (pl.col("decode_count") > MAX_STEP_SEQUENCES),
             f"a negative, fractional or non-finite count, or a count past {MAX_STEP_SEQUENCES:,}; expected whole "
             "token and sequence counts"),
            (~pl.col("step_ms").is_finite() | (pl.col("step_ms") <= 0),
             "a step_ms that is not a positive number; expected the step's time in milliseconds"),
            (pl.col("prefill_tokens") * pl.col("prefill_count") + pl.col("decode_count") <= 0,
             "no tokens; expected a prefill batch or a decode batch"),
            # a count without its lengths (or lengths without a count) would be dropped unseen: the row is mistyped
            (((pl.col("prefill_tokens") > 0) != (pl.col("prefill_count") > 0))
             | ((pl.col("decode_count") > 0) != (pl.col("decode_context") > 0)),
             "prefill tokens without a prefill count, a decode count without a context, or the reverse; expected "
             "both of a pair or neither (a decode's context is at least 1 token)")):
        rows = numbered.filter(bad)["row"].to_list()
        if rows:
            raise PlannerError(f"--points {path}: {_lines_named(rows)} holds {what}")
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


def _lines(frame: pl.DataFrame) -> list[int]:
    """Each row's line in its file (:func:`read_points` keeps them past blank lines), else counted from 2."""
    return frame[LINE].to_list() if LINE in frame.columns else list(range(2, frame.height + 2))


def _lines_named(lines: list[int]) -> str:
    """``line N``, or ``line N (and K more)``: the first of the lines an error or warning is about."""
    return f"line {lines[0]}" + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def _batches(frame: pl.DataFrame) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    """Each row's step as prefill chunks ``(new, context)`` and decode groups ``(count, context)``."""
    return [([(int(p), 0)] * int(pc), [(int(dc), int(ctx))] if dc else [])
            for p, pc, dc, ctx, _ in frame.select(POINT_COLUMNS).iter_rows()]


def _aggregates(scenario: Scenario, frame: pl.DataFrame) -> list[tuple[float, ...]]:
    window = scenario.coefficients.window       # no cost parameter moves it
    return [batch_aggregates(prefills, decodes, *window) for prefills, decodes in _batches(frame)]


def predict_points(scenario: Scenario, frame: pl.DataFrame) -> np.ndarray:
    """Predicted step_ms of each measured row, with the scenario's cost model."""
    c = scenario.coefficients.as_tuple()
    return np.array([step_seconds.py_func(c, *agg)[0] * 1e3 for agg in _aggregates(scenario, frame)])


def with_values(params: CostParams, names: tuple[str, ...], values: np.ndarray) -> CostParams:
    return replace(params, **{k: float(v) for k, v in zip(names, values, strict=True)})


def point_params(distinct_steps: int) -> tuple[str, ...]:
    """The parameters ``calibrate --points`` fits to rows timing ``distinct_steps`` distinct steps: MFU, MBU and the
    overheads, and the knee (:data:`KNEE`) where one step more than those five is left to cross-validate it."""
    return (*_POINT_PARAMS, KNEE) if distinct_steps >= len(_POINT_PARAMS) + 2 else _POINT_PARAMS


def _solve(scenario: Scenario, aggs: list[tuple[float, ...]], measured: np.ndarray, names: tuple[str, ...]):
    """The least-squares fit of ``names`` to these rows, from the scenario's cost model (and, where the knee is
    fitted, from it with each knee of :data:`_KNEE_STARTS`): the fit with the least loss."""
    start = scenario.cost.resolved(scenario)

    def residuals(vec):
        c = coefficients(scenario.replace(cost=with_values(start, names, vec))).as_tuple()
        return np.array([step_seconds.py_func(c, *a)[0] * 1e3 for a in aggs]) / measured - 1

    ranges = {**PARAM_RANGES, KNEE: (PARAM_RANGES[KNEE][0], SHARPEST_KNEE)}     # sharper is the same roofline
    lo, hi = zip(*(ranges[k] for k in names), strict=True)
    x0 = np.clip([getattr(start, k) for k in names], lo, hi)
    starts = [x0]
    if KNEE in names:
        knee = names.index(KNEE)
        starts += [np.where(np.arange(x0.size) == knee, p, x0) for p in _KNEE_STARTS if p != x0[knee]]
    fits = [optimize.least_squares(residuals, x, bounds=(lo, hi), x_scale=np.maximum(np.abs(x), 1e-6))
            for x in starts]
    return min(fits, key=lambda fit: fit.cost)


def fit_points(scenario: Scenario, frame: pl.DataFrame, names: tuple[str, ...] | None = None) -> dict:
    """Least-squares fit of MFU, MBU and the overheads (and the knee, where the rows allow:
    :func:`point_params`; or the parameters ``names``) to measured step times (relative residuals), starting from
    the scenario's cost model; its model, GPU, TP and dtypes are the measured server's. The report adds
    ``cross_validated``: each row predicted by a fit that did not see it (:data:`CV_FOLDS`), the error to expect
    on iterations like these but not among them, and a warning when it is far above the in-sample error."""
    longest = [line for line, too_long in zip(_lines(frame), frame.select(
        pl.max_horizontal("prefill_tokens", pl.col("decode_context") + (pl.col("decode_count") > 0))
        > scenario.max_model_len).to_series(), strict=True) if too_long]
    if longest:
        raise PlannerError(f"--points: {_lines_named(longest)} holds a sequence longer than --max-model-len "
                           f"({scenario.max_model_len:,}): no engine runs that step; raise --max-model-len to the "
                           "measured server's")
    measured = frame["step_ms"].to_numpy()
    aggs = _aggregates(scenario, frame)
    steps = _steps(frame)
    names = names or point_params(int(steps.max()) + 1)
    fit = _solve(scenario, aggs, measured, names)
    params = with_values(scenario.cost, names, fit.x)
    predicted = predict_points(scenario.replace(cost=params), frame)
    in_sample = float(np.median(np.abs(predicted / measured - 1)))
    check_followed(in_sample, lambda: float(np.median(measured / predict_points(scenario, frame))),
                   "these --points step times", "step_ms in milliseconds, timed on the scenario's server (model, "
                   "GPU, TP, dtypes)")
    report = fit_report(params, measured, predicted, "iterations", names)
    # residuals are relative, so the Jacobian times a 10% step is each row's relative change
    moves = {name: float(np.max(np.abs(fit.jac[:, j] * NUDGE * fit.x[j]))) for j, name in enumerate(names)}
    remedy = ("rows of the kind it governs (prefill-bound for mfu, decode-bound for mbu, many small steps for the "
              "overheads, batches on both sides of the ridge for the knee)")
    floored = _at_zero(fit, params, names)
    report["warnings"] = [*_beyond_limits(scenario, frame), *_absent_kinds(frame), *at_bound(params, names),
                          *floored.values(),
                          *weak({k: v for k, v in moves.items() if k not in floored}, "step times", remedy),
                          *_traded_off(fit, names, [j for j, name in enumerate(names) if moves[name] >= WEAK])]
    report["cross_validated"] = _cross_validated(scenario, frame, aggs, measured, steps, names)
    cv = report["cross_validated"]
    if cv is None:
        report["warnings"].append(f"{steps.max() + 1} distinct steps are too few to predict any of them from a fit "
                                  f"without it ({len(names)} parameters need at least {len(names) + 1}): its "
                                  "error off these rows is unknown")
    elif overfitted(cv["median_abs_error"], in_sample):
        report["warnings"].append(
            f"a row the fit did not see is predicted at {cv['median_abs_error']:.1%} median error (worst "
            f"{cv['worst_abs_error']:.1%}), against a median of {in_sample:.1%} on the rows it fitted: the cost "
            "model follows these rows more closely than it predicts others; expect errors of the cross-validated "
            "size, and add rows nearer the steps you will predict")
    report["warnings"] += inherited(scenario, names)
    return report


def overfitted(predicted_error: float, fitted_error: float) -> bool:
    """Whether data a fit did not see is predicted far worse (median |error| ``predicted_error``) than the data it
    fitted (``fitted_error``): :data:`OVERFIT` times as badly, and by more than 5%."""
    return predicted_error > max(OVERFIT * fitted_error, WEAK * 5)


def check_followed(miss: float, scale: Callable[[], float], measured: str, expected: str) -> None:
    """Refuse a fit that still misses its own data by more than :data:`UNFOLLOWED` (``miss``, its median |error|):
    the data are not this server's (``measured`` names them, ``expected`` says what was), most often a unit slip,
    which ``scale()``, the data over the scenario's own prediction, shows."""
    if miss <= UNFOLLOWED:
        return
    ratio = scale()
    # a unit slip is a factor of 1,000, within a factor of 10 of the scenario's prediction either way
    unit = ("; they read like seconds" if 1e-4 <= ratio <= 1e-2 else
            "; they read like microseconds" if 1e2 <= ratio <= 1e4 else "")
    raise PlannerError(f"the cost model, fitted, still misses {measured} by a median {miss:.0%}; they are "
                       f"{ratio:.3g}x what the scenario predicts{unit}: expected {expected}")


def _cross_validated(scenario: Scenario, frame: pl.DataFrame, aggs: list, measured: np.ndarray,
                     steps: np.ndarray, names: tuple[str, ...]) -> dict | None:
    """Each row predicted by a fit on the others: steps i, i + k, i + 2k, ... left out together (leave-one-out up
    to :data:`CV_FOLDS` steps), a step's repeats with it, so no row is predicted by a fit that saw its copy; None
    where a fold would leave fewer distinct steps than parameters."""
    distinct = int(steps.max()) + 1
    folds = min(distinct, CV_FOLDS)
    if distinct - -(-distinct // folds) < len(names):
        return None
    fold = steps % folds
    held = np.empty(len(aggs))
    for k in range(folds):
        rest = fold != k
        fitted = with_values(scenario.cost, names, _solve(scenario, [a for a, r in zip(aggs, rest) if r],
                                                    measured[rest], names).x)
        held[~rest] = predict_points(scenario.replace(cost=fitted), frame.filter(pl.Series(~rest)))
    rel = held / measured - 1
    return {"folds": folds, "median_abs_error": float(np.median(np.abs(rel))),
            "worst_abs_error": float(np.max(np.abs(rel))), "bias": float(np.median(rel)),
            "residuals": [{"measured_ms": float(m), "predicted_ms": float(p), "error": float(r)}
                          for m, p, r in zip(measured, held, rel, strict=True)]}


def _beyond_limits(scenario: Scenario, frame: pl.DataFrame) -> list[str]:
    """A warning naming the rows the scenario's server could never have run (:func:`beyond_limits`): the step was
    timed on another server (other limits or memory than the scenario's), or the row is mistyped."""
    beyond = [(line, why) for line, batch in zip(_lines(frame), _batches(frame), strict=True)
              if (why := beyond_limits(scenario, *batch))]
    if not beyond:
        return []
    return [f"{_lines_named([line for line, _ in beyond])} holds {' and '.join(beyond[0][1])}: no server of this "
            "scenario runs that step, so it was timed on another (check --max-num-seqs and the memory flags against "
            "the measured server's) or the row is mistyped"]


def _absent_kinds(frame: pl.DataFrame) -> list[str]:
    """A warning per kind of row the points lack: the parameter that kind mostly sets was fitted on the others."""
    return [f"no {kind} rows: {param}, which {kind} steps mostly set, was fitted on the other rows alone; add "
            f"{kind} batches of several sizes"
            for kind, param, column in (("decode", "mbu", "decode_count"), ("prefill", "mfu", "prefill_count"))
            if not (frame[column] > 0).any()]


def _at_zero(fit, params: CostParams, names: tuple[str, ...]) -> dict[str, str]:
    """The fitted parameters whose range starts at 0 (the overheads) and that ended there, each with a warning
    naming the value the rows would notice (one that moves some step time by ``WEAK``): a relative 10% probe
    says nothing about a value of ~0, but the rows still bound it from above."""
    out = {}
    for j, name in enumerate(names):
        slope = float(np.max(np.abs(fit.jac[:, j])))        # relative change of the most sensitive row per unit
        if PARAM_RANGES[name][0] == 0 and slope > 0 and fit.x[j] < 0.01 * WEAK / slope:
            out[name] = (f"{name} fitted to {getattr(params, name):.3g}, indistinguishable from 0 (the bottom of its "
                         f"range): these rows say only that it is below {WEAK / slope:.3g}, which would move some "
                         f"step time by {WEAK:.0%}")
    return out


def _traded_off(fit, names: tuple[str, ...], columns: list[int]) -> list[str]:
    """A warning where the fitted parameters (``names``) at ``columns`` (each constrained on its own) trade off:
    some combination of changes of up to 10% each moves no fitted step time by ``WEAK``, so the data fix their mix,
    not each one."""
    if len(columns) < 2:
        return []
    scaled = fit.jac[:, columns] * NUDGE * fit.x[columns]        # each row's relative move per 10% change
    weakest = np.linalg.svd(scaled, full_matrices=False)[2][-1]   # the unit combination moving the rows least
    move = float(np.max(np.abs(scaled @ weakest)))
    if move >= WEAK:
        return []
    # those with a fifth of the combination or more (one alone would have moved the rows by itself)
    traded = [names[j] for j, w in zip(columns, weakest, strict=True) if abs(w) >= 0.2]
    if len(traded) < 2:
        return []
    return [f"{' and '.join(traded)} trade off: changed together (by up to 10% each) they move no predicted step "
            f"time by more than {move:.2%}, so these rows fix their mix, not each value; add rows that load them "
            "differently (prefills and decode batches of several sizes)"]


def inherited(scenario: Scenario, fitted: tuple[str, ...]) -> list[str]:
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


def at_bound(params: CostParams, names: tuple[str, ...]) -> list[str]:
    """A warning per fitted parameter that ended on a bound of its range: the model could not follow the data. Not
    the knee: its ends are the roofline's two limiting shapes (the bounds added, their max), each a fit it can make."""
    out = []
    for name in (n for n in names if n != KNEE):
        value, (lo, hi) = getattr(params, name), PARAM_RANGES[name]
        if value >= hi * 0.99 or (lo > 0 and value <= lo * 1.01):
            out.append(f"{name} ended at {value:.4g}, the {'top' if value >= hi * 0.99 else 'bottom'} of its range "
                       f"[{lo:g}, {hi:g}]: no setting of it reproduces the data; check that the scenario is the "
                       "measured server's (GPU, TP, engine limits, replicas behind a router)")
    return out


def weak(moves: dict[str, float], what: str, remedy: str) -> list[str]:
    """A warning per parameter whose 10% change moves no prediction by ``WEAK``."""
    return [f"{name} is poorly constrained: a 10% change moves no predicted {what} by more than {move:.2%}, below "
            f"measurement noise, so its fitted value is not to be trusted; add {remedy}"
            for name, move in moves.items() if move < WEAK]


def fit_report(params: CostParams, measured: np.ndarray, predicted: np.ndarray, source: str,
               fitted: tuple[str, ...]) -> dict:
    """A fit's report: the parameters (those the fit set named in ``fitted``), its ``source`` ("iterations" or
    "trace TTFT/TPOT quantiles") and its in-sample residuals."""
    rel = predicted / measured - 1
    # what the scenario left to its GPU and engine (None) stays so, and follows the server the file is applied to
    return {"params": {k: v for k, v in params.as_dict().items() if k not in ("source", "fitted_on")},
            "fitted": list(fitted), "source": source,
            "mape": float(np.mean(np.abs(rel))), "max_abs_error": float(np.max(np.abs(rel))),
            "residuals": [{"measured_ms": float(m), "predicted_ms": float(p), "error": float(r)}
                          for m, p, r in zip(measured, predicted, rel, strict=True)]}
