"""What every engine module provides: its name, defaults and a ``run`` over a workload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from planner.sim.kernel import LAZY, reserved_tokens
from planner.sim.kv_pool import pool_keys
from planner.sim.prefix import PrefixIdentity

if TYPE_CHECKING:
    from planner.scenario import Scenario


@dataclass(frozen=True)
class EngineSettings:
    """Scheduler knobs an engine reads (vLLM names; other engines map theirs onto them)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    block_size: int
    num_blocks: int
    max_model_len: int
    max_new_tokens: int | None = None
    long_prefill_token_threshold: int = 0
    preemption: str = "recompute"
    swap_s_per_block: float = 0.0     # seconds to move one block (all layers) between GPU and host
    reserve_quantile: float | None = None   # vllm-v1 remedy: reserve this quantile of a predicted output length
    priority: str = "fcfs"            # or "shortest-predicted" (vllm-v1 remedy)
    abort_wait_s: float = float("inf")  # vllm-v1: stop once a request has waited this long (search pruning)
    prefix_caching: bool = True       # vllm-v1: vLLM V1's automatic prefix caching (on by default in vllm serve)
    async_scheduling: bool = False    # vllm-v1: a step's batch fixed when the step before it starts (vLLM >= 0.14)


@dataclass(frozen=True)
class RawRun:
    """Per-request outcome arrays and the sampled timeline, as an engine's loop leaves them."""

    first_token: np.ndarray
    finish: np.ndarray
    first_scheduled: np.ndarray
    preemptions: np.ndarray
    rejected: np.ndarray
    steps: int
    timeline: np.ndarray        # rows: time_s, running, waiting, blocks_used, step_s, bound
    generated: np.ndarray       # output tokens each request produced
    free_blocks_at_end: int
    replica: np.ndarray         # the replica each request was routed to
    hits: np.ndarray | None = None      # prompt tokens found in the prefix cache at first admission (None: no cache)
    rehits: np.ndarray | None = None    # tokens found again on re-admissions after preemption


@dataclass(frozen=True)
class FleetSpec:
    """What a fleet loop needs beyond one engine's settings: the replica count, the router's code in the compiled
    loop, each request's group (session id, -1 for none) with the number of groups, and the requests' prefix
    identity (None: the trace carries none)."""

    replicas: int
    router: int
    group: np.ndarray
    n_groups: int
    identity: PrefixIdentity | None = None

    def kernel_args(self, settings: EngineSettings, prompt: np.ndarray, output: np.ndarray,
                    caching: bool = False) -> tuple:
        """The fleet loop's trailing arguments: the fleet, then the prefix cache (``caching`` and an identity: the
        block keys at the settings' block size, and the pool's per-key arrays). A prefix-aware router reads one
        replica's KV pool in tokens (a replica's KV usage) and scores replicas by the prefixes they hold, up each
        request's lineage in the identity: its parent, the tokens they share and its prompt
        (:func:`planner.sim.routers.rule.prefix_scored`)."""
        empty = np.empty(0, np.int64)
        lineage = np.zeros((prompt.shape[0], 3), np.int64)
        lineage[:, 0], lineage[:, 2] = -1, prompt           # the router follows real, earlier parents only
        runs = (empty, empty, empty, *pool_keys(self.replicas, 0))
        if self.identity is not None:
            lineage[:, 0], lineage[:, 1] = self.identity.parent, self.identity.shared_tokens
            if caching:
                keyed = self.identity.runs(prompt + output, settings.block_size)
                runs = (keyed.run_off, keyed.run_end, keyed.run_base, *pool_keys(self.replicas, keyed.n_keys))
        return (self.replicas, self.router, self.group, self.n_groups, settings.num_blocks * settings.block_size,
                caching and self.identity is not None, *runs, lineage)


ONE_REPLICA = FleetSpec(1, 0, np.empty(0, np.int64), 0)


