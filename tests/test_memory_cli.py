"""`python -m planner memory` as CONTRACT.md writes it, and the Memory & capacity page."""

import json
import re

import pytest
from helpers import app_page, cli_json, run_cli

from planner.capacity.memory import startup_problems
from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.catalog.releases import VLLM_VERSIONS
from planner.scenario import Scenario
from planner.traces.samples import SAMPLE_PATH

CONTRACT_KEYS = {"param_count", "weights_bytes", "kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "kv_pool_bytes",
                 "num_blocks", "kv_capacity_tokens", "max_concurrency"}


def test_memory_contract(tmp_path):
    obj = cli_json("memory", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--max-model-len", "8192",
                   db=tmp_path / "m.duckdb")
    assert CONTRACT_KEYS <= obj.keys()
    assert obj["param_count"] == 8_030_261_248 and obj["kv_bytes_per_token"] == 131_072
    assert obj["kv_capacity_tokens"] == obj["num_blocks"] * 16
    assert obj["max_concurrency"] == pytest.approx(obj["num_blocks"] / 512)
    assert sum(obj["breakdown_gib"].values()) == pytest.approx(obj["plan"]["total_bytes"] / 1024**3)


def test_memory_flags_mean_what_vllm_means(tmp_path):
    db = tmp_path / "m.duckdb"
    base = ["memory", "--model", "llama-3-70b", "--gpu", "a100-80gb-sxm", "--tp", "4", "--max-model-len", "4096"]
    tp4 = cli_json(*base, db=db)
    assert tp4["kv_bytes_per_token"] == 327_680 and tp4["kv_bytes_per_token_per_gpu"] == 81_920
    fp8 = cli_json(*base, "--kv-cache-dtype", "fp8", db=db)
    assert fp8["kv_bytes_per_token_per_gpu"] == 40_960
    assert fp8["num_blocks"] == pytest.approx(2 * tp4["num_blocks"], abs=1)
    override = cli_json(*base, "--num-gpu-blocks", "1000", db=db)
    assert override["num_blocks"] == 1000 and override["kv_capacity_tokens"] == 16_000
    assert override["max_concurrency"] == pytest.approx(1000 / 256)
    blocks32 = cli_json(*base, "--block-size", "32", db=db)
    assert blocks32["kv_capacity_tokens"] == pytest.approx(tp4["kv_capacity_tokens"], abs=32)
    low = cli_json(*base, "--gpu-mem-util", "0.8", db=db)
    assert low["kv_pool_bytes"] < tp4["kv_pool_bytes"]
    batched = cli_json(*base, "--max-num-batched-tokens", "32768", db=db)
    assert batched["kv_pool_bytes"] < tp4["kv_pool_bytes"]


def test_memory_names_the_release_whose_profiling_sized_the_pool(tmp_path):
    db = tmp_path / "m.duckdb"
    base = ["memory", "--model", "qwen3-14b", "--gpu", "l40s"]
    now, old = cli_json(*base, db=db), cli_json(*base, "--vllm-version", "0.15", db=db)
    assert (now["vllm_version"], now["vllm_release"]) == ("current", "V1 0.20 and later (CUDA graphs subtracted)")
    assert (old["vllm_version"], old["vllm_release"]) == ("0.15", "V1 0.14-0.16 (sorting sampler; async scheduling)")
    # the same flags, another pool: 0.15 leaves CUDA graphs outside the budget
    assert old["num_blocks"] > now["num_blocks"]
    human = run_cli(*base, "--vllm-version", "0.15", db=db).stdout
    assert human.rstrip().endswith("memory profiled as vLLM V1 0.14-0.16 (sorting sampler; async scheduling) does "
                                   "(--vllm-version 0.15)")


