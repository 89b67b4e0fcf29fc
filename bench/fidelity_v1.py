"""Fidelity against vLLM V1 (v0.15.1, H100 SXM): seven published runs replayed request by request.

Data: inference-sim/training (github.com/inference-sim/training) commit c4f03409 (``replay_data/`` holds every
request's arrival, prompt length, TTFT and E2E; ``default_args/`` the runs' configs and inference-perf summaries).
It carries no license, so it is read from a clone, never copied here: ``git clone
https://github.com/inference-sim/training`` (the commit is in its history; ``replay_data/`` was deleted by the
next one) and pass the clone with ``--training``. The seven runs: CodeLlama-34B TP2, Llama-2-70B TP4, Mixtral-8x7B
TP2; ``max_num_seqs`` 128, ``max_num_batched_tokens`` 2048, ``max_model_len`` 4096, ``gpu_memory_utilization``
0.9 (the sim-to-real study's manifest); chunked prefill and prefix caching on (V1's defaults). The rest of that
study is held out: nothing here reads it.

The workload: 100 prompts (``index mod 100``, send-order swaps within ±3 repaired by length), cycled, so after
the first cycle every prompt is cached, and in it ten groups of ten share a system prompt; outputs exactly
``output_len`` tokens (``ignore_eos``; the recorded ``output_tokens`` re-tokenizes the streamed text and is noisy).
TPOT is ``(mean E2E − mean TTFT) / (output − 1)``.

Two model states: the defaults (nothing fitted), and calibrated on stage 0 of each two-stage run (``calibrate
--trace``'s fit: MFU, MBU) then predicting its stage 1. Prints per-stage absolute % errors of TTFT mean/p99, TPOT,
E2E mean/p99, their medians, the KV blocks predicted against those the server reported, and which runs are
predicted overloaded; then the verdict on the servers issue 15 names as held (:data:`HELD_SERVERS`).
Usage: python bench/fidelity_v1.py --training PATH [--runs ID ...]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.capacity.memory import Overheads  # noqa: E402
from planner.catalog.gpus import get_gpu  # noqa: E402
from planner.catalog.presets import get_model  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from planner.sim.calibration_file import params_from_report  # noqa: E402
from planner.sim.pool_margin import pool_margin, queue_holds  # noqa: E402
from planner.sim.prefix import PrefixIdentity  # noqa: E402
from planner.sim.results import summarize  # noqa: E402
from planner.sim.run import simulate  # noqa: E402
from planner.sim.trace_calibration import fit_trace  # noqa: E402
from planner.sim.workload import SimWorkload  # noqa: E402

DATA_COMMIT = "c4f03409b4489891482bcd63797cfe3a92fc262d"
# run id: (experiment directory, planner preset, TP); the sim-to-real study's experiments 2, 3, 6, 7, 9, 10, 11
RUNS = {
    "codellama34b-tp2-codegen": ("20260218-150956-codellama-34b-tp2-codegen", "codellama-34b", 2),
    "codellama34b-tp2-roleplay": ("20260218-155500-codellama-34b-tp2-roleplay", "codellama-34b", 2),
    "llama2-70b-tp4-codegen": ("20260217-203421-llama-2-70b-hf-tp4-codegen", "llama-2-70b", 4),
    "llama2-70b-tp4-roleplay": ("20260218-084319-llama-2-70b-tp4-roleplay", "llama-2-70b", 4),
    "mixtral8x7b-tp2-general": ("20260218-130541-mixtral-8x7b-v0-1-tp2-general", "mixtral-8x7b", 2),
    "mixtral8x7b-tp2-codegen": ("20260218-120914-mixtral-8x7b-v0-1-tp2-codegen", "mixtral-8x7b", 2),
    "mixtral8x7b-tp2-roleplay": ("20260218-141024-mixtral-8x7b-v0-1-tp2-roleplay", "mixtral-8x7b", 2),
}
PROMPTS = 100         # inference-perf's shared-prefix generator: 10 groups × 10 prompts, shuffled once, cycled
GROUPS = 10
SWAP_WINDOW = 3       # send order differs from dispatch order by swaps of at most 3 places (224 client workers)
METRICS = ("ttft_mean", "ttft_p99", "tpot", "e2e_mean", "e2e_p99")
# The servers issue 15 names as held (TTFT means of 62-425 ms) where the planner once predicted overload: (model
# preset, GPU, TP, req/s). Nothing of those runs is read; only the verdict on the development runs' prompts is checked.
HELD_SERVERS = (("mixtral-8x7b", "h100-sxm", 2, 20.0), ("mixtral-8x22b", "h100-sxm", 8, 20.0),
                ("qwen3-14b", "h100-sxm", 1, 20.0), ("qwen3-14b", "l40s", 1, 6.0),
                ("codellama-34b", "a100-80gb-sxm", 2, 6.0), ("llama-2-70b", "a100-80gb-sxm", 4, 6.0))


@dataclass(frozen=True)
class Run:
    """One published run: its requests (with their prompt identity), measured latencies and stages."""

    run_id: str
    work: SimWorkload
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    stage: np.ndarray
    rates: tuple[float, ...]
    scenario: Scenario
    logged_blocks: int


def _show(repo: Path, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{DATA_COMMIT}:{path}"], check=True,
                          capture_output=True).stdout


def prompt_ids(lengths: np.ndarray) -> np.ndarray:
    """Each request's prompt (0 … 99): its place in the cycle, where a swapped neighbour's length says the client
    sent two requests out of order (the nearest position within ``SWAP_WINDOW`` whose prompt has this length)."""
    n = lengths.size
    ids = np.arange(n) % PROMPTS
    length_of = [collections.Counter(lengths[k::PROMPTS].tolist()).most_common(1)[0][0] for k in range(PROMPTS)]
    for i in np.flatnonzero(lengths != np.array(length_of)[ids]):
        near = [j for j in range(max(0, i - SWAP_WINDOW), min(n, i + SWAP_WINDOW + 1))
                if j != i and length_of[j % PROMPTS] == lengths[i]]
        mutual = [j for j in near if lengths[j] == length_of[i % PROMPTS]]
        if near:
            ids[i] = min(mutual or near, key=lambda j: abs(j - i)) % PROMPTS
    return ids


def identity(ids: np.ndarray, prompt: np.ndarray, system_tokens: int) -> PrefixIdentity:
    """Which tokens repeat: a prompt seen before is the same tokens (the whole prompt shared with its last
    occurrence); a prompt's first occurrence shares its group's system prompt. inference-perf's generator builds
    10 groups of 10 prompts, each group's prompts opening with the same ``system_tokens`` random tokens, then
    shuffles them, so which prompts share one is lost: ``prompt_id mod 10`` stands for it (the same count of
    first-cycle hits, on other prompts)."""
    n = ids.size
    parent, shared = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    last: dict[int, int] = {}
    for r, p in enumerate(ids.tolist()):
        if p in last:
            parent[r], shared[r] = last[p], prompt[r]
        else:
            parent[r], shared[r] = n + p % GROUPS, min(system_tokens, int(prompt[r]))
        last[p] = r
    return PrefixIdentity("hash_ids", parent, shared, np.full(GROUPS, system_tokens, np.int64),
                          f"{PROMPTS} prompts cycled, {GROUPS} system prompts of {system_tokens} tokens")


def load(repo: Path, run_id: str) -> Run:
    """The run's requests from the clone at ``DATA_COMMIT``, and the server it ran on as a scenario."""
    directory, preset, tp = RUNS[run_id]
    replay = json.loads(_show(repo, f"replay_data/{directory}.json"))
    truth = json.loads(_show(repo, f"replay_data/{directory}_ground_truth.json"))
    profile = json.loads(_show(repo, f"default_args/{directory}/profile.yaml"))
    requests = replay["requests"]
    assert [r["index"] for r in requests] == [t["index"] for t in truth] == list(range(len(requests)))
    assert not any(r["has_error"] or t["has_error"] for r, t in zip(requests, truth, strict=True))
    arrival = np.array([r["arrival_time_us"] for r in requests], float) / 1e6
    prompt = np.array([r["input_tokens"] for r in requests], np.int64)
    output = np.full(prompt.size, int(profile["data"]["shared_prefix"]["output_len"]), np.int64)
    stages = profile["load"]["stages"]
    counts = [int(s["rate"] * s["duration"]) for s in stages]
    assert sum(counts) == prompt.size, (counts, prompt.size)
    shared = profile["data"]["shared_prefix"]
    work = SimWorkload(arrival, prompt, output, run_id,
                       prefix=identity(prompt_ids(prompt), prompt, int(shared["system_prompt_len"])))
    config = replay["config"]
    assert (config["tensor_parallelism"], config["max_num_seqs"], config["max_num_batched_tokens"]) == (tp, 128, 2048)
    scenario = Scenario(get_model(preset), get_gpu("h100-sxm"), tp=tp, gpu_memory_utilization=0.9,
                        max_model_len=4096, max_num_seqs=128, max_num_batched_tokens=2048,
                        overheads=Overheads(vllm_version="0.15"))
    return Run(run_id, work, np.array([t["ttft_s"] for t in truth]), np.array([t["e2e_s"] for t in truth]),
               np.repeat(np.arange(len(counts)), counts), tuple(float(s["rate"]) for s in stages), scenario,
               int(config["kv_blocks_total_gpu"]))


