"""Recommendation speed: the three default SLO classes, fleet sizing and its bootstrap confidence included, on the
bundled sample and on a 20,000-request synthetic trace; each on two local worker processes and, as the baseline
measured in the same run, on one (in this process), and with ``--ray`` also on a local Ray runtime (goal ≤ 30 s for
the sample on the 2-core project machine; the same answers on every executor). Usage:
python bench/recommend.py [--requests 20000] [--ray]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import get_gpu  # noqa: E402
from planner.catalog.presets import get_model  # noqa: E402
from planner.executors import get_executor  # noqa: E402
from planner.recommend.plan import RecommendOptions, plan_recommendation  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from planner.sim.workload import SimWorkload, synthetic  # noqa: E402
from planner.traces.samples import SAMPLE_PATH  # noqa: E402


def sample() -> SimWorkload:
    """The bundled sample as ``recommend sample_chat`` replays it: ingested into a scratch store, read back."""
    import tempfile

    from planner.traces import store
    from planner.traces.ingest import ingest_file
    from planner.workload.replay import from_trace

    with tempfile.TemporaryDirectory() as tmp:
        con = store.open_store(Path(tmp) / "bench.duckdb")
        ingest_file(con, SAMPLE_PATH, name="sample_chat")
        work = from_trace(con, "sample_chat")
        con.close()
    return work


def timed(work: SimWorkload, executor) -> tuple[float, object]:
    scenario = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), max_model_len=8192)
    started = time.perf_counter()
    rec = plan_recommendation(work, scenario, RecommendOptions(), executor=executor)
    return time.perf_counter() - started, rec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--ray", action="store_true", help="also time a local Ray runtime")
    args = parser.parse_args()
    executors = {"2 workers": get_executor(2), "1": get_executor(1)}
    if args.ray:
        executors["ray local"] = get_executor(ray="local")
    # Azure-conversation-like lengths, bursty arrivals (gamma CV 2) at 3 req/s: ~1.9 hours of traffic
    synthetic_work = synthetic(f"requests={args.requests},input=lognormal:6.633:0.985,output=lognormal:5.019:0.859,"
                               "qps=3,arrival=gamma:2,seed=11")
    for executor in executors.values():       # start the workers and load the compiled loops before timing
        timed(synthetic("requests=200,input=100,output=10,qps=5"), executor)
    for work in (sample(), synthetic_work):
        seconds, recs = {}, {}
        for name, executor in executors.items():
            seconds[name], recs[name] = timed(work, executor)
        rec = recs["2 workers"]
        for name, other in recs.items():
            assert [c.to_dict() for c in rec.classes] == [c.to_dict() for c in other.classes], f"{name} changed answers"
        ray = f", {seconds['ray local']:.1f} s on a local Ray runtime" if "ray local" in seconds else ""
        print(f"{work.source}: {work.n:,} requests, 3 classes with fleet sizing: {seconds['2 workers']:.1f} s on 2 "
              f"workers, {seconds['1']:.1f} s on 1 ({seconds['1'] / seconds['2 workers']:.2f}x){ray}, "
              f"{rec.simulations} simulations (identical answers)")
        for r in rec.classes:
            predicted, f = r.predicted or {}, r.fleet
            print(f"  {r.name:10s} feasible {r.feasible!s:5s} {r.config['max_num_seqs']}/"
                  f"{r.config['max_num_batched_tokens']} {r.max_qps_per_replica:.2f} req/s/replica ({r.verdict}, "
                  f"queue p99 {r.queue_ms['p99']:,.0f} ms) TTFT p99 "
                  f"{predicted.get('ttft_ms', {}).get('p99', float('nan')):,.0f} ms TPOT p99 "
                  f"{predicted.get('tpot_ms', {}).get('p99', float('nan')):.1f} ms; replicas {r.replicas_for_peak}"
                  + (f", {f.confident_replicas} at 90% (held in {f.held_share:.0%}), x{f.growth:g}: "
                     f"{f.growth_replicas}" if f and f.replicas else ""))


if __name__ == "__main__":
    main()
