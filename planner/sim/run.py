"""simulate(): a pure function of (workload, scenario, fleet) → per-request results (deterministic for a given
input)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from planner.errors import PlannerError
from planner.sim.engines import ENGINES, get_engine
from planner.sim.engines.base import FleetSpec, RawRun
from planner.sim.fleet import ONE, Fleet
from planner.sim.prefix import PrefixIdentity
from planner.sim.results import SimResult
from planner.sim.routers import DEFAULT_ROUTER, get_router
from planner.sim.workload import SimWorkload

if TYPE_CHECKING:
    from planner.scenario import Scenario


def simulate(workload: SimWorkload, scenario: Scenario, *, fleet: Fleet = ONE, abort_wait_s: float = float("inf"),
             progress: Callable[[float, str], None] | None = None) -> SimResult:
    """Replay ``workload`` through ``fleet.replicas`` copies of the scenario's engine behind ``fleet.router``, each
    on the scenario's GPUs with its memory plan and cost model, on one clock.

    Outputs are cut at ``max_new_tokens`` and at ``max_model_len − prompt``; a prompt that does not fit
    ``max_model_len`` is rejected, as vLLM rejects it. ``abort_wait_s`` lets the vllm-v1 loop stop once a request
    has waited that long (a search's pruning: such a run already fails every class).
    """
    eng = get_engine(scenario.engine)
    router = get_router(fleet.router)
    if fleet.replicas > 1:
        check_router(eng.name, router.name)
    settings = scenario.settings
    if abort_wait_s != settings.abort_wait_s:
        settings = replace(settings, abort_wait_s=abort_wait_s)
    final = engine_workload(workload, settings)
    work, prompt, output = final, final.input_tokens, final.output_tokens
    too_long = prompt >= settings.max_model_len
    coeffs = scenario.coefficients.as_tuple()
    if progress:
        progress(0.0, f"simulating {work.n:,} requests with {eng.label}"
                      + (f" on {fleet.replicas} replicas ({router.name})" if fleet.replicas > 1 else ""))
    started = time.perf_counter()
    keep = ~too_long
    check_work(prompt[keep], output[keep], settings, fleet.replicas)
    log_every = max(1, work.n // 200)
    args = (work.arrival_s[keep], prompt[keep], output[keep], settings, coeffs, log_every)
    if eng.fleet_loop:
        group = work.group[keep] if work.group is not None else np.full(int(keep.sum()), -1, np.int64)
        identity = work.prefix.subset(keep) if work.prefix is not None else None
        spec = FleetSpec(fleet.replicas, router.code, group, int(group.max(initial=-1)) + 1, identity)
        raw = interruptible(eng.run, *args, spec)
        if identity is None and raw.preemptions.any() and eng.caches_prefixes(settings):
            # with nothing shared the cache only matters to a preempted request, which finds its own freed blocks
            # again (vLLM V1 keeps them cached until evicted): replayed with its own keys only then, as a run
            # without preemptions is the same either way and the keyed pool costs about 3x the time
            spec = replace(spec, identity=PrefixIdentity.unshared(int(keep.sum())))
            raw = interruptible(eng.run, *args, spec)
    else:
        raw = interruptible(_round_robin, eng, args, fleet.replicas)
    if fleet.replicas > 1:     # replicas log at their own step ends, which interleave out of order by a step
        raw = replace(raw, timeline=raw.timeline[np.argsort(raw.timeline[:, 0], kind="stable")])
    wall = time.perf_counter() - started
    if progress:
        progress(1.0, f"{raw.steps:,} steps in {wall:.2f} s")

    def full(values, fill):
        out = np.full(work.n, fill, dtype=np.asarray(values).dtype)
        out[keep] = values
        return out
    rejected = full(raw.rejected, True)
    rejected[too_long] = True
    cached = eng.caches_prefixes(settings)      # its loop then counts hits
    # what the client sees: the engine's times plus the frontend's (vLLM V1's API server, a process of its own)
    client_s = scenario.cost.frontend_s if eng.v1_runtime else 0.0
    return SimResult(scenario, final, full(raw.first_token + client_s, np.nan), full(raw.finish + client_s, np.nan),
                     full(raw.first_scheduled, np.nan), full(raw.preemptions, 0), rejected, too_long, raw.steps,
                     raw.timeline, wall, full(raw.generated, 0), raw.free_blocks_at_end, full(raw.replica, -1),
                     fleet, full(raw.hits, 0) if cached else None, full(raw.rehits, 0) if cached else None)


# engine steps a replay may need at the least: at the compiled loop's 10-20 million steps a second, a few
# minutes; beyond it a replay is refused up front rather than left to run for hours
MAX_STEPS = 2 * 10**9


def check_work(prompt: np.ndarray, output: np.ndarray, settings, replicas: int) -> None:
    """Refuse a replay whose fewest possible engine steps exceed :data:`MAX_STEPS`: every output token but the
    first takes a decode step, at most ``max_num_seqs`` of them a step per replica, and every prompt token a
    prefill slot, at most ``max_num_batched_tokens`` a step.

    Raises
    ------
    PlannerError
        Naming the bound and what to change.
    """
    decode_steps = float(np.maximum(output - 1, 0).sum()) / (settings.max_num_seqs * replicas)
    prefill_steps = float(prompt.sum()) / (settings.max_num_batched_tokens * replicas)
    fewest = max(decode_steps, prefill_steps)
    if fewest > MAX_STEPS:
        raise PlannerError(f"this replay needs at least {fewest:,.0f} engine steps ({prompt.size:,} requests, "
                           f"{float(output.sum()):,.0f} output tokens on {replicas} replica(s) of max_num_seqs "
                           f"{settings.max_num_seqs}); expected at most {MAX_STEPS:,}: replay fewer requests, or "
                           "raise --max-num-seqs or --replicas")


def interruptible(fn, *args):
    """``fn(*args)`` (a compiled loop, which releases the GIL and never returns to the interpreter until it ends)
    on a helper thread, the calling thread waiting in Python: Ctrl-C raises KeyboardInterrupt at once, and the
    loop's daemon thread ends with the process. Off the main thread (a search's workers) it simply runs."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:     # re-raised in the caller's thread
            box["error"] = exc
    worker = threading.Thread(target=target, name="planner-sim", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]


