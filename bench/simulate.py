"""Simulator speed: 100,000 requests with Azure-conversation-like lengths at about 75% load through vLLM V1.

Prints simulated requests per wall-clock second (goal ≥ 100,000 on one core) and the speedup over the reference
loop (planner/sim/reference.py) measured in the same run on a prefix of the same workload; then a 16-replica fleet
behind each router at 16× the rate (goal ≥ 100,000 simulated requests per wall second on one core). Usage:
    python bench/simulate.py [--requests 100000] [--fleet-requests 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import get_gpu  # noqa: E402
from planner.catalog.presets import get_model  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from planner.sim.engines import ENGINES  # noqa: E402
from planner.sim.fleet import Fleet  # noqa: E402
from planner.sim.reference import run_reference  # noqa: E402
from planner.sim.results import summarize  # noqa: E402
from planner.sim.routers import ROUTERS  # noqa: E402
from planner.sim.run import simulate  # noqa: E402
from planner.sim.workload import SimWorkload, poisson_or_gamma  # noqa: E402


def azure_conv_like(n: int, qps: float, seed: int = 0) -> SimWorkload:
    """Lognormal lengths with Azure conv's log-moments (reference/workloads.md §3: input μ 6.633 σ 0.985, output
    μ 5.019 σ 0.859), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    inputs = np.clip(np.rint(rng.lognormal(6.633, 0.985, n)), 1, 8000).astype(np.int64)
    outputs = np.clip(np.rint(rng.lognormal(5.019, 0.859, n)), 1, 1000).astype(np.int64)
    return SimWorkload(poisson_or_gamma(n, qps, rng), inputs, outputs, f"azure-conv-like at {qps:.2f} req/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--reference-requests", type=int, default=3_000)
    parser.add_argument("--fleet-requests", type=int, default=200_000)
    args = parser.parse_args()
    scenario = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), max_model_len=8192)
    cfg = scenario.settings
    capacity = summarize(simulate(azure_conv_like(5_000, float("inf")), scenario)).completion_rate_rps
    qps = 0.75 * capacity
    work = azure_conv_like(args.requests, qps, seed=1)
    result = simulate(work, scenario)            # warm: compiled code already loaded above
    summary = summarize(result)
    rate = work.n / result.sim_wall_s
    print(f"capacity (offline) {capacity:.2f} req/s; replay at {qps:.2f} req/s (75%)")
    print(f"fast: {work.n:,} requests, {result.steps:,} steps in {result.sim_wall_s:.3f} s wall = {rate:,.0f} "
          f"simulated requests/s; TTFT p99 {summary.ttft_ms.p99:.0f} ms, TPOT p99 "
          f"{summary.tpot_ms.p99:.1f} ms, saturated {summary.saturated}")
    prefix = azure_conv_like(args.reference_requests, qps, seed=1)
    coeffs = scenario.coefficients.as_tuple()
    started = time.perf_counter()
    ref = run_reference(prefix.arrival_s, prefix.input_tokens, prefix.output_tokens, cfg, coeffs)
    ref_s = time.perf_counter() - started
    started = time.perf_counter()
    fast = ENGINES["vllm-v1"].run(prefix.arrival_s, prefix.input_tokens, prefix.output_tokens, cfg, coeffs)
    fast_s = time.perf_counter() - started
    assert np.array_equal(ref.finish, fast.finish), "fast and reference loops disagree"
    print(f"reference loop: {prefix.n:,} requests in {ref_s:.2f} s = {prefix.n / ref_s:,.0f} requests/s; fast on the "
          f"same prefix {fast_s:.4f} s; speedup {ref_s / fast_s:,.0f}x (identical results)")
    sessions(work, scenario)
    fleet(args.fleet_requests, qps, rate, scenario)


def fleet(n: int, qps: float, single_rate: float, scenario: Scenario, replicas: int = 16) -> None:
    """A 16-replica fleet on one clock, each replica at the single run's load (goal ≥ 100,000 simulated requests
    per wall second on one core); the ratio is against the single replica's rate measured above."""
    work = azure_conv_like(n, qps * replicas, seed=2)
    for router in ROUTERS:
        result = simulate(work, scenario, fleet=Fleet(replicas, router))
        summary = summarize(result)
        rate = work.n / result.sim_wall_s
        shares = np.bincount(result.replica[result.replica >= 0], minlength=replicas)
        print(f"fleet of {replicas} ({router}): {work.n:,} requests, {result.steps:,} steps in "
              f"{result.sim_wall_s:.3f} s = {rate:,.0f} simulated requests/s ({rate / single_rate:.2f}x one "
              f"replica's rate); TTFT p99 {summary.ttft_ms.p99:.0f} ms, TPOT p99 {summary.tpot_ms.p99:.1f} ms, "
              f"queue {summary.verdict}; requests per replica {shares.min():,}–{shares.max():,}")


def sessions(work: SimWorkload, scenario: Scenario, count: int = 2) -> None:
    """Several app sessions simulating at once: the compiled loops release the GIL, so they overlap on cores."""
    started = time.perf_counter()
    for _ in range(count):
        simulate(work, scenario)
    one_by_one = time.perf_counter() - started
    threads = [threading.Thread(target=simulate, args=(work, scenario)) for _ in range(count)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = time.perf_counter() - started
    print(f"{count} sessions at once: {together:.3f} s vs {one_by_one:.3f} s one after another "
          f"({one_by_one / together:.2f}x on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
