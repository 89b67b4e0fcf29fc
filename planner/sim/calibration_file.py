"""The calibration file: what ``calibrate -o FILE`` writes and ``--calibration FILE`` (and the pages' upload) reads.

It holds the fitted parameters, their names (``fitted``) and the server they were measured on (model, GPU, TP,
engine, dtypes); the parameters the fit did not set stay unset, so they follow the server the file is applied to,
and :meth:`planner.sim.cost_model.CostParams.transfer_warnings` says what does not carry over to another server.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import PlannerError
from planner.jsonable import clean
from planner.output_files import write_atomically
from planner.sim.calibration import LEFT_TO_THE_SERVER, LEGACY_FITTED
from planner.sim.cost_model import CostParams, FittedOn

if TYPE_CHECKING:
    from planner.scenario import Scenario


def load_params(path: str | Path | None) -> CostParams:
    """Cost parameters from a calibration file (``calibrate -o FILE``), or the defaults."""
    if path is None:
        return CostParams()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlannerError(f"--calibration {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PlannerError(f"--calibration {path}: not UTF-8 text; expected a file written by `planner calibrate`"
                           ) from None
    return params_from_json(text, Path(path).name)


def params_from_json(text: str, name: str) -> CostParams:
    """Cost parameters from a calibration file's text (what ``calibrate -o`` wrote); the values are checked
    where a scenario takes them."""
    try:
        data = json.loads(text.removeprefix("\ufeff"))        # a byte-order mark some editors save is no content
        if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
            raise ValueError("expected a JSON object whose 'params' is an object of cost-model parameters")
        params = dict(data["params"])
        fitted = data.get("fitted")
        if fitted is None and data.get("source") in LEGACY_FITTED:
            # written before the fitted names were recorded: it froze the measured GPU's and engine's own values
            # of what it did not fit, which are released to follow the server it is applied to
            fitted = list(LEGACY_FITTED[data["source"]])
            params.update(dict.fromkeys(LEFT_TO_THE_SERVER))
        names = set(CostParams.__dataclass_fields__) - {"source", "fitted_on"}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"'params' holds {', '.join(map(repr, unknown))}, which the cost model does not have; "
                             f"expected some of {', '.join(sorted(names))}")
        if fitted is not None and (not isinstance(fitted, list) or not all(f in names for f in fitted)):
            raise ValueError(f"'fitted' must list cost-model parameter names ({', '.join(sorted(names))}), not "
                             f"{fitted!r}")
        absent = [f for f in fitted or () if params.get(f) is None]
        if absent:
            raise ValueError(f"'fitted' names {', '.join(absent)}, which 'params' does not give: expected the value "
                             "of each parameter the fit set")
        return CostParams(**{**params, "source": f"calibrated ({name})", "fitted_on": _fitted_on(data, fitted)})
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise PlannerError(f"--calibration {name}: expected a file written by `planner calibrate` ({exc})") from None


def _fitted_on(data: dict, fitted: list | None) -> FittedOn | None:
    """The measured server a calibration file names (None where it names none), its model and GPU as the catalog
    names them, so a hand-written ``Qwen/Qwen3-14B`` or ``H100-SXM`` is the preset it stands for."""
    from planner.capacity.memory import KV_DTYPE_BYTES
    from planner.catalog.gpus import get_gpu
    from planner.catalog.models import WEIGHT_BYTES
    from planner.catalog.presets import preset_name

    if not all(k in data for k in ("model", "gpu", "tp")):
        return None
    model, gpu, tp, engine = data["model"], data["gpu"], data["tp"], data.get("engine")
    if not (isinstance(model, str) and model and isinstance(gpu, str) and gpu):
        raise ValueError(f"'model' and 'gpu' must name the measured server, not {model!r} and {gpu!r}")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"'tp' must be the measured server's tensor-parallel degree (1, 2, 4, …), not {tp!r}")
    if engine is not None and not isinstance(engine, str):
        raise ValueError(f"'engine' must name the measured server's engine, not {engine!r}")
    dtypes = {key: data.get(key) for key in ("weight_dtype", "kv_cache_dtype")}
    for key, known in (("weight_dtype", WEIGHT_BYTES), ("kv_cache_dtype", KV_DTYPE_BYTES)):
        if dtypes[key] is not None and dtypes[key] not in known:
            raise ValueError(f"'{key}' must be one of {', '.join(known)}, not {dtypes[key]!r}")
    model = preset_name(model) or model     # else a model read from its config.json, by the name it was given
    try:
        gpu = get_gpu(gpu).name
    except PlannerError:
        pass                        # not in this catalog: compared as written
    return FittedOn(model, gpu, tp, engine, tuple(fitted or ()), **dtypes, fit_notes=_fit_notes(data))


def _fit_notes(data: dict) -> tuple[str, ...]:
    """What a calibration file says of its own fit: its error on what it fitted and on held-out data, then its
    warnings (a parameter the data hardly pins, requests left out, a held-out error above the fitted one)."""
    def number(value) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

    errors = []
    if number(data.get("mape")):
        errors.append(f"{data['mape']:.1%} mean absolute error on what it fitted")
    held = data.get("held_out")
    if isinstance(held, dict) and number(held.get("median_abs_error")):
        bias = f", bias {held['bias']:+.1%}" if number(held.get("bias")) else ""
        errors.append(f"{held['median_abs_error']:.1%} median absolute error on held-out data{bias}")
    warnings = data.get("warnings")
    notes = [f"the calibration's own fit: {'; '.join(errors)}"] if errors else []
    said = [w.strip() for w in warnings if isinstance(w, str) and w.strip()] if isinstance(warnings, list) else []
    return (*notes, *said)


def file_text(report: dict, scenario: Scenario) -> str:
    """The calibration file ``--calibration`` reads (and the pages take as an upload): the report of a fit and
    the server it measured."""
    body = {"model": scenario.model.name, "gpu": scenario.gpu.name, "tp": scenario.tp, "engine": scenario.engine,
            "weight_dtype": scenario.weight_dtype, "kv_cache_dtype": scenario.kv_cache_dtype, **report}
    return json.dumps(clean(body), indent=2, allow_nan=False)     # strict JSON: an undefined error is null


def params_from_report(report: dict, scenario: Scenario, name: str) -> CostParams:
    """The cost parameters of a fit's report on the server ``scenario`` measured, exactly as the calibration file
    written from it reads back (``name`` its source): what a replay with the fit applies."""
    return params_from_json(file_text(report, scenario), name)


def save(report: dict, path: str | Path, scenario: Scenario) -> CostParams:
    """Write the calibration file ``--calibration`` reads; its parameters as they read back."""
    text = file_text(report, scenario)
    write_atomically(Path(path), text)
    return params_from_json(text, str(path))
