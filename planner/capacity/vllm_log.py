"""Read a vLLM startup log and fit the memory overheads to it, so the plan reproduces what that server logged.

Recognised lines (V1 and V0 wordings): "Model loading took X GiB", "Memory profiling takes … total_gpu_memory (X)
x gpu_memory_utilization (Y) = Z; model weights take …; non_torch_memory takes …; PyTorch activation peak memory
takes …; the rest of the memory reserved for KV Cache is …", "Available KV cache memory: X GiB", "GPU KV cache
size: N tokens", "# GPU blocks: N", "Maximum concurrency for N tokens per request: X x", CUDA-graph capture.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from planner.capacity.memory import LOG_SOURCE, Overheads
from planner.catalog.gpus import GPU, GiB
from planner.errors import PlannerError

# a logged total memory against the GPU's: one GPU model's CUDA totals agree within 1% (A100 80GB 79.14-79.15 GiB);
# another model's differ by 10% or more (H100 SXM 79.19 against H100 NVL's 93, A100 40GB's 39.50)
LOG_MEMORY_TOLERANCE = 0.05
_UNITS = {"gib": GiB, "gb": GiB, "mib": 1024**2, "mb": 1024**2}   # vLLM writes "GB" for GiB in older versions
_NUM = r"([0-9][0-9,]*\.?[0-9]*)"
_SIZE = _NUM + r"\s*(GiB|GB|MiB|MB)"
_PATTERNS = {
    "weights_bytes": [r"Model loading took " + _SIZE, r"Loading model weights took " + _SIZE,
                      r"model weights take " + _SIZE, r"weights memory: " + _SIZE],
    "total_bytes": [r"total_gpu_memory \(" + _SIZE, r"total_memory=" + _SIZE],
    "utilization": [r"gpu_memory_utilization \(" + _NUM + r"\)", r"Requested memory: " + _NUM + r" \(util\)",
                    r"--gpu-memory-utilization=" + _NUM],
    "non_torch_bytes": [r"non_torch_memory takes " + _SIZE, r"non-torch forward increase memory: " + _SIZE],
    "activation_bytes": [r"PyTorch activation peak memory takes " + _SIZE, r"torch peak memory increase: " + _SIZE],
    "kv_pool_bytes": [r"Available KV cache memory: " + _SIZE, r"reserved for KV Cache is " + _SIZE],
    "kv_tokens": [r"GPU KV cache size: " + _NUM + r" tokens"],
    "num_blocks": [r"(?i)# (?:GPU|CUDA) blocks: " + _NUM, r"num_gpu_blocks[=: ]+" + _NUM],
    "max_concurrency": [r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"\s*x"],
    "cudagraph_bytes": [r"Graph capturing finished in [0-9.]+ secs?, took " + _SIZE,
                        r"Estimated CUDA graph memory: " + _SIZE, r"CUDA graph memory[^0-9]*" + _SIZE],
}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class ParsedLog:
    """Figures found in a startup log (bytes, tokens, blocks), None where absent."""

    weights_bytes: int | None = None
    total_bytes: int | None = None
    utilization: float | None = None
    non_torch_bytes: int | None = None
    activation_bytes: int | None = None
    kv_pool_bytes: int | None = None
    kv_tokens: int | None = None
    num_blocks: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    cudagraph_bytes: int | None = None

    def found(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def parse_log(text: str) -> ParsedLog:
    """The last value of each recognised line (a restarted server logs them again)."""
    values = {}
    for key, patterns in _PATTERNS.items():
        for pattern in patterns:
            matches = list(re.finditer(pattern, text))
            if not matches:
                continue
            groups = matches[-1].groups()
            if key == "max_concurrency":
                values["max_model_len"] = int(_number(groups[0]))
                values[key] = _number(groups[1])
            elif key in ("utilization",):
                values[key] = _number(groups[0])
            elif key in ("kv_tokens", "num_blocks"):
                values[key] = int(_number(groups[0]))
            else:
                values[key] = int(round(_number(groups[0]) * _UNITS[groups[1].lower()]))
            break
    return ParsedLog(**values)


def fit_overheads(parsed: ParsedLog, requested_bytes: int, vllm_version: str | None = None) -> Overheads:
    """Overheads that make the plan reproduce the log's KV memory, ``requested_bytes`` being what the logged server
    requested (its total memory times its ``gpu_memory_utilization``), on the release ``vllm_version`` (None: as
    the scenario's engine is served today).

    The weights come from the log; activation and non-torch memory too when the log splits them (V0 wording),
    else their sum is whatever ``requested − weights − available KV`` leaves, booked as activation. They are the
    logged server's bytes, so a plan at another utilization moves the KV pool by exactly the memory it adds.

    Raises
    ------
    PlannerError
        When the log has neither the weights nor the available KV memory.
    """
    if parsed.weights_bytes is None or parsed.kv_pool_bytes is None:
        missing = [name for name, v in (("'Model loading took … GiB'", parsed.weights_bytes),
                                        ("'Available KV cache memory: … GiB'", parsed.kv_pool_bytes)) if v is None]
        raise PlannerError(f"the pasted log lacks {' and '.join(missing)}: expected vLLM's startup lines")
    # everything else the log's version subtracted (activation, non-torch, CUDA graphs if counted) is the
    # residual; a split the log gives is kept, with the log's rounding absorbed by the activation term
    residual = max(0, requested_bytes - parsed.weights_bytes - parsed.kv_pool_bytes)
    non_torch = min(parsed.non_torch_bytes or 0, residual)
    return Overheads(activation_bytes=residual - non_torch, non_torch_bytes=non_torch,
                     weights_bytes=parsed.weights_bytes, cudagraph_bytes=parsed.cudagraph_bytes or 0,
                     cudagraph_counted=False, source=LOG_SOURCE, vllm_version=vllm_version)


def overheads_from_log(text: str, gpu: GPU, gpu_memory_utilization: float,
                       vllm_version: str | None = None) -> tuple[GPU, Overheads]:
    """The GPU as the logged server saw it (its total memory, when logged) and the overheads that make the plan
    reproduce the log's KV memory: what a scenario built from a pasted startup log takes. They are fitted at the
    utilization the log states (else ``gpu_memory_utilization``), and the release ``vllm_version`` is kept.

    Raises
    ------
    PlannerError
        When the log has neither the weights nor the available KV memory, or logs another GPU's total memory
        (off ``gpu``'s by more than :data:`LOG_MEMORY_TOLERANCE`).
    """
    parsed = parse_log(text)
    if parsed.total_bytes:
        if abs(parsed.total_bytes / gpu.memory_bytes - 1) > LOG_MEMORY_TOLERANCE:
            raise PlannerError(f"--vllm-log: the logged GPU has {parsed.total_bytes / GiB:.2f} GiB, but {gpu.name} "
                               f"has {gpu.memory_bytes / GiB:.2f} GiB: the log is another GPU's, and its overheads "
                               "would size this KV cache wrongly; set --gpu to the logged GPU (or --gpu-memory-gib "
                               "to its memory)")
        gpu = replace(gpu, memory_bytes=parsed.total_bytes)
    logged_utilization = parsed.utilization if parsed.utilization is not None else gpu_memory_utilization
    return gpu, fit_overheads(parsed, math.ceil(gpu.memory_bytes * logged_utilization), vllm_version)