@dataclass(frozen=True)
class Engine:
    """A scheduler: ``run(arrival, prompt, output, settings, coeffs, log_every, fleet) -> RawRun``.

    With ``fleet_loop`` its loop simulates a fleet behind any router on one clock; without, ``run`` takes one
    replica (``fleet`` is None) and a fleet is its requests split round-robin, which the router's choice being
    blind to the replicas' state makes exact."""

    name: str
    label: str
    help: str
    run: Callable[..., RawRun]
    # the admission rule the loop runs: LAZY (blocks as tokens are computed), RESERVE_MAX (prompt + max_new_tokens
    # up front) or RESERVE_CHUNKED (TGI's 1,024-token chunks); None: batch-level admission (static batching)
    reservation: int | None = LAZY
    block_tokens: int | None = None    # its own KV block (TensorRT-LLM's 32 tokens); None: the scenario's
    chunks_prefill: bool = True        # honours chunked prefill and a token budget below max_model_len
    # max_num_seqs caps its batches under chunked prefill too (TGI's chunking ignores --max-batch-size: its batches
    # grow by the prefill and KV token budgets alone, backends/v3/src/backend.rs)
    chunked_seq_cap: bool = True
    preemption_modes: tuple[str, ...] = ("recompute",)   # what a recommendation may choose between
    launcher: str | None = None        # the server's command, ``{model}`` for the model id; None: research only
    launch_args: Callable[[dict, Scenario], str] | None = None   # (config, scenario) -> its flags
    # (config, scenario) -> what goes before the launcher: "VAR=value " settings, or a file its flags read
    launch_prefix: Callable[[dict, Scenario], str] | None = None
    full_memory_refusal: str = ""      # why the server refuses gpu_memory_utilization 1 ("": it takes it)
    fleet_loop: bool = True            # its loop runs a fleet behind a router (see the class docstring)
    # vLLM V1's runtime, whose costs the cost model adds (CostParams): piecewise CUDA graphs around attention in a
    # step that holds prefill, and an API-server process apart from the engine core (the frontend's latency); and
    # its attention backend, FP8 over an FP8 KV cache on Hopper (GPU.attention_peak_flops)
    v1_runtime: bool = False
    tp_step_overhead_s: float = 0.0    # CostParams.tp_step_overhead_s where a calibration leaves it to the engine
    # whether its loop caches prefixes under given settings (None: never), and what the real engine does
    prefix_caching: Callable[[EngineSettings], bool] | None = None
    prefix_cache_note: str = "computes every prompt in full (no prefix cache modelled)"

    def caches_prefixes(self, settings: EngineSettings) -> bool:
        """Whether this engine's loop reuses cached prefixes under ``settings`` (given a prefix identity)."""
        return self.prefix_caching is not None and self.prefix_caching(settings)

    def command(self, config: dict, scenario: Scenario) -> str:
        """The command line that starts this engine for ``scenario`` with ``config`` (a recommendation's
        scheduler settings)."""
        if self.launcher is None or self.launch_args is None:
            return f"# {self.label} is a research scheduler with no production launcher"
        model_id = scenario.model.serve_path or scenario.model.hf_id or scenario.model.name
        prefix = self.launch_prefix(config, scenario) if self.launch_prefix is not None else ""
        return f"{prefix}{self.launcher.format(model=model_id)} {self.launch_args(config, scenario)}"


    def peak_tokens(self, prompt: np.ndarray, output: np.ndarray, max_new: float, block_size: int) -> np.ndarray:
        """KV tokens each request holds at its peak under this engine's admission rule, in whole blocks: a lazy
        engine its final length less the last token; a reserving one the reservation in force when its last token
        is generated."""
        prompt = np.asarray(prompt, dtype=float)
        generated = np.minimum(np.asarray(output, dtype=float), max_new)
        if self.reservation == LAZY:
            held = kv_tokens_held(prompt, generated)
        else:
            held = reserved_tokens.py_func(self.reservation, prompt, np.maximum(generated - 1, 0),
                                           np.broadcast_to(float(max_new), prompt.shape))
        block = self.block_tokens or block_size
        return np.ceil(held / block) * block