def test_memory_accepts_a_config_json_and_reports_bad_input(tmp_path):
    config = tmp_path / "my-model" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
                                  "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
                                  "vocab_size": 152064, "max_position_embeddings": 32768}))
    obj = cli_json("memory", "--model", str(config), "--gpu", "l40s", db=tmp_path / "m.duckdb")
    assert obj["param_count"] == 7_615_616_512 and obj["kv_bytes_per_token"] == 57_344
    for bad, expected in ((["--model", "nope", "--gpu", "l4"], "unknown model"),
                          (["--model", "llama-3-8b", "--gpu", "tpu"], "unknown GPU"),
                          (["--model", "llama-3-8b", "--gpu", "l4", "--gpu-mem-util", "2"], "gpu-mem-util")):
        proc = run_cli("memory", *bad, "--json", db=tmp_path / "m.duckdb", check=False)
        assert proc.returncode == 2 and expected in proc.stderr and "Traceback" not in proc.stderr


def test_memory_with_a_trace_and_a_fit_request(tmp_path):
    db = tmp_path / "m.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    obj = cli_json("memory", "--model", "llama-3-8b", "--gpu", "a100-40gb-sxm", "--trace", "sample_chat",
                   "--fit", "64x8192", db=db)
    assert obj["trace"]["concurrency_at_mean"] > obj["trace"]["concurrency_at_p95"] > obj["max_concurrency"]
    assert {r["policy"] for r in obj["reservations"]} == {"vllm-v1", "orca", "tgi", "trtllm", "sglang",
                                                          "sglang-decayed", "seed"}
    assert [s["percentile"] for s in obj["max_new_tokens_settings"]] == [90, 95, 99]
    assert obj["fit_check"]["tp"] == 4 and "short of 64" in obj["fit_check"]["tried"][1]["reason"]
    assert len(obj["preemption"]["points"]) > 10
    assert 0 < obj["padding"][5]["mean"] < 1


def test_memory_text_says_the_fit_and_names_the_overheads_the_pool_subtracts(tmp_path):
    """The text output carries the --fit answer the JSON has, and a "no room" reason's overheads are the ones the
    pool subtracts: activation, non-torch and the CUDA graphs vLLM 0.20 counts (they had been left out: 65.7 +
    4.2 GiB "exceeded" 71.3 GiB at TP 2)."""
    out = run_cli("memory", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--fit", "32x4096",
                  db=tmp_path / "m.duckdb").stdout
    assert "--fit 32x4096: TP 4 holds them (4 GPUs)" in out
    said = dict(re.findall(r"TP (\d+): weights [\d.]+ GiB per GPU plus overheads ([\d.]+) GiB exceed", out))
    assert list(said) == ["1", "2"]
    for tp, overheads in said.items():
        plan = Scenario(get_model("llama-3-70b"), get_gpu("h100-sxm"), tp=int(tp), max_model_len=4096).memory
        counted = plan.activation_bytes + plan.non_torch_bytes + plan.cudagraph_bytes * plan.cudagraph_counted
        assert plan.cudagraph_counted and overheads == f"{counted / 2**30:.1f}"


def test_memory_page(tmp_path, monkeypatch):
    at = app_page("pages/memory.py", tmp_path / "app.duckdb", monkeypatch, model="llama-3-70b", tp="4",
                  max_len="8192")
    assert not at.exception
    got = {m.label: m.value for m in at.metric}
    expected = cli_json("memory", "--model", "llama-3-70b", "--gpu", "a100-80gb-sxm", "--tp", "4",
                        "--max-model-len", "8192", db=tmp_path / "cli.duckdb")
    assert got["KV tokens per GPU"] == f"{expected['kv_capacity_tokens']:,}"
    assert got["Max concurrency"] == f"{expected['max_concurrency']:.2f}x"
    assert "This trace at once" in got
    at.text_area(key="vllm_log").set_value(
        "Model loading took 32.86 GiB memory\nAvailable KV cache memory: 30.00 GiB\n").run()
    got = {m.label: m.value for m in at.metric}
    assert got["KV pool per GPU"] == "30.00 GiB" and "fitted from the log" in at.success[0].value
    for view in ("Reservation policies", "Padding and preemption"):
        at.session_state["memory_view"] = view
        at.run()
        assert not at.exception