def metrics(ttft_s: np.ndarray, e2e_s: np.ndarray, output_tokens: np.ndarray) -> dict[str, float]:
    """TTFT mean/p99, TPOT (mean E2E − mean TTFT over mean output − 1), E2E mean/p99, in ms."""
    ttft, e2e = ttft_s * 1e3, e2e_s * 1e3
    return {"ttft_mean": float(ttft.mean()), "ttft_p99": float(np.percentile(ttft, 99)),
            "tpot": float((e2e.mean() - ttft.mean()) / (output_tokens.mean() - 1)),
            "e2e_mean": float(e2e.mean()), "e2e_p99": float(np.percentile(e2e, 99))}


def compare(run: Run, scenario: Scenario, stages: tuple[int, ...]) -> list[dict]:
    """Predicted against measured, per stage, the whole run replayed in ``scenario`` (stages back to back, as the
    client sent them)."""
    result = simulate(run.work, scenario)
    verdict = summarize(result).verdict
    rows = []
    for k in stages:
        part = run.stage == k
        measured = metrics(run.ttft_s[part], run.e2e_s[part], run.work.output_tokens[part])
        predicted = metrics(result.ttft_s[part], result.e2e_s[part], run.work.output_tokens[part])
        rows.append({"run": run.run_id, "stage": k, "rate": run.rates[k], "verdict": verdict,
                     "measured": measured, "predicted": predicted,
                     "error": {m: predicted[m] / measured[m] - 1 for m in METRICS}})
    return rows


