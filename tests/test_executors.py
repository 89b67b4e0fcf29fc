"""One executor for a search's simulations: in this process, on local worker processes, or on a local Ray runtime
(a real one, started by the test); the recommendation, fleet sizing and bootstrap resamples come out the same."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.errors import PlannerError
from planner.executors import get_executor
from planner.recommend.plan import RecommendOptions, plan_recommendation
from planner.scenario import Scenario
from planner.sim.fleet import Fleet
from planner.sim.run import simulate
from planner.sim.workload import synthetic

ROOT = Path(__file__).resolve().parents[1]
WORK = synthetic("requests=600,input=lognormal:6:0.8,output=lognormal:4.5:0.7,qps=6,arrival=gamma:2,seed=3")
SCENARIO = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), max_model_len=4096)
OPTIONS = RecommendOptions(slos=("chat:ttft_p99<300", "batch:throughput"), resamples=3)


def _plan(executor) -> list[dict]:
    rec = plan_recommendation(WORK, SCENARIO, OPTIONS, executor=executor)
    return [c.to_dict() for c in rec.classes]


@pytest.fixture(scope="module")
def inline_answer() -> list[dict]:
    return _plan(get_executor(1))


def test_local_worker_processes_give_the_answer_one_process_gives(inline_answer):
    executor = get_executor(2)
    assert (executor.name, executor.workers) == ("processes", 2)
    answer = _plan(executor)
    assert answer == inline_answer
    # the fleet was sized, bootstrap included: the comparison covers every kind of replay the search makes
    assert all(c["fleet"]["resamples"] == 3 for c in answer if c["feasible"])
    assert any(c["fleet"]["confident_replicas"] for c in answer if c["feasible"])


def test_a_local_ray_runtime_gives_the_same_answer(inline_answer):
    pytest.importorskip("ray")
    executor = get_executor(ray="local")
    assert executor.name == "ray" and executor.workers >= 1
    assert _plan(executor) == inline_answer
    assert get_executor(ray="local") is executor           # one runtime per process, joined once


@pytest.mark.parametrize("executor", ["inline", "processes", "ray"])
def test_a_failing_simulation_raises_its_own_error_in_the_caller(executor):
    if executor == "ray":
        pytest.importorskip("ray")
    chosen = {"inline": lambda: get_executor(1), "processes": lambda: get_executor(2),
              "ray": lambda: get_executor(ray="local")}[executor]()
    # a fleet the engine cannot route: refused inside simulate, in whichever process runs it
    v0 = SCENARIO.replace(engine="vllm-v0")
    with pytest.raises(PlannerError, match=r"^--router least-loaded with --engine vllm-v0: .* can only be routed "
                                           r"round-robin \(or use --engine [^\n]*\)$"):
        # its own message, whole: a Ray task's error had read "ray::_call() (pid=…)" and a traceback
        chosen.submit(simulate, WORK, v0, fleet=Fleet(2, "least-loaded")).result()


def test_a_worker_that_dies_mid_call_is_one_clear_error_and_the_pool_is_replaced():
    import os

    from planner.executors.processes import ProcessExecutor

    pool = ProcessExecutor.shared(3)
    # the call kills its worker: a bare BrokenProcessPool came back from the future, not the message
    with pytest.raises(PlannerError, match=r"^a local worker process died \(out of memory\?\)"):
        pool.submit(os._exit, 1).result()
    assert pool.broken and ProcessExecutor.shared(3) is not pool
    assert ProcessExecutor.shared(3).submit(sum, [1, 2]).result() == 3


@pytest.mark.parametrize("workers", [0, -1, True, 1.5, 1025, 2**31 - 1])
def test_a_worker_count_below_one_or_past_any_node_is_refused(workers):
    with pytest.raises(PlannerError, match="--workers"):
        get_executor(workers)


def test_the_cli_takes_workers_and_refuses_an_unreachable_ray_cluster(tmp_path):
    db = tmp_path / "s.duckdb"
    run = lambda *a: subprocess.run([sys.executable, "-m", "planner", *a, "--db", str(db)], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True, timeout=600)
    assert run("ingest", str(ROOT / "traces" / "sample_chat.csv.gz"), "--json").returncode == 0
    bad = run("recommend", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--workers", "0")
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("error: --workers 0")
    out = run("recommend", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--slo",
              "batch:throughput", "--resamples", "0", "--workers", "2", "--json", "--quiet")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["classes"][0]["feasible"]
