"""Calibration from timed iterations, checked where it was not fitted: DistServe's A100-80GB vLLM step profiles.

Data: ``bench/data/distserve_opt13b_a100/profiler-a100-80g.vllm.json`` (LLMServe/DistServe commit 82831f16,
``simdistserve/estimators/profile_data/``, Apache-2.0): the step times DistServe fitted to vLLM (V0, early 2024) on
A100-80GB SXM per model and TP — prefill ``a + b·ΣL + c·ΣL²`` ms over the batch's prompt lengths (plus the 1 ms its
estimator adds per pipeline stage), decode ``a + b·Σcontext + c·batch`` ms, one coefficient set below 95 sequences and
one above. Six iterations of OPT-13B at TP 1 (three prefills, three decode batches) are what ``calibrate --points``
is given; it then predicts prefill and decode steps of OPT-13B at TP 1 and 2 and OPT-66B at TP 4 (54 steps, less
the three of the six the grid holds on the server they were fitted on: 51). Prints
the median and worst absolute error with the defaults and calibrated, over all steps and over those whose KV fits the
server's pool (the others never ran: the fit extrapolates there). Usage: python bench/calibrate_points.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import get_gpu  # noqa: E402
from planner.catalog.presets import get_model  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from planner.sim.calibration import POINT_COLUMNS, fit_points, predict_points  # noqa: E402
from planner.sim.calibration_file import params_from_report  # noqa: E402
from planner.sim.cost_model import CostParams  # noqa: E402

PROFILE = json.loads((Path(__file__).resolve().parent / "data" / "distserve_opt13b_a100" /
                      "profiler-a100-80g.vllm.json").read_text())
FITTED = (("facebook/opt-13b", "opt-13b", 1),)
PREDICTED = (("facebook/opt-13b", "opt-13b", 1), ("facebook/opt-13b", "opt-13b", 2), ("facebook/opt-66b", "opt-66b", 4))
# what calibrate --points is given: three prefills and three decode batches, as one would time them
SIX = ((512, 1, 0, 0), (1024, 1, 0, 0), (2048, 1, 0, 0), (0, 0, 8, 512), (0, 0, 32, 1024), (0, 0, 64, 512))
GRID = tuple((p, n, 0, 0) for p in (128, 512, 2048) for n in (1, 4)) + \
    tuple((0, 0, b, c) for b in (1, 8, 32, 90, 128, 256) for c in (256, 1024))


def profiled_ms(hf_id: str, tp: int, prefill_tokens: int, prefill_count: int, decode_count: int,
                decode_context: int) -> float:
    """DistServe's fitted vLLM step time (its ``get_prefill_time`` / ``get_decode_time``, pipeline depth 1)."""
    params = PROFILE[hf_id][str(tp)]
    if prefill_count:
        a, b, c = params["prefill"]
        return a + b * prefill_tokens * prefill_count + c * prefill_count * prefill_tokens ** 2 + 1.0
    a, b, c = params["decoding_smallbs" if decode_count < params["decoding_large_small_bs_threshold"]
                    else "decoding_largebs"]
    return a + b * decode_count * decode_context + c * decode_count


def points(hf_id: str, tp: int, rows) -> pl.DataFrame:
    return pl.DataFrame([(*row, profiled_ms(hf_id, tp, *row)) for row in rows], schema=list(POINT_COLUMNS),
                        orient="row").cast(pl.Float64)


def scenario(preset: str, tp: int, cost: CostParams = CostParams()) -> Scenario:
    """The profiled server: vLLM V0 (whole prompts) on A100-80GB SXM, fp16."""
    return Scenario(get_model(preset), get_gpu("a100-80gb-sxm"), tp=tp, engine="vllm-v0", chunked_prefill=False,
                    max_model_len=2048, cost=cost)


def errors(cost_for: Callable[[str, str, int], CostParams], fitted: set[tuple[str, int]]) -> pl.DataFrame:
    """Each predicted step's error, with the cost model ``cost_for(hf_id, preset, tp)`` gives that server; on the
    servers in ``fitted`` (``(preset, tp)``), the steps of :data:`SIX` are left out: they were fitted, not
    predicted."""
    rows = []
    for hf_id, preset, tp in PREDICTED:
        frame = points(hf_id, tp, [row for row in GRID if (preset, tp) not in fitted or row not in SIX])
        server = scenario(preset, tp, cost_for(hf_id, preset, tp))
        pool_tokens = server.settings.num_blocks * server.settings.block_size
        predicted = predict_points(server, frame)
        for row, p in zip(frame.iter_rows(named=True), predicted, strict=True):
            # a step whose KV exceeds the server's pool never ran: DistServe's fit extrapolated there
            kv_tokens = row["prefill_count"] * row["prefill_tokens"] + row["decode_count"] * (row["decode_context"] + 1)
            rows.append({"model": preset, "tp": tp, "kind": "prefill" if row["prefill_count"] else "decode",
                         "measured_ms": row["step_ms"], "predicted_ms": float(p), "error": p / row["step_ms"] - 1,
                         "fits_pool": kv_tokens <= pool_tokens})
    return pl.DataFrame(rows)


def six_fit(hf_id: str, preset: str, tp: int) -> dict:
    """``calibrate --points`` on :data:`SIX` timed on that server."""
    return fit_points(scenario(preset, tp), points(hf_id, tp, SIX))


def main() -> None:
    hf_id, preset, tp = FITTED[0]
    fit = six_fit(hf_id, preset, tp)
    # as `calibrate -o FILE` writes it and `--calibration FILE` reads it: with the server it was measured on
    calibrated = params_from_report(fit, scenario(preset, tp), "six OPT-13B TP1 iterations")
    print("calibrated on six OPT-13B TP1 iterations:", {k: round(fit["params"][k], 6) for k in fit["fitted"]},
          f"(in-sample MAPE {fit['mape']:.1%})")
    for warning in fit["warnings"]:
        print("warning:", warning)
    for warning in scenario("opt-66b", 4, calibrated).calibration_warnings:
        print("applied to OPT-66B at TP 4, warning:", warning)
    # what that warning asks for: each server calibrated on six iterations timed on it (the fit above is its own)
    own = {(name, degree): params_from_report(fit if (name, degree) == (preset, tp) else six_fit(hf, name, degree),
                                              scenario(name, degree), f"six {name} TP{degree}")
           for hf, name, degree in PREDICTED}
    # the same steps for the defaults as for the calibration they are compared with
    fitted_here = {(preset, tp)}
    for label, cost_for, fitted in (
            ("defaults", lambda *_: CostParams(), fitted_here), ("calibrated", lambda *_: calibrated, fitted_here),
            ("calibrated on each server's own six", lambda _, preset, tp: own[preset, tp], set(own))):
        table = errors(cost_for, fitted)
        by = table.group_by("model", "tp", "kind", maintain_order=True).agg(
            median=pl.col("error").abs().median(), worst=pl.col("error").abs().max(), bias=pl.col("error").median())
        with pl.Config(tbl_rows=20, float_precision=3):
            print(f"\n{label}\n{by}")
        fits = table.filter(pl.col("fits_pool"))
        print(f"{label}: {table.height} steps, median |error| {table['error'].abs().median():.1%}, "
              f"worst {table['error'].abs().max():.1%}; the {fits.height} whose KV fits the pool: "
              f"{fits['error'].abs().median():.1%}, worst {fits['error'].abs().max():.1%}")


if __name__ == "__main__":
    main()