def calibrated(run: Run) -> Scenario:
    """The scenario with MFU and MBU fitted to stage 0's TTFT and TPOT (``calibrate --trace``)."""
    first = run.stage == 0
    work = run.work.subset(first)
    tpot = (run.e2e_s[first] - run.ttft_s[first]) / (work.output_tokens - 1)
    report = fit_trace(run.scenario, work, run.ttft_s[first], tpot)
    return run.scenario.replace(cost=params_from_report(report, run.scenario, "stage 0"))


def held_servers(runs: list[Run], seed: int = 0) -> list[dict]:
    """The verdict and TTFT mean on each of :data:`HELD_SERVERS`, for each workload among ``runs`` (its requests
    and prompt identity, arrivals redrawn as Poisson at the server's rate): a check that the defaults do not call
    overloaded what the issue says held, not a fidelity figure (other models' tokenizers, unknown batch budgets)."""
    workloads = {run.run_id.rsplit("-", 1)[1]: run for run in runs}
    rows = []
    for model, gpu, tp, rate in HELD_SERVERS:
        spec = get_model(model)
        for kind, run in workloads.items():
            arrival = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, run.work.n))
            work = SimWorkload(arrival, run.work.input_tokens, run.work.output_tokens, kind, prefix=run.work.prefix)
            scenario = run.scenario.replace(model=spec, gpu=get_gpu(gpu), tp=tp)
            result = simulate(work, scenario)
            margin = pool_margin(work, scenario, holds=queue_holds(result))
            rows.append({"model": spec.name, "gpu": gpu, "tp": tp, "rate": rate, "workload": kind,
                         "verdict": summarize(result).verdict, "ttft_mean_ms": float(result.ttft_s.mean() * 1e3),
                         "ttft_p99_ms": float(np.percentile(result.ttft_s, 99) * 1e3),
                         "kv_margin": margin.to_dict()})
    return rows