def default_router(engine: str) -> str:
    """The router a fleet of ``engine`` gets unless one is chosen: least-loaded, or round-robin for an engine
    whose loop runs one replica."""
    return DEFAULT_ROUTER if get_engine(engine).fleet_loop else "round-robin"


def engine_workload(workload: SimWorkload, settings) -> SimWorkload:
    """The workload as the engine takes it (a result's ``workload``): whole-token lengths, outputs cut at
    ``max_new_tokens`` and at ``max_model_len − prompt``."""
    work = workload.truncated(settings.max_new_tokens)
    prompt = work.input_tokens.astype(np.int64)
    output = np.minimum(work.output_tokens, np.maximum(settings.max_model_len - prompt, 1)).astype(np.int64)
    return SimWorkload(work.arrival_s, prompt, output, work.source, work.group, work.prefix)


def _simulate_detached(workload: SimWorkload, scenario: Scenario, **kwargs) -> SimResult:
    # the caller holds the workload: a result travels back without it (a third of its bytes)
    return replace(simulate(workload, scenario, **kwargs), workload=None)


def simulate_on(executor, workload: SimWorkload, scenario: Scenario, **kwargs) -> SimResult:
    """:func:`simulate` run on an executor (:mod:`planner.executors`), the same result as run here."""
    result = executor.submit(_simulate_detached, workload, scenario, **kwargs).result()
    return replace(result, workload=engine_workload(workload, scenario.settings))


def check_router(engine: str, router: str) -> None:
    """Refuse a state-reading router for an engine whose loop runs one replica (its fleet is split round-robin)."""
    if not get_engine(engine).fleet_loop and get_router(router).uses_state:
        fleet_engines = ", ".join(name for name, e in ENGINES.items() if e.fleet_loop)
        raise PlannerError(f"--router {router} with --engine {engine}: its loop runs one replica, so a fleet of it "
                           f"can only be routed round-robin (or use --engine {fleet_engines})")


def _round_robin(eng, args: tuple, replicas: int) -> RawRun:
    """A fleet of an engine whose loop runs one replica: request i on replica i mod N, each replica its own
    replay. Round-robin reads no replica state, so this is the fleet on one clock exactly. The timeline is
    replica 1's."""
    arrival, prompt, output, *rest = args
    n = arrival.shape[0]
    parts = [np.arange(k, n, replicas) for k in range(replicas)]
    runs = [eng.run(arrival[idx], prompt[idx], output[idx], *rest) for idx in parts]
    merged = {}
    for name in ("first_token", "finish", "first_scheduled", "preemptions", "rejected", "generated"):
        merged[name] = np.empty(n, dtype=getattr(runs[0], name).dtype)
        for idx, run in zip(parts, runs, strict=True):
            merged[name][idx] = getattr(run, name)
    replica = np.arange(n, dtype=np.int64) % replicas
    return RawRun(steps=sum(r.steps for r in runs), timeline=runs[0].timeline,
                  free_blocks_at_end=sum(r.free_blocks_at_end for r in runs), replica=replica, **merged)
