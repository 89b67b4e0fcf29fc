"""Known trace layouts and generic column names, mapped to the canonical request fields without asking.

A mapping says which source column feeds each canonical field; units say how the source expressed it. Everything
detected here is shown to the user and can be overridden (``--map FIELD=COLUMN``, ``--unit FIELD=UNIT``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner.errors import PlannerError

FIELDS_HELP = {
    "arrival": "request arrival time (datetime, epoch or relative; stored as seconds from the first request)",
    "input_tokens": "prompt / context tokens",
    "output_tokens": "generated / completion tokens",
    "model": "model name",
    "session_id": "conversation or session id",
    "ttft_ms": "time to first token",
    "tpot_ms": "time per output token (mean inter-token latency)",
    "e2e_ms": "end-to-end latency",
    "status": "request outcome (HTTP code or text); failures are flagged",
    "service": "service or log type the request came through (e.g. BurstGPT 'Log Type')",
    "hash_ids": "prefix block ids, one per 512-token prompt block (Mooncake hash_ids; equal ids = shared prefix)",
}
FIELDS = tuple(FIELDS_HELP)
REQUIRED = ("input_tokens", "output_tokens")
LATENCY_FIELDS = ("ttft_ms", "tpot_ms", "e2e_ms")
LATENCY_UNITS = {"s": 1000.0, "ms": 1.0, "us": 0.001}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def normalize(column: str) -> str:
    """Compare column names case-, space- and punctuation-insensitively: ``Request tokens`` -> ``request_tokens``."""
    return re.sub(r"[^a-z0-9.]+", "_", column.strip().lower()).strip("_")


@dataclass(frozen=True)
class Layout:
    """A trace layout recognised by its columns."""

    name: str
    requires: frozenset[str]
    mapping: dict[str, str]  # canonical field -> normalized source column
    units: dict[str, str] = field(default_factory=dict)
    help: str = ""


KNOWN_LAYOUTS = (
    Layout("vllm-benchmark", frozenset({"input_lens", "output_lens"}),
           {"arrival": "arrival_s", "input_tokens": "input_lens", "output_tokens": "output_lens",
            "ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_ms": "e2e_s", "status": "error"},
           {"arrival": "s", "ttft_ms": "s", "tpot_ms": "s", "e2e_ms": "s"},
           help="vLLM benchmark_serving result JSON (parallel lists; latencies in seconds)"),
    Layout("azure-llm", frozenset({"timestamp", "contexttokens", "generatedtokens"}),
           {"arrival": "timestamp", "input_tokens": "contexttokens", "output_tokens": "generatedtokens"},
           help="Azure LLM inference trace 2023/2024 (TIMESTAMP, ContextTokens, GeneratedTokens)"),
    Layout("burstgpt", frozenset({"timestamp", "request_tokens", "response_tokens", "log_type"}),
           {"arrival": "timestamp", "input_tokens": "request_tokens", "output_tokens": "response_tokens",
            "model": "model", "session_id": "session_id", "e2e_ms": "elapsed_time", "service": "log_type"},
           {"arrival": "s", "e2e_ms": "s"},
           help="BurstGPT, 6- or 8-column (zero response tokens = failed request; Elapsed time in seconds)"),
    Layout("mooncake", frozenset({"timestamp", "input_length", "output_length"}),
           {"arrival": "timestamp", "input_tokens": "input_length", "output_tokens": "output_length",
            "hash_ids": "hash_ids"},
           {"arrival": "ms"}, help="Mooncake JSONL (timestamp in ms from the trace start; hash_ids one id per "
                                   "512-token prefix block)"),
    Layout("vidur-replay", frozenset({"arrived_at", "num_prefill_tokens", "num_decode_tokens"}),
           {"arrival": "arrived_at", "input_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"},
           {"arrival": "s"}, help="Vidur trace replay (arrived_at in seconds)"),
    Layout("length-only", frozenset({"num_prefill_tokens", "num_decode_tokens"}),
           {"input_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"},
           help="length statistics with no time column (e.g. ShareGPT stats CSV)"),
    Layout("openai-usage", frozenset({"created", "usage.prompt_tokens", "usage.completion_tokens"}),
           {"arrival": "created", "input_tokens": "usage.prompt_tokens",
            "output_tokens": "usage.completion_tokens", "model": "model"},
           {"arrival": "s"}, help="OpenAI-style usage log (created epoch seconds, usage.*_tokens)"),
)

# Generic names, best first; a unit in the name ("_ms", "_s") fixes the unit.
GENERIC_ALIASES = {
    "input_tokens": ["input_tokens", "prompt_tokens", "input_len", "input_length", "prompt_len", "prompt_length",
                     "num_input_tokens", "num_prompt_tokens", "num_prefill_tokens", "prefill_tokens",
                     "context_tokens", "contexttokens", "request_tokens", "isl", "usage.prompt_tokens",
                     "usage.input_tokens", "input_lens"],
    "output_tokens": ["output_tokens", "completion_tokens", "output_len", "output_length", "num_output_tokens",
                      "num_decode_tokens", "decode_tokens", "generated_tokens", "generatedtokens",
                      "response_tokens", "osl", "usage.completion_tokens", "usage.output_tokens", "output_lens"],
    "arrival": ["arrival_time", "arrival", "arrived_at", "timestamp", "arrival_ts", "request_time", "start_time",
                "submit_time", "send_time", "created_at", "created", "time", "ts", "timestamp_ms",
                "arrival_time_ms", "arrival_ms", "timestamp_s", "arrival_s", "arrival_time_s"],
    "model": ["model", "model_name", "model_id"],
    "session_id": ["session_id", "conversation_id", "session", "conversation"],
    "ttft_ms": ["ttft_ms", "ttft", "ttft_s", "time_to_first_token", "time_to_first_token_ms", "first_token_latency"],
    "tpot_ms": ["tpot_ms", "tpot", "tpot_s", "itl_ms", "itl", "mean_itl", "mean_itl_ms", "time_per_output_token",
                "inter_token_latency"],
    "e2e_ms": ["e2e_ms", "e2e_latency_ms", "latency_ms", "e2e", "e2e_latency", "latency", "e2e_s", "latency_s",
               "end_to_end_latency", "elapsed_time", "duration_ms", "duration", "request_latency"],
    "status": ["status", "status_code", "http_status", "outcome", "error", "finish_reason"],
    "service": ["service", "log_type", "endpoint", "api"],
    "hash_ids": ["hash_ids", "block_hashes", "prefix_hash_ids"],
}

# Median above which a bare latency column is taken to be in milliseconds rather than seconds.
_BARE_LATENCY_MS_THRESHOLD = {"ttft_ms": 20.0, "tpot_ms": 1.0, "e2e_ms": 300.0}
# The largest median (ms) a unit may give a column and still be read in it: 10 minutes to a first token, 10 s a
# token, an hour a request (a bare itl of median 25 beside ttft_s is 25 ms a token, not 25 s)
MOST_PLAUSIBLE_MS = {"ttft_ms": 600_000.0, "tpot_ms": 10_000.0, "e2e_ms": 3_600_000.0}


def unit_from_name(column: str) -> str | None:
    """The unit a column's name states (``ttft_ms`` -> ``ms``), or None."""
    m = re.search(r"(?:_|\b)(ms|us|ns|s|sec|secs|seconds|millis|msec)$", normalize(column))
    if not m:
        return None
    return {"sec": "s", "secs": "s", "seconds": "s", "millis": "ms", "msec": "ms"}.get(m.group(1), m.group(1))