def _edge(margin: dict) -> str:
    if margin["edge_blocks"] is None:
        lo, hi = margin["searched_blocks"]
        return f"none in {lo:,}-{hi:,}"
    return f"{margin['edge_blocks']:,} ({margin['change']:+.0%})"


def _table(rows: list[dict], title: str) -> None:
    print(f"\n{title}")
    print(f"{'run':28s} {'stage':>5s} {'rate':>5s} " + " ".join(f"{m:>22s}" for m in METRICS) + "  verdict")
    for r in rows:
        cells = " ".join(f"{r['predicted'][m]:.1f}/{r['measured'][m]:.1f} {r['error'][m]:+.0%}".rjust(22)
                         for m in METRICS)
        print(f"{r['run']:28s} {r['stage']:5d} {r['rate']:5.0f} {cells}  {r['verdict']}")
    medians = {m: float(np.median([abs(r["error"][m]) for r in rows])) for m in METRICS}
    print("median |error|: " + ", ".join(f"{m} {v:.1%}" for m, v in medians.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--training", default=os.environ.get("INFSIM_TRAINING"),
                        help="a clone of github.com/inference-sim/training (or set INFSIM_TRAINING)")
    parser.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--no-calibration", action="store_true", help="only the defaults")
    parser.add_argument("--json", help="also write every row here")
    args = parser.parse_args()
    if not args.training or not Path(args.training).exists():
        sys.exit("error: --training: expected a clone of https://github.com/inference-sim/training (its data has "
                 "no license, so it is not bundled): git clone https://github.com/inference-sim/training")
    runs = [load(Path(args.training), r) for r in args.runs]
    print(f"{'run':28s} {'KV blocks predicted':>20s} {'reported':>9s} {'error':>7s}")
    for run in runs:
        blocks = run.scenario.settings.num_blocks
        print(f"{run.run_id:28s} {blocks:>20,d} {run.logged_blocks:>9,d} {blocks / run.logged_blocks - 1:>+7.1%}")
    defaults = [row for run in runs for row in compare(run, run.scenario, tuple(range(len(run.rates))))]
    _table(defaults, "defaults (predicted/measured ms, error)")
    out = {"defaults": defaults}
    if not args.no_calibration:
        held = [row for run in runs if len(run.rates) > 1 for row in compare(run, calibrated(run), (1,))]
        _table(held, "calibrated on stage 0, predicting stage 1")
        out["calibrated_stage1"] = held
    held = held_servers(runs)
    print("\nservers the issue names as held (the runs' prompts, Poisson arrivals at the rate; verdict only)")
    for r in held:
        print(f"{r['model']:14s} {r['gpu']:14s} TP{r['tp']} {r['rate']:4.0f}/s {r['workload']:9s} "
              f"TTFT mean {r['ttft_mean_ms']:6.1f} ms, p99 {r['ttft_p99_ms']:6.1f} ms  {r['verdict']}, KV pool "
              f"{r['kv_margin']['blocks']:,} blocks, edge {_edge(r['kv_margin'])}")
    out["held_servers"] = held
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