def kv_tokens_held(prompt: np.ndarray, generated: np.ndarray) -> np.ndarray:
    """KV tokens a request holds once it has generated ``generated`` tokens, blocks allocated as tokens are computed
    (vLLM): every token but the last sampled, which is never fed back (16 + 1 tokens hold one 16-token block)."""
    return prompt + np.maximum(generated - 1, 0)


# vLLM names a 16-bit KV cache by its torch dtype (bfloat16 from 0.11, float16 later); "auto" is the model's own
VLLM_KV_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


def vllm_scenario_flags(scenario: Scenario) -> list[str]:
    """The ``vllm serve`` flags of a scenario's memory settings (V0 and V1 spell them alike), and the
    tensor-parallel degree and context length: what makes the server match the plan. ``--gpu-memory-utilization``
    is always given: vLLM's default moved from 0.9 to 0.92 (its ``CacheConfig``, in 0.20.0: PR #38284), so a
    server left to its default need not hold the pool planned."""
    parts = []
    if scenario.tp > 1:
        parts.append(f"--tensor-parallel-size {scenario.tp}")
    parts.append(f"--gpu-memory-utilization {scenario.gpu_memory_utilization!r}")
    kv = scenario.kv_cache_dtype
    if kv != "auto" and not (kv in VLLM_KV_DTYPE and kv == scenario.weight_dtype):     # a 16-bit cache as the
        parts.append(f"--kv-cache-dtype {VLLM_KV_DTYPE.get(kv, kv)}")                  # weights is the default
    if scenario.block_size != 16:
        parts.append(f"--block-size {scenario.block_size}")
    if scenario.weight_dtype == "fp8" and scenario.model.weight_dtype != "fp8":
        parts.append("--quantization fp8")          # online fp8 of a 16-bit checkpoint
    if scenario.num_gpu_blocks is not None:
        parts.append(f"--num-gpu-blocks-override {scenario.num_gpu_blocks}")
    parts.append(f"--max-model-len {scenario.max_model_len}")
    return parts


def plan_note(scenario: Scenario, online: tuple[str, ...] = ("fp8",)) -> str:
    """A trailing shell comment on what the plan assumes and no flag of the command sets ("" when nothing): weights
    from a checkpoint other than the model's own (an engine takes INT8 or INT4 weights from a quantized checkpoint,
    AWQ, GPTQ, …; ``online``: the dtypes it quantizes a 16-bit checkpoint to by a flag, vLLM's and TGI's FP8, where
    TensorRT-LLM's PyTorch backend reads FP8 from a ModelOpt checkpoint); outputs capped at ``max_new_tokens``, which
    servers take from each request's ``max_tokens``; and the seeds' predicted-length scheduling, the planner's
    what-if, where the servers admit first come, first served."""
    notes = []
    wanted = scenario.weight_dtype
    if wanted in ("int8", "int4", "fp8") and wanted not in online and wanted != scenario.model.weight_dtype:
        tools = "ModelOpt" if wanted == "fp8" else "AWQ, GPTQ"
        notes.append(f"serve an {wanted.upper()} checkpoint of this model ({tools}, …): the plan assumes its weights")
    if scenario.max_new_tokens is not None:
        notes.append(f"the plan caps outputs at {scenario.max_new_tokens:,} tokens: clients must ask max_tokens "
                     f"<= {scenario.max_new_tokens}")
    if scenario.reserve_quantile is not None or scenario.priority != "fcfs":
        notes.append("the plan's predicted-length scheduling is the planner's what-if: the server admits first come, "
                     "first served")
    return "  # " + "; ".join(notes) if notes else ""


def reservation_limit(prompt: np.ndarray, settings: EngineSettings) -> np.ndarray:
    """Per-request max_new_tokens an engine reserves for: the setting, else what max_model_len leaves."""
    room = np.maximum(settings.max_model_len - prompt, 1)
    return np.minimum(room, settings.max_new_tokens) if settings.max_new_tokens else room