@dataclass(frozen=True)
class Mapping:
    """Which source column feeds each canonical field, in which unit, and why."""

    layout: str
    columns: dict[str, str]          # canonical field -> source column (original spelling)
    units: dict[str, str]            # canonical field -> "s"/"ms"/... for times; "auto" = decide from values


def check_overrides(overrides: dict[str, str] | None, unit_overrides: dict[str, str] | None) -> None:
    """Refuse ``--map`` fields and ``--unit`` fields or units that name nothing, before a file is read (whether a
    ``--map`` column exists needs the file: :func:`detect_mapping` checks that).

    Raises
    ------
    PlannerError
        Naming the field or unit and the ones expected.
    """
    for fld in overrides or {}:
        if fld not in FIELDS:
            raise PlannerError(f"--map: unknown field {fld!r}; expected one of {', '.join(FIELDS)}")
    for fld, unit in (unit_overrides or {}).items():
        allowed = TIME_UNITS if fld == "arrival" else LATENCY_UNITS if fld in LATENCY_FIELDS else None
        if allowed is None:
            raise PlannerError(f"--unit: field {fld!r} has no unit; expected arrival, ttft_ms, tpot_ms or e2e_ms")
        if unit not in allowed and not (fld == "arrival" and unit == "datetime"):
            raise PlannerError(f"--unit {fld}={unit}: expected one of {', '.join(allowed)}")


