"""One scenario, the same answers everywhere: a non-default scenario (fp8 weights and KV, block 32, TP 2, overheads
fitted from a pasted vLLM log) through the CLI's memory, simulate, recommend and report, and through every page,
gives the same KV blocks and the same predicted latencies."""

import json

import numpy as np
import pytest
from helpers import ROOT, cli_json
from streamlit.testing.v1 import AppTest

from planner.report.store import load_report
from planner.tables import fmt
from planner.traces import store
from planner.traces.ingest import ingest_file

# the startup log of such a server (vLLM V1 wording): the weights as loaded and the KV memory it found
LOG = ("INFO 11-30 09:12:01 [gpu_model_runner.py:2011] Model loading took 4.52 GiB memory and 3.1 seconds\n"
       "INFO 11-30 09:12:09 [gpu_worker.py:276] Available KV cache memory: 60.25 GiB\n")
SCENARIO = {"model": "llama-3-8b", "gpu": "a100-80gb-sxm", "tp": "2", "weights": "fp8", "kv_dtype": "fp8",
            "block": "32"}
FLAGS = ["--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--tp", "2", "--weight-dtype", "fp8",
         "--kv-cache-dtype", "fp8", "--block-size", "32"]
SLO = "chat:ttft_p99<2000"


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """The CLI's answers for the scenario on a small trace, and the store and log they came from."""
    tmp = tmp_path_factory.mktemp("parity")
    db, log = tmp / "parity.duckdb", tmp / "vllm.log"
    log.write_text(LOG)
    rng = np.random.default_rng(7)
    t = np.concatenate([[0.0], np.cumsum(rng.exponential(0.25, 239))])
    rows = "\n".join(f"{a:.4f},{p},{o}" for a, p, o in zip(t, rng.integers(100, 3000, 240), rng.integers(20, 300, 240),
                                                          strict=True))
    (tmp / "parity.csv").write_text("arrival,input_tokens,output_tokens\n" + rows + "\n")
    con = store.open_store(db)
    ingest_file(con, tmp / "parity.csv")
    con.close()
    flags = [*FLAGS, "--vllm-log", str(log)]
    memory = cli_json("memory", *flags, db=db)
    replay = cli_json("simulate", "--trace", "parity", *flags, db=db)
    rec = cli_json("recommend", "parity", *flags, "--slo", SLO, "--quiet", db=db)
    (row,) = [c for c in rec["classes"] if c["name"] == "chat"]
    # the recommended configuration as its own replay: all of it, chunked prefill included
    chunking = [] if row["config"]["enable_chunked_prefill"] else ["--no-chunked-prefill"]
    point = cli_json("simulate", "--trace", "parity", *flags, "--max-num-seqs", str(row["config"]["max_num_seqs"]),
                     "--max-num-batched-tokens", str(row["config"]["max_num_batched_tokens"]), *chunking,
                     "--rate-scale", repr(row["scale"]), db=db)
    cli_json("report", "parity", *flags, "--slo", SLO, "-o", str(tmp / "report.json"), "--quiet", db=db)
    report = json.loads((tmp / "report.json").read_text())
    return {"db": db, "memory": memory, "replay": replay, "row": row, "point": point, "report": report}


