"""vLLM V1's prefix cache in the simulator: speed on a Mooncake-conversation-like load, and what the cache is worth.

The load has Mooncake's conversation trace shape (kvcache-ai/Mooncake FAST25-release, reference/workloads.md: prompts
averaging about 12k tokens, outputs about 340, hash ids per 512-token block, roughly a third of prompt tokens
reusable): sessions whose turns resend the conversation (system prompt, earlier messages and answers), system
prompts shared across sessions by Zipf popularity, Poisson arrivals at about 75% of the cached capacity. Prints
simulated requests per wall-clock second with caching on (goal ≥ 100,000 on one core) against the same run with it
off (measured in the same process), the hit rate against the reuse analysis' ideal, TTFT with and without the cache,
a fleet of 8 behind the prefix-aware router at eight times the rate, the reference loop's agreement and speed on
a prefix, and the reuse analysis' time. Usage:
    python bench/prefix_cache.py [--requests 20000] [--write trace.jsonl]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import get_gpu  # noqa: E402
from planner.catalog.presets import get_model  # noqa: E402
from planner.limits import MOONCAKE_BLOCK_TOKENS  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from planner.sim.engines import ENGINES  # noqa: E402
from planner.sim.engines.base import FleetSpec  # noqa: E402
from planner.sim.fleet import Fleet  # noqa: E402
from planner.sim.reference import run_reference  # noqa: E402
from planner.sim.results import summarize  # noqa: E402
from planner.sim.run import simulate  # noqa: E402
from planner.sim.workload import SimWorkload, poisson_or_gamma, sorted_workload  # noqa: E402
from planner.workload.reuse import workload_reuse  # noqa: E402


def mooncake_like(n: int, qps: float, seed: int = 0, max_prompt: int = 30_000, new_session: float = 0.9,
                  message_mu: float = 8.75) -> tuple[SimWorkload, list]:
    """``n`` requests in sessions, with Mooncake-style chained hash ids; returns the workload and its rows. A request
    opens a new session with probability ``new_session``; messages are lognormal(``message_mu``, 1) tokens. The
    defaults give prompts of ~13.3k tokens on average, outputs of ~335 and an ideal hit rate of ~39% (Mooncake's
    conversation trace: 12.0k, 343 and 37.4%, reference/prefix-cache-and-routing.md §2)."""
    rng = np.random.default_rng(seed)
    system = np.rint(rng.lognormal(7.6, 0.6, 40)).astype(int)        # 40 system prompts, ~2.4k tokens
    popularity = 1.0 / np.arange(1, system.size + 1)
    popularity /= popularity.sum()
    ids: dict[tuple, int] = {}
    rows, piece = [], 0
    live: list[dict] = []               # open sessions: their pieces (id, tokens) so far
    while len(rows) < n:
        if not live or rng.random() < new_session:
            s = int(rng.choice(system.size, p=popularity))
            live.append({"pieces": [(-1 - s, int(system[s]))], "turns": 0})
        session = live[int(rng.integers(len(live)))]
        piece += 1
        session["pieces"].append((piece, int(np.clip(rng.lognormal(message_mu, 1.0), 16, 20_000))))   # the new message
        prompt = sum(t for _, t in session["pieces"])
        output = int(np.clip(rng.lognormal(5.5, 0.8), 1, 2000))
        if prompt > max_prompt:
            live.remove(session)
            continue
        rows.append({"input_length": prompt, "output_length": output,
                     "hash_ids": _chained_ids(session["pieces"], prompt, ids)})
        piece += 1
        session["pieces"].append((piece, output))                    # the answer joins the conversation
        session["turns"] += 1
        if rng.random() < 0.3:
            live.remove(session)
    arrival = poisson_or_gamma(n, qps, rng)
    for row, t in zip(rows, arrival, strict=True):
        row["timestamp"] = int(t * 1e3)
    work = sorted_workload(arrival, [r["input_length"] for r in rows], [r["output_length"] for r in rows],
                           f"mooncake-conversation-like at {qps:.2f} req/s", hash_ids=[r["hash_ids"] for r in rows])
    return work, rows


def _chained_ids(pieces: list[tuple[int, int]], length: int, ids: dict) -> list[int]:
    """One id per 512-token block of the first ``length`` tokens, each fixing the prefix before it (equal ids:
    equal prefixes), as Mooncake's remapped prefix hashes do."""
    out, previous, start, cursor, segments = [], -1, 0, 0, []
    for pid, tokens in pieces:
        segments.append((pid, cursor, cursor + tokens))
        cursor += tokens
    while start < length:
        end = min(start + MOONCAKE_BLOCK_TOKENS, length)
        content = tuple((pid, max(a, start) - a, min(b, end) - a) for pid, a, b in segments if a < end and b > start)
        previous = ids.setdefault((previous, content), len(ids))
        out.append(previous)
        start = end
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--reference-requests", type=int, default=600)
    parser.add_argument("--write", help="also write the load as Mooncake JSONL here")
    args = parser.parse_args()
    scenario = Scenario(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), max_model_len=32_768)
    offline, _ = mooncake_like(3_000, float("inf"), seed=3)
    capacity = summarize(simulate(offline, scenario)).completion_rate_rps
    qps = 0.75 * capacity
    work, rows = mooncake_like(args.requests, qps, seed=1)
    if args.write:
        Path(args.write).write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the generator's millions of Python objects (its rows and id table) would otherwise be walked by the garbage
    # collections the timed replays trigger: the bench times the simulator, not this script's leftovers
    del rows
    gc.collect()
    gc.freeze()
    prompt = work.input_tokens
    print(f"load: {work.n:,} requests, prompt mean {prompt.mean():,.0f} (p50 {np.median(prompt):,.0f}), output mean "
          f"{work.output_tokens.mean():,.0f}; cached capacity {capacity:.2f} req/s offline, replay at {qps:.2f}")
    started = time.perf_counter()
    reuse = workload_reuse(work, scenario.block_size)
    print(f"reuse analysis: ideal hit rate {reuse.ideal_hit_rate:.1%}, working set {reuse.working_set_tokens:,} "
          f"tokens, LRU at the pool ({scenario.memory.kv_capacity_tokens:,} tokens) "
          f"{reuse.hit_rate_at(scenario.memory.kv_capacity_tokens):.1%}; {time.perf_counter() - started:.2f} s")
    simulate(work, scenario)                    # compiled code loaded and warm
    on = simulate(work, scenario)
    off = simulate(work, scenario.replace(prefix_caching=False))
    s_on, s_off = summarize(on), summarize(off)
    rate_on, rate_off = work.n / on.sim_wall_s, work.n / off.sim_wall_s
    print(f"cache on:  {rate_on:,.0f} simulated requests/s ({on.steps:,} steps in {on.sim_wall_s:.3f} s); hit rate "
          f"{s_on.prefix_cache['hit_rate']:.1%}; TTFT p50/p99 {s_on.ttft_ms.p50:,.0f}/{s_on.ttft_ms.p99:,.0f} ms; "
          f"queue {s_on.verdict}")
    print(f"cache off: {rate_off:,.0f} simulated requests/s ({off.steps:,} steps in {off.sim_wall_s:.3f} s); TTFT "
          f"p50/p99 {s_off.ttft_ms.p50:,.0f}/{s_off.ttft_ms.p99:,.0f} ms; queue {s_off.verdict}")
    print(f"ratio: {rate_off / rate_on:.2f}x the wall time per simulated request of caching off (which overloads "
          "at these arrivals, so its steps differ)" if s_off.verdict != "stable" else
          f"ratio: {rate_off / rate_on:.2f}x the wall time per simulated request of caching off")
    uncached = scenario.replace(prefix_caching=False)
    own = 0.75 * summarize(simulate(offline, uncached)).completion_rate_rps
    slow, _ = mooncake_like(args.requests, own, seed=1)
    base = simulate(slow, uncached)
    print(f"cache off at 75% of its own capacity ({own:.2f} req/s): {slow.n / base.sim_wall_s:,.0f} simulated "
          f"requests/s ({base.steps:,} steps in {base.sim_wall_s:.3f} s); queue {summarize(base).verdict}")
    fleet_work, _ = mooncake_like(args.requests, 8 * qps, seed=1)
    fleet = simulate(fleet_work, scenario, fleet=Fleet(8, "prefix-aware"))
    print(f"fleet of 8 (prefix-aware) at {8 * qps:.2f} req/s: {fleet_work.n / fleet.sim_wall_s:,.0f} simulated "
          f"requests/s ({fleet.steps:,} steps in {fleet.sim_wall_s:.3f} s); hit rate "
          f"{summarize(fleet).prefix_cache['hit_rate']:.1%}")
    part = work.subset(np.arange(work.n) < args.reference_requests)
    cfg, coeffs = scenario.settings, scenario.coefficients.as_tuple()
    started = time.perf_counter()
    ref = run_reference(part.arrival_s, part.input_tokens, part.output_tokens, cfg, coeffs,
                        part.prefix.runs(part.input_tokens + part.output_tokens, cfg.block_size))
    ref_s = time.perf_counter() - started
    started = time.perf_counter()
    fast = ENGINES["vllm-v1"].run(part.arrival_s, part.input_tokens, part.output_tokens, cfg, coeffs, 1,
                                  FleetSpec(1, 0, np.full(part.n, -1, np.int64), 0, part.prefix))
    fast_s = time.perf_counter() - started
    assert np.array_equal(ref.finish, fast.finish) and np.array_equal(ref.hits, fast.hits), "loops disagree"
    print(f"reference loop with caching: {part.n:,} requests in {ref_s:.2f} s; compiled {fast_s:.4f} s; speedup "
          f"{ref_s / fast_s:,.0f}x (identical times and hits: {int(fast.hits.sum()):,} hit tokens)")


if __name__ == "__main__":
    main()
