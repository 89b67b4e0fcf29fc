"""Recommendation speed: the three default SLO classes on a 20,000-request trace; prints the time and the number
of simulations (goal ≤ 30 s on the 2-core project machine). Usage: python bench/recommend.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import get_gpu  # noqa: E402
from planner.catalog.presets import get_model  # noqa: E402
from planner.recommend.search import Search, recommend  # noqa: E402
from planner.recommend.slo import DEFAULT_CLASSES  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from planner.sim.workload import synthetic  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    # Azure-conversation-like lengths, bursty arrivals (gamma CV 2) at 3 req/s: ~1.9 hours of traffic
    work = synthetic(f"requests={args.requests},input=lognormal:6.633:0.985,output=lognormal:5.019:0.859,qps=3,"
                     "arrival=gamma:2,seed=11")
    search = Search(work, Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), max_model_len=8192))
    search.run(256, 2048, 1.0)         # load the compiled loop before timing
    search.cache.clear()
    search.simulations = 0
    started = time.perf_counter()
    rows = recommend(search, DEFAULT_CLASSES)
    seconds = time.perf_counter() - started
    print(f"{work.n:,} requests, 3 classes: {seconds:.1f} s, {search.simulations} simulations "
          f"({seconds / search.simulations * 1e3:.0f} ms each)")
    for r in rows:
        predicted = r.predicted or {}
        print(f"  {r.name:10s} feasible {r.feasible!s:5s} {r.config} qps/replica "
              f"{r.max_qps_per_replica:.2f} replicas {r.replicas_for_peak} TTFT p99 "
              f"{predicted.get('ttft_ms', {}).get('p99', float('nan')):.0f} ms TPOT p99 "
              f"{predicted.get('tpot_ms', {}).get('p99', float('nan')):.1f} ms")


if __name__ == "__main__":
    main()
