"""The scenario flags every command takes (one argument group), and the one place the CLI builds a Scenario."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from planner.capacity.memory import KV_DTYPE_BYTES
from planner.catalog.releases import VLLM_VERSIONS, default_version
from planner.catalog.gpus import GiB
from planner.catalog.models import WEIGHT_BYTES
from planner.cli.values import FINITE, NON_NEGATIVE_GIB, SCENARIO_INT, real
from planner.errors import PlannerError

if TYPE_CHECKING:           # the scenario brings the compiled simulator; commands without one stay quick to start
    from planner.scenario import Scenario


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the scenario flags on a command's parser (memory, step, simulate, calibrate, recommend, report)."""
    g = parser.add_argument_group("scenario", "model, GPUs, memory flags, engine and cost model: the same flags, "
                                              "meaning the same, on every command")
    g.add_argument("--model", required=True, help="a preset name or a path to a Hugging Face config.json")
    g.add_argument("--gpu", required=True, help="GPU preset (a100-80gb-sxm, h100-sxm, …)")
    g.add_argument("--tp", type=SCENARIO_INT, default=1, help="tensor-parallel degree (GPUs per replica)")
    g.add_argument("--weight-dtype", choices=tuple(WEIGHT_BYTES),
                   help="default: the model's own (DeepSeek-V3 fp8, others bf16)")
    g.add_argument("--kv-cache-dtype", default="auto", choices=tuple(KV_DTYPE_BYTES),
                   help="auto (the model's dtype) or fp8")
    g.add_argument("--gpu-mem-util", type=FINITE, default=0.9,
                   help="vLLM --gpu-memory-utilization (default 0.9, vLLM's default through 0.19; 0.20 moved it "
                        "to 0.92, PR #38284: give your server's value)")
    g.add_argument("--max-model-len", type=SCENARIO_INT, help="default: the model's max_position_embeddings")
    g.add_argument("--block-size", type=SCENARIO_INT,
                   help="KV block size in tokens (vLLM: 1, 8, 16, … 256; default 16, and 64 for an MLA model such as "
                        "DeepSeek-V3 on Hopper, where vLLM's FlashMLA backend forces it)")
    g.add_argument("--num-gpu-blocks", type=SCENARIO_INT, help="override the computed KV block count")
    g.add_argument("--max-num-seqs", type=SCENARIO_INT, help="default: vllm serve's for the GPU")
    g.add_argument("--max-num-batched-tokens", type=SCENARIO_INT, help="default: vllm serve's for the GPU")
    g.add_argument("--vllm-version", choices=list(VLLM_VERSIONS),
                   help="the vLLM release served: its memory profiling sizes the KV cache, and its defaults say "
                        "whether it schedules asynchronously and captures full CUDA graphs for decode: " + "; ".join(
                       f"{k}: {v.label}" for k, v in VLLM_VERSIONS.items())
                        + f" (default: {default_version('vllm-v1')}; {default_version('vllm-v0')} under --engine "
                          "vllm-v0)")
    g.add_argument("--cudagraphs", choices=("counted", "outside"),
                   help="CUDA-graph memory inside the KV budget or outside it (default: as --vllm-version does)")
    g.add_argument("--vllm-log", help="a vLLM startup log: fit the memory overheads (and the GPU's memory) to it")
    for flag, what in (("--activation-gib", "activation peak"), ("--non-torch-gib", "non-torch memory"),
                       ("--cudagraph-gib", "CUDA-graph memory"), ("--weights-gib", "weights per GPU as loaded")):
        g.add_argument(flag, type=NON_NEGATIVE_GIB, help=f"{what} in GiB instead of the estimate")
    g.add_argument("--gpu-memory-gib", type=real("a positive number of GiB", above=0, high=1e6),
                   help="the GPU's memory as CUDA reports it, instead of the preset's")
    g.add_argument("--engine", default="vllm-v1",
                   help="scheduler: vllm-v1 (default), vllm-v0, orca, static, tgi or trtllm")
    g.add_argument("--no-chunked-prefill", action="store_true")
    g.add_argument("--no-prefix-cache", action="store_true",
                   help="vllm-v1: compute every prompt in full (vllm serve --no-enable-prefix-caching); other "
                        "engines never reuse prefixes here")
    lag = g.add_mutually_exclusive_group()
    lag.add_argument("--async-scheduling", action="store_true",
                     help="vllm-v1: fix a step's batch while the step before it runs (vllm serve's default from 0.14, "
                          "opt-in before; default: as --vllm-version does)")
    lag.add_argument("--no-async-scheduling", action="store_true",
                     help="vllm-v1: schedule each step after the previous one ends (vllm serve --no-async-scheduling)")
    g.add_argument("--preemption", default="recompute", help="recompute or swap (vllm-v0 only)")
    g.add_argument("--max-new-tokens", type=SCENARIO_INT, help="truncate outputs (and size reservations) to this")
    g.add_argument("--reserve-predicted", type=FINITE, metavar="Q",
                   help="vllm-v1 remedy: reserve the Q quantile (0.75, 0.95) of a predicted output length")
    g.add_argument("--priority", default="fcfs", help="fcfs or shortest-predicted (vllm-v1 remedy)")
    g.add_argument("--calibration", help="a file written by `calibrate`: the cost model's parameters")
    g.add_argument("--price", type=FINITE, help="USD per GPU-hour (default: the GPU preset's)")


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The validated scenario of the flags :func:`add_scenario_arguments` registered.

    Raises
    ------
    PlannerError
        On the first flag with a value ``vllm serve`` would refuse, naming it.
    """
    from planner.capacity.memory import Overheads
    from planner.capacity.vllm_log import overheads_from_log
    from planner.catalog.gpus import get_gpu
    from planner.catalog.presets import get_model
    from planner.scenario import Scenario
    from planner.sim.calibration_file import load_params

    model, gpu = get_model(args.model), get_gpu(args.gpu)
    if args.price is not None:
        gpu = gpu.with_price(args.price)
    if args.gpu_memory_gib is not None:
        gpu = replace(gpu, memory_bytes=int(round(args.gpu_memory_gib * GiB)))
    overheads = Overheads(cudagraph_counted=None if args.cudagraphs is None else args.cudagraphs == "counted",
                          vllm_version=args.vllm_version)
    if args.vllm_log:
        try:
            text = Path(args.vllm_log).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise PlannerError(f"--vllm-log {args.vllm_log}: cannot read it ({exc.strerror})") from None
        gpu, overheads = overheads_from_log(text, gpu, args.gpu_mem_util, args.vllm_version)
    overheads = overheads.with_entered(**{name: None if value is None else int(round(value * GiB)) for name, value in (
        ("activation_bytes", args.activation_gib), ("non_torch_bytes", args.non_torch_gib),
        ("cudagraph_bytes", args.cudagraph_gib), ("weights_bytes", args.weights_gib))})
    scenario = Scenario(model, gpu, tp=args.tp, weight_dtype=args.weight_dtype, kv_cache_dtype=args.kv_cache_dtype,
                        gpu_memory_utilization=args.gpu_mem_util, max_model_len=args.max_model_len,
                        block_size=args.block_size, num_gpu_blocks=args.num_gpu_blocks, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens, overheads=overheads, engine=args.engine,
                        chunked_prefill=not args.no_chunked_prefill, prefix_caching=not args.no_prefix_cache,
                        async_scheduling=True if args.async_scheduling else False if args.no_async_scheduling else None,
                        preemption=args.preemption, max_new_tokens=args.max_new_tokens,
                        reserve_quantile=args.reserve_predicted,
                        priority=args.priority, cost=load_params(args.calibration))
    if scenario.num_gpu_blocks is not None and scenario.memory.override_warning:
        print(f"warning: {scenario.memory.override_warning}", file=sys.stderr)
    for warning in scenario.calibration_warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return scenario
