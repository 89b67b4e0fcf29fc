"""Fit the cost model's MFU and MBU to a trace's measured TTFT and TPOT, by replaying it through the simulator and
matching the latency distributions, so queueing and batching are accounted for, not assumed away; with a held-out
time split, per-metric error and bias, and warnings (:mod:`planner.sim.calibration` for what every fit shares).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from scipy import optimize

from planner.errors import PlannerError
from planner.sim.calibration import (NUDGE, TRACE_PARAMS, at_bound, check_followed, fit_report, inherited,
                                     overfitted, weak, with_values)
from planner.sim.calibration_file import params_from_report
from planner.sim.cost_model import PARAM_RANGES, CostParams

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.scenario import Scenario

_TRACE_QUANTILES = np.linspace(0.05, 0.95, 19)
HOLDOUT_SHARE = 0.3      # calibrate --trace: the last 30% of the arrivals are predicted, not fitted
# a fit that misses its own requests by more than this (median |error| of the TTFT/TPOT statistics) is warned of;
# the bundled sample's llama-3-8b requests fit at 3.4% on an A100, the sim-to-real study's stage-0 runs at 0.7-2.3%
# (bench/fidelity_v1.py's fits); a TTFT that holds 200 ms of client time beside 0.1-1 s of the server's, at 31%.
# Past UNFOLLOWED the fit is refused
LOOSE_FIT = 0.2
_FIT_REPLAYS = 600       # about what fit_trace's search replays on two parameters (the bundled sample: 591)
# the coarse grid fit_trace starts from: each parameter at its scenario value ×/÷ √2 and 2 (25 replays on two)
_GRID_STEP = 2 ** 0.5
_GRID_FACTORS = (0.5, 2 ** -0.5, 1.0, _GRID_STEP, 2.0)
LATENCY_METRICS = (("ttft", "mean"), ("ttft", "p50"), ("ttft", "p90"), ("ttft", "p99"),
                   ("tpot", "mean"), ("tpot", "p50"), ("tpot", "p90"), ("tpot", "p99"))


def scored(predicted_s: np.ndarray, measured_s: np.ndarray) -> np.ndarray:
    """The requests one metric is compared on, the same on both sides: measured (finite and above 0: a one-token
    reply logged with a TPOT of 0 has no inter-token time) and predicted (a request the scenario rejects, or a
    one-token output's TPOT, has none). Compared on all of each side instead, a trace whose longest prompts went
    untimed read +245% at TTFT p99 where the same requests read +125%."""
    predicted_s, measured_s = np.asarray(predicted_s, float), np.asarray(measured_s, float)
    return np.isfinite(predicted_s) & np.isfinite(measured_s) & (measured_s > 0)


def latency_errors(predicted_ttft_s: np.ndarray, predicted_tpot_s: np.ndarray, measured_ttft_s: np.ndarray,
                   measured_tpot_s: np.ndarray) -> list[dict]:
    """Predicted against measured TTFT and TPOT: mean, p50, p90 and p99 of each (ms) over the requests both sides
    time (:func:`scored`, counted in ``requests``), with the error ``predicted / measured − 1``; the calibration
    report's and the Simulate page's table."""
    rows = []
    for metric, stat in LATENCY_METRICS:
        pair = {"ttft": (predicted_ttft_s, measured_ttft_s), "tpot": (predicted_tpot_s, measured_tpot_s)}[metric]
        pair = [np.asarray(v, float) for v in pair]
        both = scored(*pair)
        values = [float("nan") if not both.any() else
                  float(v[both].mean() if stat == "mean" else np.percentile(v[both], float(stat[1:]))) * 1e3
                  for v in pair]
        rows.append({"metric": f"{metric.upper()} {stat}", "requests": int(both.sum()), "measured_ms": values[1],
                     "predicted_ms": values[0],
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
    unfitted = simulate(workload, scenario)
    _refuse_rejected(unfitted, scenario, ttft_s, tpot_s)     # the held-out part's too
    part = workload.subset(head)
    report = fit_trace(scenario, part, ttft_s[head], tpot_s[head],
                       progress=lambda fraction, message: say(0.9 * fraction, message))
    params = params_from_report(report, scenario, "calibrated")
    say(0.9, "replaying the whole trace with the fitted parameters")
    result = simulate(workload, scenario.replace(cost=params))
    for name, keep in (("in_sample", head), ("held_out", ~head)):
        rows = latency_errors(result.ttft_s[keep], result.tpot_s[keep], ttft_s[keep], tpot_s[keep])
        errors = [r["error"] for r in rows if np.isfinite(r["error"])]
        report[name] = {"requests": int(keep.sum()), "metrics": rows,
                        "median_abs_error": float(np.median(np.abs(errors))) if errors else None,
                        "bias": float(np.median(errors)) if errors else None}
    fitted_error = report["in_sample"]["median_abs_error"]
    check_followed(fitted_error, lambda: _over_defaults(unfitted, head, ttft_s, tpot_s),
                   "the TTFT and TPOT of the requests it was fitted to", "ttft_ms and tpot_ms in milliseconds, "
                   "the server's own time (no client or network time), measured on the scenario's server (model, "
                   "GPU, TP, dtypes) at its limits")
    say(0.94, "probing how firmly the fitted part pins each parameter")
    base = _trace_quantiles(simulate(part, scenario.replace(cost=params)), ttft_s[head], tpot_s[head])
    moves = {}
    for name in TRACE_PARAMS:
        value = getattr(params, name)
        # 10% more, or 10% less for one on the top of its range
        value *= 1 + NUDGE if value * (1 + NUDGE) <= PARAM_RANGES[name][1] else 1 - NUDGE
        nudged = _trace_quantiles(simulate(part, scenario.replace(cost=replace(params, **{name: value}))),
                                  ttft_s[head], tpot_s[head])
        moves[name] = float(np.nanmax(np.abs(nudged / base - 1)))
    report["warnings"] = at_bound(params, TRACE_PARAMS) + weak(
        moves, "TTFT/TPOT quantiles", "requests at loads where it binds (prefill-heavy arrivals for mfu, "
        "decode-bound steps for mbu), or timed iterations (--points)") + _unmeasured(
        ttft_s[head], tpot_s[head]) + _loose(fitted_error) + _held_out_gap(report) + inherited(scenario, TRACE_PARAMS)
    report["holdout"] = holdout
    say(1.0, f"calibrated on {fitted_n:,} requests, {n - fitted_n:,} held out")
    return report


def _over_defaults(result, head: np.ndarray, ttft_s: np.ndarray, tpot_s: np.ndarray) -> float:
    """The fitted part's measured TTFT and TPOT statistics over what the scenario's own cost model predicts in
    ``result``, its replay of the whole trace (the median ratio): how far off the data are before any fit."""
    rows = latency_errors(result.ttft_s[head], result.tpot_s[head], ttft_s[head], tpot_s[head])
    return float(np.nanmedian([r["measured_ms"] / r["predicted_ms"] for r in rows]))


def _loose(fitted_error: float | None) -> list[str]:
    """A warning where the fit misses the very requests it was fitted to by more than :data:`LOOSE_FIT`."""
    if fitted_error is None or fitted_error <= LOOSE_FIT:
        return []
    return [f"the fit misses the requests it was fitted to by a median {fitted_error:.0%}: the cost model follows "
            "this server's latencies loosely (another model, GPU, TP or limits than the scenario's, or latencies "
            "that hold more than the server's work, such as network or client time); treat its predictions as "
            "rough, and check the scenario against the server's"]


def _unmeasured(ttft_s: np.ndarray, tpot_s: np.ndarray) -> list[str]:
    """A warning where the fitted part measures only one of TTFT and TPOT: the other's parameter is then fitted
    through the first alone (decode steps delay prompts; prefills stretch decode steps), which pins it loosely."""
    out = []
    for name, values, param, other in (("TPOT", tpot_s, "mbu", "TTFT"), ("TTFT", ttft_s, "mfu", "TPOT")):
        if not np.isfinite(values).any():
            out.append(f"no {name} is measured: {param}, which {name} mostly sets, was fitted through {other} alone; "
                       f"check the file's {name} predictions against a trace that measures it, or calibrate "
                       "on timed iterations (--points)")
    return out


def _held_out_gap(report: dict) -> list[str]:
    """A warning where the held-out arrivals are predicted far worse than the fitted ones (:func:`overfitted`, as
    :func:`planner.sim.calibration.fit_points` judges its cross-validation)."""
    fitted, held = report["in_sample"]["median_abs_error"], report["held_out"]["median_abs_error"]
    if fitted is None or held is None or not overfitted(held, fitted):
        return []
    return [f"the held-out arrivals are predicted at {held:.1%} median error (bias {report['held_out']['bias']:+.1%}), "
            f"against {fitted:.1%} on the arrivals fitted: the fit follows the fitted part more closely than it "
            "predicts the traffic after it (a load or request mix that changed over the trace, or a parameter the "
            "fitted part hardly pins); expect errors of the held-out size"]


def fit_measured(scenario: Scenario, measured, holdout: float = HOLDOUT_SHARE,
                 progress: Callable[[float, str], None] | None = None) -> dict:
    """:func:`fit_trace_held_out` on a trace's measured requests
    (:func:`planner.workload.replay.measured_latencies`), its notes on which requests were kept first among the
    warnings: ``calibrate --trace`` and the Simulate page's fit."""
    report = fit_trace_held_out(scenario, measured.workload, measured.ttft_s, measured.tpot_s, holdout, progress)
    return {**report, "warnings": [*measured.notes, *report["warnings"]]}


def _trace_quantiles(result, ttft_s: np.ndarray, tpot_s: np.ndarray) -> np.ndarray:
    """The replay's TTFT and TPOT quantiles over the requests the trace times (:func:`scored`): a metric it does
    not measure pins nothing, however much a parameter moves it."""
    return np.concatenate([np.nanquantile(predicted[mask], _TRACE_QUANTILES)
                           for predicted, measured in ((result.ttft_s, ttft_s), (result.tpot_s, tpot_s))
                           if (mask := scored(predicted, measured)).any()])


def _refuse_rejected(result, scenario: Scenario, ttft_s: np.ndarray, tpot_s: np.ndarray) -> None:
    """Refuse a fit whose replay rejects requests the server timed: the scenario is not the measured server, and
    its replay carries less load than the server did, which a fit would charge to MFU and MBU (one trace whose
    server took 16% of its prompts past the scenario's --max-model-len fitted MFU 0.56 against 0.94)."""
    lost = result.rejected & (np.isfinite(ttft_s) | np.isfinite(tpot_s))
    if not lost.any():
        return
    too_long = int((lost & result.too_long).sum())
    raise PlannerError(f"{int(lost.sum()):,} of the trace's timed requests are rejected by this scenario, though the "
                       f"server timed them ({too_long:,} whose prompts, up to "
                       f"{int(result.workload.input_tokens[lost].max()):,} tokens, do not fit --max-model-len "
                       f"{scenario.max_model_len:,}; {int(lost.sum()) - too_long:,} that need more KV than its "
                       f"{scenario.settings.num_blocks:,}-block pool): a fit would charge the load the replay misses "
                       "to MFU and MBU; expected the measured server's --max-model-len and memory flags")


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
    ``progress(fraction, message)`` hears of each replay (a fit takes ~600 on two parameters).
    """
    from planner.sim.run import simulate

    start = scenario.cost.resolved(scenario)
    first = simulate(workload, scenario)
    _refuse_rejected(first, scenario, ttft_s, tpot_s)
    # each metric on the requests both sides time (which requests a replay rejects or leaves untimed does not
    # depend on the cost model: a one-token output has no TPOT whatever the step time)
    masks = {"ttft": scored(first.ttft_s, ttft_s), "tpot": scored(first.tpot_s, tpot_s)}
    if sum(int(mask.sum()) for mask in masks.values()) < 10:
        raise PlannerError("the trace has fewer than 10 measured TTFT/TPOT values: nothing to calibrate against")
    measured_s = {"ttft": ttft_s, "tpot": tpot_s}
    targets = [(name, masks[name], np.quantile(measured_s[name][masks[name]], _TRACE_QUANTILES))
               for name in masks if masks[name].any()]

    lo, hi = (np.array(b) for b in zip(*(PARAM_RANGES[k] for k in TRACE_PARAMS), strict=True))

    def fit_for(pool: Scenario) -> tuple[float, CostParams]:
        # the search runs unbounded in log space and each point is projected onto the ranges: a fit that wants
        # more than full compute or bandwidth ends exactly on the bound (which the report then warns of), where
        # a penalty wall left it anywhere near one
        def loss(log_vec):
            replays[0] += 1
            say(min(replays[0] / (_FIT_REPLAYS * len(pools)), 0.99), f"fitting MFU and MBU: replay {replays[0]:,}")
            values = np.clip(np.exp(log_vec), lo, hi)
            result = simulate(workload, pool.replace(cost=with_values(start, TRACE_PARAMS, values)))
            got = {"ttft": result.ttft_s, "tpot": result.tpot_s}
            return float(sum(np.mean(np.log(np.nanquantile(got[name][mask], _TRACE_QUANTILES) / want) ** 2)
                             for name, mask, want in targets))
        # A replay's quantiles move in small jumps as a parameter moves (a step boundary crossing an arrival), so a
        # local search can stall on a ledge: from the scenario's values, on the first 140 of 200 requests simulated
        # with a known MFU and MBU, it stopped at 7x the truth's loss. So it runs twice, from the scenario's values
        # and from the best point of a coarse grid (with a simplex of half a grid step), and the better end wins
        options = {"xatol": 1e-5, "fatol": 1e-12, "maxiter": 800}
        x0 = np.log(np.clip([getattr(start, k) for k in TRACE_PARAMS], lo, hi))
        grid = np.unique(np.clip(x0 + np.log(list(itertools.product(_GRID_FACTORS, repeat=x0.size))),
                                 np.log(lo), np.log(hi)), axis=0)
        best = grid[int(np.argmin([loss(x) for x in grid]))]
        simplex = np.vstack([best, best + np.log(_GRID_STEP) / 2 * np.eye(best.size)])
        from_grid = {**options, "initial_simplex": simplex}
        fit = min((optimize.minimize(loss, x0, method="Nelder-Mead", options=options),
                   optimize.minimize(loss, best, method="Nelder-Mead", options=from_grid)), key=lambda f: f.fun)
        return float(fit.fun), with_values(scenario.cost, TRACE_PARAMS, np.clip(np.exp(fit.x), lo, hi))

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
    measured = np.concatenate([want for _, _, want in targets]) * 1e3
    predicted = np.concatenate([np.nanquantile(got[name][mask], _TRACE_QUANTILES) for name, mask, _ in targets]) * 1e3
    report = fit_report(params, measured, predicted, "trace TTFT/TPOT quantiles", TRACE_PARAMS)
    quantiles = [(name.upper(), round(float(q), 2)) for name, _, _ in targets for q in _TRACE_QUANTILES]
    for residual, (metric, q) in zip(report["residuals"], quantiles, strict=True):
        residual.update(metric=metric, quantile=q)          # which of the fitted quantiles each row is
    report["num_blocks"] = pool.settings.num_blocks
    return report
