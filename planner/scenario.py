"""One serving scenario: model, GPU, tensor parallelism, dtypes, vLLM's memory flags and overheads, the engine and
its settings, and the cost model. Built and validated once (a value ``vllm serve`` would refuse is refused here,
naming the flag and what it expects), then taken whole by every layer: memory, fit check, simulation, search,
recommendation, diagnosis and report. Defaults that depend on other fields (``max_model_len`` from the model,
``max_num_seqs`` and ``max_num_batched_tokens`` from the GPU) are resolved here and nowhere else."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from planner.capacity.memory import (KV_DTYPE_BYTES, LOG_SOURCE, Overheads, default_batched_tokens,
                                     default_max_num_seqs, plan_memory, startup_problems)
from planner.catalog.gpus import GPU, GiB
from planner.catalog.models import WEIGHT_BYTES, ModelSpec, weights_bytes_per_gpu
from planner.catalog.releases import VLLM_ENGINES, VllmRelease, default_version, engine_versions, vllm_release
from planner.errors import PlannerError
from planner.scenario_checks import FLAGS, check_cost, check_overheads, choice, integer, number
from planner.capacity.preemption import swap_block_seconds
from planner.sim.cost_model import CostParams, coefficients
from planner.sim.engines import ENGINES, EngineSettings

if TYPE_CHECKING:
    from planner.capacity.memory import MemoryPlan
    from planner.sim.cost_model import StepCoefficients

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)      # vLLM's CacheConfig.BlockSize
PRIORITIES = ("fcfs", "shortest-predicted")
# a startup log's weights per GPU against the architecture's count: vLLM logs agree within 7% (Llama-3.1-8B bf16
# 14.99 GiB against 14.96; Llama-3-8B FP8 at TP 2, 4.52 against 4.23, some layers kept in 16 bits); another model,
# dtype or TP is off by 1.5x or more
LOG_WEIGHTS_TOLERANCE = 1.15
# fields whose default depends on others: None asks for it, and the resolved value records that it was asked
AUTO_FIELDS = ("weight_dtype", "max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens",
               "async_scheduling")


@dataclass(frozen=True)
class Scenario:
    """A model served on ``tp`` × ``gpu`` by one engine with its settings, and how steps are costed.

    Attributes
    ----------
    weight_dtype, max_model_len, block_size, max_num_seqs, max_num_batched_tokens, async_scheduling
        ``None`` asks for the default (the model's dtype and ``max_position_embeddings``; vLLM's 16-token blocks,
        those an MLA model's backend forces on the GPU, :attr:`GPU.mla_block_size`; ``vllm serve``'s limits
        for the GPU, the budget raised to ``max_model_len`` without chunked prefill; async scheduling as the vLLM
        release does, :attr:`release`); after construction they hold the value that applies and :attr:`auto`
        names those that were defaulted.
    num_gpu_blocks : int, optional
        Overrides the computed KV block count (vLLM's ``--num-gpu-blocks-override``).
    overheads : Overheads
        Memory vLLM subtracts besides the weights (estimated, entered, or fitted from a startup log), and the vLLM
        release whose rules estimate it: ``vllm_version`` None asks for the newest that serves the engine, and
        :attr:`auto` then names ``"vllm_version"``.
    cost : CostParams
        The step-time cost model's parameters (defaults or a calibration).

    Raises
    ------
    PlannerError
        On the first value that makes no sense, naming its flag and the range expected.
    """

    model: ModelSpec
    gpu: GPU
    tp: int = 1
    weight_dtype: str | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    overheads: Overheads = Overheads()
    engine: str = "vllm-v1"
    chunked_prefill: bool = True
    prefix_caching: bool = True
    async_scheduling: bool | None = None
    preemption: str = "recompute"
    max_new_tokens: int | None = None
    reserve_quantile: float | None = None
    priority: str = "fcfs"
    cost: CostParams = CostParams()
    auto: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelSpec) or not isinstance(self.gpu, GPU):
            raise PlannerError("a scenario needs a model (a preset or a config.json) and a GPU preset")
        set_ = object.__setattr__
        set_(self, "auto", frozenset(f for f in AUTO_FIELDS if getattr(self, f) is None)
             | ({"vllm_version"} if self.overheads.vllm_version is None else set()))
        tp = integer("tp", self.tp, low=1)
        set_(self, "tp", tp)
        base = defaults(self.model, self.gpu)
        set_(self, "weight_dtype", self.weight_dtype or base["weight_dtype"])
        choice("weight_dtype", self.weight_dtype, WEIGHT_BYTES)
        if refusal := tp_refusal(self.model, tp, self.weight_dtype):
            fits = tp_degrees(self.model, self.weight_dtype)
            raise PlannerError(f"--tp {tp}: {refusal}, as vLLM requires; expected one of "
                               f"{', '.join(map(str, fits[:12]))}")
        choice("kv_cache_dtype", self.kv_cache_dtype, KV_DTYPE_BYTES)
        util = number("gpu_memory_utilization", self.gpu_memory_utilization)
        if not 0 < util <= 1:
            raise PlannerError(f"--gpu-mem-util {util:g}: expected a fraction of GPU memory in (0, 1]")
        set_(self, "gpu_memory_utilization", util)
        limit = self.model.max_position
        max_len = (integer("max_model_len", self.max_model_len, low=1) if self.max_model_len is not None
                   else base["max_model_len"])
        if max_len > limit:
            raise PlannerError(f"--max-model-len {max_len}: {self.model.name} has max_position_embeddings {limit:,}; "
                               f"expected at most {limit:,} (vLLM refuses longer without "
                               "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
        set_(self, "max_model_len", max_len)
        if self.num_gpu_blocks is not None:
            set_(self, "num_gpu_blocks", integer("num_gpu_blocks", self.num_gpu_blocks, low=1))
        engine = ENGINES.get(self.engine)
        if engine is None:
            raise PlannerError(f"--engine {self.engine!r}: expected one of {', '.join(ENGINES)}")
        self._resolve_block_size(engine.name)
        if util == 1 and engine.full_memory_refusal:
            raise PlannerError(f"--gpu-mem-util 1: {engine.full_memory_refusal}; expected a fraction below 1")
        if self.preemption not in engine.preemption_modes:
            raise PlannerError(f"--preemption {self.preemption!r}: {engine.label} preempts by "
                               f"{' or '.join(engine.preemption_modes)} only; expected --preemption "
                               f"{' or '.join(engine.preemption_modes)}"
                               + (", or --engine vllm-v0 to swap" if self.preemption == "swap" else ""))
        if self.max_new_tokens is not None:
            set_(self, "max_new_tokens", integer("max_new_tokens", self.max_new_tokens, low=1))
        choice("priority", self.priority, PRIORITIES)
        if self.reserve_quantile is not None:
            q = number("reserve_quantile", self.reserve_quantile)
            if not 0 < q < 1:
                raise PlannerError(f"--reserve-predicted {q:g}: expected a quantile such as 0.75 or 0.95")
        if (self.reserve_quantile is not None or self.priority != "fcfs") and engine.name != "vllm-v1":
            raise PlannerError(f"--reserve-predicted and --priority are remedies of the vllm-v1 engine, not of "
                               f"{engine.name}")
        self._resolve_release(engine.name)
        self._resolve_limits()
        check_overheads(self.overheads)
        self._check_logged_weights()
        if self.async_scheduling is None:
            set_(self, "async_scheduling", self.release.async_scheduling)
        elif not isinstance(self.async_scheduling, bool):
            raise PlannerError(f"async scheduling {self.async_scheduling!r}: expected true or false")
        elif not engine.v1_runtime:
            raise PlannerError(f"--{'' if self.async_scheduling else 'no-'}async-scheduling is a setting of vLLM V1's "
                               f"scheduler, not of {engine.name}; expected --engine vllm-v1, or neither flag")
        check_cost(self.cost)
        price = number("price", self.gpu.price_per_hour)
        if price < 0:
            raise PlannerError(f"--price {price:g}: expected a non-negative price per GPU-hour")

    def _resolve_block_size(self, engine: str) -> None:
        """vLLM's 16 unless given; an MLA model on a vLLM engine takes the block its GPU's MLA backend forces
        (:attr:`GPU.mla_block_size`: 64 on Hopper), as vLLM raises a given size that is not a multiple of it."""
        size = 16 if self.block_size is None else self.block_size
        if size not in BLOCK_SIZES:
            raise PlannerError(f"--block-size {size!r}: expected one of {', '.join(map(str, BLOCK_SIZES))} "
                               "(vLLM's block sizes)")
        forced = self.gpu.mla_block_size if self.model.mla is not None and engine in VLLM_ENGINES else 1
        if size % forced:       # then set by the model and GPU, as a default is: a new GPU resolves it again
            size = forced
            object.__setattr__(self, "auto", self.auto | {"block_size"})
        object.__setattr__(self, "block_size", size)

    def _resolve_release(self, engine: str) -> None:
        """The vLLM release served: as given, else the newest that serves the engine; a vLLM engine is refused a
        release that does not run it (V1's profiling for a V0 server sizes another pool, silently)."""
        version = self.overheads.vllm_version
        if version is None:
            version = default_version(engine)
            object.__setattr__(self, "overheads", replace(self.overheads, vllm_version=version))
        release = vllm_release(version)
        if engine in VLLM_ENGINES and release.engine != engine:
            default = default_version(engine)
            raise PlannerError(f"--vllm-version {version}: {release.label} runs {release.engine}, not --engine "
                               f"{engine} (vLLM ran V0 beside V1 from 0.7 and removed it in 0.11); expected "
                               f"{', '.join(engine_versions(engine))} (left out: {default}, "
                               f"{vllm_release(default).label})")
        if refusal := release.refusal(engine, self.chunked_prefill, self.async_scheduling, self.block_size):
            raise PlannerError(refusal)

    def _check_logged_weights(self) -> None:
        """A startup log's weights are this server's: a log of another model, dtype or TP would size the KV cache
        with overheads that are not this scenario's, silently."""
        if self.overheads.source != LOG_SOURCE or (logged := self.overheads.weights_bytes) is None:
            return
        expected = weights_bytes_per_gpu(self.model, self.weight_dtype, self.tp)
        if not 1 / LOG_WEIGHTS_TOLERANCE <= logged / expected <= LOG_WEIGHTS_TOLERANCE:
            raise PlannerError(f"--vllm-log: the log loaded {logged / GiB:.2f} GiB of weights per GPU, but "
                               f"{self.model.name} in {self.weight_dtype} at TP {self.tp} holds "
                               f"{expected / GiB:.2f} GiB per GPU: the log is another server's (model, weight dtype "
                               "or TP), and its overheads would size this KV cache wrongly; paste this server's log, "
                               "or set --model, --weight-dtype and --tp to the logged server's")

    def _resolve_limits(self) -> None:
        set_ = object.__setattr__
        given_seqs, given_batched = (None if v is None else integer(name, v, low=1) for name, v in
                                     (("max_num_seqs", self.max_num_seqs),
                                      ("max_num_batched_tokens", self.max_num_batched_tokens)))
        auto = defaults(self.model, self.gpu, self.max_model_len, self.chunked_prefill, given_seqs, given_batched,
                        self.engine, self.release)
        seqs, batched = given_seqs or auto["max_num_seqs"], given_batched or auto["max_num_batched_tokens"]
        if batched < seqs:      # named by the flag given: the other may be a default
            given = f"--max-num-batched-tokens {batched}" if self.max_num_batched_tokens else f"--max-num-seqs {seqs}"
            raise PlannerError(f"{given}: expected --max-num-batched-tokens ({batched}) at least --max-num-seqs "
                               f"({seqs}), as vLLM requires")
        if not self.chunked_prefill and batched < self.max_model_len:
            raise PlannerError(f"--max-num-batched-tokens {batched}: without chunked prefill it must hold a whole "
                               f"prompt; expected at least --max-model-len ({self.max_model_len})")
        set_(self, "max_num_seqs", seqs)
        set_(self, "max_num_batched_tokens", batched)

    def replace(self, **changes) -> Scenario:
        """A validated copy with ``changes``; fields that were defaulted are defaulted again (a new GPU brings its
        own ``max_num_seqs``) unless ``changes`` sets them."""
        again = {name: None for name in self.auto if name not in changes and name != "vllm_version"}
        if "vllm_version" in self.auto and "overheads" not in changes:
            again["overheads"] = replace(self.overheads, vllm_version=None)
        return replace(self, **again, **changes)

    @cached_property
    def memory(self) -> MemoryPlan:
        """vLLM's KV budget for one GPU of the tensor-parallel group (:func:`planner.capacity.memory.plan_memory`)."""
        return plan_memory(self)

    @property
    def release(self) -> VllmRelease:
        """The vLLM release range served (``--vllm-version``): its memory profiling and runtime defaults."""
        return self.overheads.release

    @property
    def engine_spec(self):
        """The engine's registry entry (:data:`planner.sim.engines.ENGINES`)."""
        return ENGINES[self.engine]

    @cached_property
    def coefficients(self) -> StepCoefficients:
        """The cost model's per-step constants for this model, GPU, TP, dtypes and parameters."""
        return coefficients(self)

    @cached_property
    def settings(self) -> EngineSettings:
        """What the engine's loop reads: the limits above and the KV block pool the memory plan leaves.

        Raises
        ------
        PlannerError
            When no memory is left for the KV cache (vLLM fails to start).
        """
        plan = self.memory
        if plan.num_blocks <= 0:
            raise PlannerError(self.memory_problems[0])
        return EngineSettings(self.max_num_seqs, self.max_num_batched_tokens, self.chunked_prefill,
                              self.block_size, plan.num_blocks, self.max_model_len, self.max_new_tokens, 0,
                              self.preemption, swap_block_seconds(self), self.reserve_quantile, self.priority,
                              prefix_caching=self.prefix_caching, async_scheduling=self.async_scheduling)

    @cached_property
    def memory_problems(self) -> tuple[str, ...]:
        """Why vLLM would not start with this memory plan (:func:`planner.capacity.memory.startup_problems`)."""
        return startup_problems(self)

    @cached_property
    def calibration_warnings(self) -> tuple[str, ...]:
        """What a calibration fitted on another server leaves unmeasured here
        (:meth:`planner.sim.cost_model.CostParams.transfer_warnings`); empty for the defaults."""
        return self.cost.transfer_warnings(self)

    @property
    def price_per_replica_hour(self) -> float:
        """USD per hour of one replica (``tp`` GPUs)."""
        return self.gpu.price_per_hour * self.tp

    def to_dict(self) -> dict:
        """The JSON twin: every field, the model and GPU by name (their specs are in a report's assumptions)."""
        out = {"model": self.model.name, "hf_id": self.model.hf_id, "gpu": self.gpu.name,
               "gpu_label": self.gpu.label, "gpu_memory_bytes": self.gpu.memory_bytes,
               "price_per_gpu_hour": self.gpu.price_per_hour}
        for name in ("tp", "weight_dtype", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len",
                     "block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "engine",
                     "chunked_prefill", "prefix_caching", "async_scheduling", "preemption", "max_new_tokens",
                     "reserve_quantile", "priority"):
            out[name] = getattr(self, name)
        out["defaulted"] = sorted(self.auto)
        out["overheads"] = asdict(self.overheads)
        out["cost"] = self.cost.as_dict()
        return out

    def cli_args(self) -> list[str]:
        """The flags that rebuild this scenario (:mod:`planner.cli.scenario_args`), defaulted values left out, numbers
        exact (``repr``: six digits moved a pool by a block), log-fitted overheads in GiB, the model by model_ref."""
        from planner.catalog.gpus import GPUS
        from planner.catalog.presets import model_ref

        args = ["--model", model_ref(self.model), "--gpu", self.gpu.name, "--tp", str(self.tp)]
        for name, default in (("weight_dtype", None), ("kv_cache_dtype", "auto"), ("gpu_memory_utilization", 0.9),
                              ("max_model_len", None), ("block_size", 16), ("num_gpu_blocks", None),
                              ("max_num_seqs", None), ("max_num_batched_tokens", None), ("engine", "vllm-v1"),
                              ("preemption", "recompute"), ("max_new_tokens", None), ("reserve_quantile", None),
                              ("priority", "fcfs")):
            value = getattr(self, name)
            if name not in self.auto and value is not None and value != default:
                args += [FLAGS[name], repr(value) if isinstance(value, float) else str(value)]
        if not self.chunked_prefill:
            args.append("--no-chunked-prefill")
        if not self.prefix_caching:
            args.append("--no-prefix-cache")
        if "async_scheduling" not in self.auto:
            args.append("--async-scheduling" if self.async_scheduling else "--no-async-scheduling")
        o = self.overheads
        for flag, value in (("--activation-gib", o.activation_bytes), ("--non-torch-gib", o.non_torch_bytes),
                            ("--cudagraph-gib", o.cudagraph_bytes), ("--weights-gib", o.weights_bytes)):
            if value is not None:
                args += [flag, repr(value / GiB)]
        if "vllm_version" not in self.auto:
            args += ["--vllm-version", o.vllm_version]
        if o.cudagraph_counted is not None and o.cudagraph_counted != o.release.cudagraphs_counted:
            args += ["--cudagraphs", "counted" if o.cudagraph_counted else "outside"]
        if (preset := GPUS.get(self.gpu.name)) is not None and preset.memory_bytes != self.gpu.memory_bytes:
            args += ["--gpu-memory-gib", repr(self.gpu.memory_bytes / GiB)]
        return args + ["--price", repr(self.gpu.price_per_hour)]

    @cached_property
    def key(self) -> str:
        """A digest of every field (model and GPU specs included): what caches are keyed on."""
        return hashlib.sha256(repr((self.model, self.gpu, self.to_dict())).encode()).hexdigest()


def defaults(model: ModelSpec, gpu: GPU, max_model_len: int | None = None, chunked_prefill: bool = True,
             max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None, engine: str = "vllm-v1",
             release: VllmRelease | None = None) -> dict:
    """What a scenario takes for the fields it is not given, and what the pages show as "auto": the model's dtype
    and ``max_position_embeddings``, ``vllm serve``'s ``max_num_seqs`` and ``max_num_batched_tokens`` for the GPU
    as the engine's arguments settle them beside the limits given (``release``, left out: the engine's newest;
    :class:`planner.catalog.releases.VllmRelease`): without chunked prefill the default budget is raised to hold a
    whole ``max_model_len`` prompt; vLLM V1 from 0.11 then cuts it to what ``max_num_seqs`` such prompts hold, and
    V1 cuts a default ``max_num_seqs`` to the budget (``--max-num-batched-tokens 512`` serves 512 sequences)."""
    max_len = max_model_len or model.max_position
    release = release or vllm_release(default_version(engine))
    cuts = engine in VLLM_ENGINES and release.engine == engine
    batched, seqs = default_batched_tokens(gpu), default_max_num_seqs(gpu)
    if not chunked_prefill:
        batched = max(batched, max_len)
    if cuts and release.budget_to_seqs:
        batched = min(batched, (max_num_seqs or seqs) * max_len)
    if cuts and release.seqs_to_budget:
        seqs = min(seqs, max_num_batched_tokens or batched)
    return {"weight_dtype": model.weight_dtype, "max_model_len": max_len, "max_num_seqs": seqs,
            "max_num_batched_tokens": batched}


def tp_refusal(model: ModelSpec, tp: int, weight_dtype: str) -> str | None:
    """Why vLLM cannot shard the model over ``tp`` ranks (None when it can): the attention heads divide evenly and
    the KV heads split evenly or (when fewer than the ranks) replicate whole, MLA keeping one latent on every rank
    (its attention layers); the MLP's and experts' widths divide evenly (MergedColumnParallelLinear asserts it),
    as does the vocabulary padded to a multiple of 64 (VocabParallelEmbedding); and an FP8 checkpoint's shards
    hold whole weight blocks (vLLM's block-quantized FP8 refuses a partial one: DeepSeek-V3's experts are 2,048
    wide, 64 per rank at TP 32, vllm#12256)."""
    heads, kv = model.heads, model.kv_heads
    if heads % tp or (model.mla is None and (kv % tp if tp < kv else tp % kv)):
        return (f"{model.name} has {heads} attention heads ({kv} KV heads), which must divide evenly across "
                "tensor-parallel ranks")
    widths = {"intermediate_size": model.intermediate}
    if model.moe is not None:
        widths["moe_intermediate_size"] = model.moe.expert_intermediate
    for name, width in widths.items():
        if width % tp:
            return f"{model.name}'s {name} {width:,} must divide evenly across tensor-parallel ranks"
        if model.fp8_block and weight_dtype == model.weight_dtype == "fp8" and (width // tp) % model.fp8_block:
            return (f"{model.name}'s FP8 checkpoint scales {model.fp8_block}-wide weight blocks, and its {name} "
                    f"{width:,} leaves {width // tp:,} per rank, not whole blocks")
    padded = -(-model.vocab // 64) * 64
    if padded % tp:
        return (f"{model.name}'s vocabulary of {model.vocab:,} (padded to {padded:,}) must divide evenly across "
                "tensor-parallel ranks")
    return None


def tp_degrees(model: ModelSpec, weight_dtype: str | None = None) -> list[int]:
    """Tensor-parallel degrees vLLM accepts for the model in ``weight_dtype`` (default: as it ships), by
    :func:`tp_refusal`."""
    dtype = weight_dtype or model.weight_dtype
    return [d for d in range(1, model.heads + 1) if tp_refusal(model, d, dtype) is None]