@pytest.mark.parametrize("flags, problem", [
    (["--model", "llama-3-70b", "--gpu", "l4"],
     "llama-3-70b on 1x L4 24GB: no memory left for the KV cache (-113.9 GiB); raise --tp or --gpu-mem-util, or use "
     "--weight-dtype fp8"),
    (["--model", "llama-3-8b", "--gpu", "l4", "--gpu-mem-util", "0.75"],
     "llama-3-8b on 1x L4 24GB: the KV cache holds 47 blocks, fewer than the 512 one request of max_model_len 8,192 "
     "needs (maximum concurrency below 1), and vLLM refuses to start so; lower --max-model-len, or raise "
     "--gpu-mem-util or --tp")])
def test_a_plan_vllm_would_not_start_with_is_said(tmp_path, monkeypatch, flags, problem):
    # exit 0 and a negative pool with nothing said, where vLLM refuses to start; the plan is still shown
    proc = run_cli("memory", *flags, "--json", db=tmp_path / "m.duckdb")
    assert proc.stderr.splitlines() == [f"warning: {problem}"]
    assert CONTRACT_KEYS <= json.loads(proc.stdout).keys()
    at = app_page("pages/memory.py", tmp_path / "app.duckdb", monkeypatch, model=flags[1], gpu="l4",
                  **({"util": "0.75"} if "0.75" in flags else {}))
    assert not at.exception and problem in [w.value for w in at.warning]
    assert run_cli("memory", "--model", "llama-3-8b", "--gpu", "l4", "--json", db=tmp_path / "m.duckdb").stderr == ""


def test_no_room_suggests_fp8_only_to_a_model_not_already_in_it():
    """DeepSeek-V3 ships in FP8: "use --weight-dtype fp8" was offered to it all the same."""
    fp8 = startup_problems(Scenario(get_model("deepseek-v3"), get_gpu("a100-80gb-sxm"), tp=8))
    assert len(fp8) == 1 and fp8[0].endswith("raise --tp or --gpu-mem-util")
    bf16 = startup_problems(Scenario(get_model("llama-3-70b"), get_gpu("h100-sxm")))
    assert bf16[0].endswith("raise --tp or --gpu-mem-util, or use --weight-dtype fp8")


def test_the_scenario_widgets_follow_the_gpu_the_engine_and_the_log(tmp_path, monkeypatch):
    """The price followed no GPU switch (its keyed default stayed the first GPU's); async scheduling set on, then
    vLLM V0 chosen, locked the page in an error; a pasted log replaced the overheads entered beside it."""
    at = app_page("pages/memory.py", tmp_path / "app.duckdb", monkeypatch, gpu="a100-80gb-sxm")
    at.selectbox(key="gpu").set_value("h100-sxm").run()
    assert f"${get_gpu('h100-sxm').price_per_hour:.2f}/hour per replica" in " ".join(c.value for c in at.caption)
    at.selectbox(key="async").set_value("on").run()
    at.selectbox(key="engine").set_value("vllm-v0").run()
    assert not at.exception and not at.error
    # "auto" resolves to the engine's newest release, which the caption names (the option's label had stayed V1's)
    assert f"served as vLLM {VLLM_VERSIONS['0.6'].label};" in " ".join(c.value for c in at.caption)
    at.selectbox(key="engine").set_value("vllm-v1").run()
    log = "Model loading took 14.99 GiB memory\nAvailable KV cache memory: 54.49 GiB\n"
    (tmp_path / "v.log").write_text(log)
    at.text_area(key="vllm_log").set_value(log).run()
    at.number_input(key="act").set_value(3.0).run()
    expected = cli_json("memory", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--vllm-log", str(tmp_path / "v.log"),
                        "--activation-gib", "3", "--async-scheduling", db=tmp_path / "m.duckdb")
    assert {m.label: m.value for m in at.metric}["KV pool per GPU"] == f"{expected['kv_pool_bytes'] / 2**30:.2f} GiB"


def test_a_links_budget_sets_the_sequences_auto_at_once(tmp_path, monkeypatch):
    # vLLM cuts a default max_num_seqs to the budget: a link's budget of 512 serves 512 sequences, and the page's
    # "auto" said 1,024 on the link's first run (the budget's widget, drawn after, had no state yet)
    at = app_page("pages/memory.py", tmp_path / "app.duckdb", monkeypatch, gpu="h100-sxm", batched="512")
    assert not at.exception and at.number_input(key="seqs").placeholder == "auto: 512"