def detect_mapping(columns: list[str], overrides: dict[str, str] | None = None,
                   unit_overrides: dict[str, str] | None = None) -> Mapping:
    """Map source columns to canonical fields.

    Parameters
    ----------
    columns : list of str
        Source column names (nested JSON fields flattened as ``parent.child``).
    overrides : dict, optional
        ``field -> column`` chosen by the user; an empty column removes the field.
    unit_overrides : dict, optional
        ``field -> unit`` chosen by the user.

    Raises
    ------
    PlannerError
        On unknown fields or columns, or when no input/output token columns can be found.
    """
    overrides = dict(overrides or {})
    unit_overrides = dict(unit_overrides or {})
    by_norm: dict[str, str] = {}
    for col in columns:
        by_norm.setdefault(normalize(col), col)
    present = set(by_norm)

    layout = next((lay for lay in KNOWN_LAYOUTS if lay.requires <= present), None)
    mapped: dict[str, str] = {}
    units: dict[str, str] = {}
    if layout is not None:
        for fld, norm in layout.mapping.items():
            if norm in by_norm:
                mapped[fld] = by_norm[norm]
                if fld in layout.units:
                    units[fld] = layout.units[fld]
    used = set(mapped.values())
    for fld, aliases in GENERIC_ALIASES.items():
        if fld in mapped:
            continue
        for alias in aliases:
            col = by_norm.get(alias)
            if col is not None and col not in used:
                mapped[fld] = col
                used.add(col)
                break

    check_overrides(overrides, unit_overrides)
    for fld, col in overrides.items():
        if col == "":
            mapped.pop(fld, None)
            units.pop(fld, None)
            continue
        if col not in columns:
            match = by_norm.get(normalize(col))
            if match is None:
                raise PlannerError(f"--map {fld}={col}: no column {col!r} in the file; columns found: "
                                   + ", ".join(repr(c) for c in columns))
            col = match
        mapped[fld] = col
        units.pop(fld, None)

    missing = [f for f in REQUIRED if f not in mapped]
    if missing:
        raise PlannerError(
            "no recognisable token columns: could not find " + " and ".join(missing)
            + "; columns found: " + (", ".join(repr(c) for c in columns) or "none")
            + "; expected input tokens as one of " + ", ".join(GENERIC_ALIASES["input_tokens"][:8])
            + " and output tokens as one of " + ", ".join(GENERIC_ALIASES["output_tokens"][:8])
            + " (or say which with --map input_tokens=COLUMN --map output_tokens=COLUMN)")

    for fld in mapped:
        if fld == "arrival" or fld in LATENCY_FIELDS:
            units.setdefault(fld, unit_from_name(mapped[fld]) or "auto")
    units.update(unit_overrides)
    name = layout.name if layout else "generic"
    return Mapping(name + ("+map" if overrides else ""), mapped, units)


def latency_unit(field_name: str, declared: str, median: float | None, sibling: str | None = None) -> str:
    """Resolve an ``auto`` latency unit: the unit a sibling latency column's name states where the median is
    plausible in it (:data:`MOST_PLAUSIBLE_MS`), else from the median (seconds if small, else milliseconds)."""
    if declared != "auto":
        return declared
    if median is None:
        return sibling or "ms"
    if sibling is not None and median * LATENCY_UNITS[sibling] <= MOST_PLAUSIBLE_MS[field_name]:
        return sibling
    return "s" if median < _BARE_LATENCY_MS_THRESHOLD[field_name] else "ms"
