"""The prefix cache through the CLI: a Mooncake-style trace from ingest to workload, memory, simulate and
recommend, with figures computed by hand."""

import json

import pytest
from helpers import cli_json, run_cli

BASE = ["--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--max-model-len", "8192"]
# five requests, ids per 512-token block: 2 repeats 1 whole; 3 shares block 1; 4 shares blocks 1-2; 5 shares nothing
ROWS = [(0, 1100, 20, [1, 2, 3]), (100_000, 1100, 20, [1, 2, 3]), (200_000, 700, 30, [1, 4]),
        (300_000, 1536, 10, [1, 2, 5]), (400_000, 2000, 10, [6, 7, 8, 9])]
# by hand, 16-token blocks, requests long finished before the next: 2 hits floor(1099/16) = 68 blocks, 3 hits id 1
# (32 blocks), 4 hits ids 1-2 (64 blocks)
HITS = (68 + 32 + 64) * 16


@pytest.fixture
def mooncake(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                            for t, i, o, h in ROWS))
    db = tmp_path / "p.duckdb"
    obj = cli_json("ingest", str(path), "--name", "mc", db=db)
    assert obj["layout"] == "mooncake" and obj["mapping"]["hash_ids"] == "hash_ids" and obj["rows"] == 5
    return db


def test_workload_reports_the_reuse_worked_out_by_hand(mooncake):
    reuse = cli_json("workload", "mc", "--model", "llama-3-8b", db=mooncake)["prefix_reuse"]
    assert reuse["source"] == "hash_ids" and "512-token" in reuse["describe"]
    assert reuse["prompt_tokens"] == 1100 + 1100 + 700 + 1536 + 2000
    assert reuse["ideal_hit_tokens"] == HITS
    # the working set: every block the five requests compute (floor((P + O − 1)/16)), minus the ones they share;
    # the repeat's block 68 holds its own answer's first tokens
    assert reuse["working_set_blocks"] == 69 + 1 + (45 - 32) + (96 - 64) + 125
    assert reuse["curve"][-1]["hit_rate"] == pytest.approx(HITS / reuse["prompt_tokens"])
    assert reuse["working_set_gib"] == pytest.approx(reuse["working_set_tokens"] * 131072 / 2**30)
    rates = [p["hit_rate"] for p in reuse["curve"]]
    assert rates == sorted(rates)


def test_simulate_finds_the_same_hits_and_the_switch_removes_them(mooncake):
    on = cli_json("simulate", "--trace", "mc", *BASE, db=mooncake)
    assert on["prefix_cache"]["hit_tokens"] == HITS and on["prefix_cache"]["identity"] == "hash_ids"
    off = cli_json("simulate", "--trace", "mc", *BASE, "--no-prefix-cache", db=mooncake)
    assert off["prefix_cache"]["hit_tokens"] == 0 and not off["prefix_cache"]["enabled"]
    assert on["ttft_ms"]["mean"] < off["ttft_ms"]["mean"]
    fleet = cli_json("simulate", "--trace", "mc", *BASE, "--replicas", "2", "--router", "prefix-aware", db=mooncake)
    # each request follows the one it shares its prefix with, so the fleet hits as much as one replica
    assert fleet["prefix_cache"]["hit_tokens"] == HITS
    assert sum(r["prefix_cache"]["hit_tokens"] for r in fleet["per_replica"]) == HITS


def test_memory_says_what_the_pool_holds(mooncake):
    cache = cli_json("memory", *BASE, "--trace", "mc", db=mooncake)["prefix_cache"]
    assert cache["source"] == "hash_ids" and cache["lru_hit_rate_at_pool"] == pytest.approx(cache["ideal_hit_rate"])
    assert cache["holding_tokens"] <= cache["working_set_tokens"] and cache["offload_gib"] == 0
    tiny = cli_json("memory", *BASE, "--trace", "mc", "--num-gpu-blocks", "40", db=mooncake)["prefix_cache"]
    assert tiny["pool_tokens"] == 640 and tiny["lru_hit_rate_at_pool"] < cache["lru_hit_rate_at_pool"]


def test_a_larger_pool_than_the_gpu_holds_is_a_warned_what_if(mooncake):
    done = run_cli("memory", *BASE, "--num-gpu-blocks", "10000000", "--json", db=mooncake)
    assert json.loads(done.stdout)["num_blocks"] == 10_000_000
    assert done.stderr.startswith("warning: --num-gpu-blocks 10,000,000 exceeds the ")


def test_declared_prefix_on_a_trace_without_identity(tmp_path):
    db = tmp_path / "d.duckdb"
    path = tmp_path / "plain.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 50},600,5\n" for i in range(10)))
    cli_json("ingest", str(path), "--name", "plain", db=db)
    assert cli_json("workload", "plain", db=db)["prefix_reuse"]["source"] == "none"
    reuse = cli_json("workload", "plain", "--shared-prefix", "512:0.5", db=db)["prefix_reuse"]
    assert reuse["source"] == "declared" and reuse["ideal_hit_tokens"] == 4 * 512
    sim = cli_json("simulate", "--trace", "plain", *BASE, "--shared-prefix", "512:0.5", db=db)
    assert sim["prefix_cache"]["hit_tokens"] == 4 * 512 and sim["prefix_cache"]["identity"] == "declared"
    bad = run_cli("simulate", "--trace", "plain", *BASE, "--shared-prefix", "lots", db=db, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --shared-prefix 'lots': expected TOKENS")


def test_a_declared_prefix_cannot_override_the_traces_own(mooncake):
    bad = run_cli("workload", "mc", "--shared-prefix", "100", db=mooncake, check=False)
    assert bad.returncode == 2 and "already carries a prefix identity" in bad.stderr


def test_recommend_states_the_gain_over_caching_off(mooncake, tmp_path):
    rows = [(i * 400, 3000, 40, [1, 2, 3, 4, 5, 10 + i]) for i in range(400)]    # one 2.5k-token system prompt
    path = tmp_path / "sys.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": o, "hash_ids": h}) + "\n"
                            for t, n, o, h in rows))
    cli_json("ingest", str(path), "--name", "sys", db=mooncake)
    rec = cli_json("recommend", "sys", *BASE, "--slo", "tpot:tpot_p99<50", "--details", "--resamples", "0",
                   "--quiet", db=mooncake)
    row = next(r for r in rec["classes"] if r["name"] == "tpot")
    gain = row["details"]["prefix_cache"]
    assert gain["identity"] == "hash_ids" and gain["hit_rate"] > 0.8
    assert gain["max_qps_without_cache"] < gain["max_qps_with_cache"]
    assert any(line.startswith("Prefix caching (vLLM V1's default) serves") for line in row["details"]["diagnosis"])