def test_the_cli_commands_agree(cli):
    blocks = cli["memory"]["num_blocks"]
    # the log's 60.25 GiB of KV in 32-token blocks; 128 KiB per token in bf16, halved by fp8 and by two ranks:
    # 1 MiB per block per GPU
    assert blocks == int(60.25 * 2**30) // (32 * 131_072 // 2 // 2) == 61_696
    assert cli["replay"]["settings"]["num_blocks"] == blocks == cli["report"]["memory"]["num_blocks"]
    assert cli["point"]["settings"]["num_blocks"] == blocks
    assert cli["replay"]["settings"]["block_size"] == 32 and cli["report"]["memory"]["plan"]["block_size"] == 32
    # the recommended point, simulated on its own, is what the recommendation predicted (fp8 KV costed as fp8)
    row, point = cli["row"], cli["point"]
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for q in ("p50", "p99"):
            assert point[metric][q] == row["predicted"][metric][q], (metric, q)
    # the report's replay and recommendation are the same computations
    assert cli["report"]["simulation"]["ttft_ms"] == cli["replay"]["ttft_ms"]
    assert cli["report"]["simulation"]["tpot_ms"] == cli["replay"]["tpot_ms"]
    (reported,) = [c for c in cli["report"]["recommendations"]["classes"] if c["name"] == "chat"]
    assert reported["predicted"] == row["predicted"] and reported["config"] == row["config"]
    assert "--kv-cache-dtype fp8 --block-size 32 --quantization fp8" in row["vllm_args"]
    reproduce = cli["report"]["assumptions"]["reproduce"]
    assert "--weight-dtype fp8 --kv-cache-dtype fp8" in reproduce and "--block-size 32" in reproduce
    assert "--activation-gib" in reproduce and "--weights-gib" in reproduce        # the fitted log, written out


def open_page(page: str) -> AppTest:
    """The page opened from the scenario's link, with the startup log pasted (a new browser session each)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in {**SCENARIO, "trace": "parity", "slos": SLO}.items():
        at.query_params[key] = value
    at.session_state["vllm_log"] = LOG
    at.run()
    at.switch_page(page).run()
    assert not at.exception, page
    return at


def test_every_page_agrees_with_the_cli(cli, monkeypatch):
    monkeypatch.setenv("PLANNER_DB", str(cli["db"]))
    blocks, replay, row = cli["memory"]["num_blocks"], cli["replay"], cli["row"]

    tiles = {m.label: m for m in open_page("pages/memory.py").metric}
    assert tiles["KV tokens per GPU"].value == f"{blocks * 32:,}"
    assert tiles["KV tokens per GPU"].proto.help == f"{blocks:,} blocks of 32 tokens"
    assert tiles["KV pool per GPU"].value == "60.25 GiB"

    tiles = {m.label: m.value for m in open_page("pages/simulate.py").metric}
    assert tiles["KV blocks"] == f"{blocks:,}"
    assert tiles["TTFT p99"] == f"{replay['ttft_ms']['p99']:,.0f} ms"
    assert tiles["TPOT p99"] == f"{replay['tpot_ms']['p99']:.1f} ms"

    at = open_page("pages/recommend.py")
    table = next(d.value for d in at.dataframe if "chat" in d.value.columns)
    by_metric = dict(zip(table["class"], table["chat"], strict=True))
    assert by_metric["TTFT p99 ms"] == fmt(row["predicted"]["ttft_ms"]["p99"])
    assert by_metric["TPOT p99 ms"] == fmt(row["predicted"]["tpot_ms"]["p99"])
    assert by_metric["max_num_seqs"] == fmt(row["config"]["max_num_seqs"])
    assert any(c.value.endswith(row["vllm_args"]) for c in at.code)

    at = open_page("pages/report.py")
    at.button(key="report_build").click().run()
    assert not at.exception
    con = store.open_store(cli["db"])
    body = load_report(con, at.session_state["report_saved"]).body
    con.close()
    assert body["memory"]["num_blocks"] == blocks
    assert body["simulation"]["ttft_ms"] == replay["ttft_ms"] and body["simulation"]["tpot_ms"] == replay["tpot_ms"]
    (reported,) = [c for c in body["recommendations"]["classes"] if c["name"] == "chat"]
    assert reported["predicted"] == row["predicted"]


def test_a_table_writes_numpy_values_as_python_ones_and_a_value_near_a_limit_as_itself():
    assert [fmt(v) for v in (np.bool_(True), np.bool_(False), True)] == ["yes", "no", "yes"]
    assert fmt(np.int64(12345)) == fmt(12345) == "12,345" and fmt(np.float32(2.5)) == "2.5"
    # a TPOT p99 of 49.96 ms beside a 50 ms SLO it meets: three significant digits wrote "50"
    assert fmt(49.96) == "49.96" and fmt(0.12345) == "0.1235" and fmt(1234.56) == "1,234.6"
