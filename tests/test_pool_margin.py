"""The KV-pool margin: where a replay's queue verdict flips as the pool changes, found by replays at other pools."""

import math

import numpy as np
import pytest
from helpers import cli_json

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.scenario import Scenario
from planner.sim.fleet import Fleet
from planner.sim.pool_margin import NEAR, RESOLUTION, pool_margin, queue_holds
from planner.sim.run import simulate
from planner.sim.workload import sorted_workload, synthetic

# 400 blocks hold 6,400 tokens: eight 768-token requests at once, so the pool binds this server
FLAGS = dict(max_num_seqs=64, max_num_batched_tokens=512, num_gpu_blocks=400, max_model_len=8192)
SCENARIO = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"), **FLAGS)


def _work(qps: float):
    return synthetic(f"requests=2000,input=512,output=256,qps={qps},seed=1")


def _overloaded(work, blocks: int, fleet: Fleet = Fleet(1, "least-loaded")) -> bool:
    return simulate(work, SCENARIO.replace(num_gpu_blocks=blocks), fleet=fleet).verdict == "overloaded"


# 3.2 req/s overloads 400 blocks (edge 409); at 3 a preempted request finding its own blocks again holds (edge 378)
@pytest.mark.parametrize("qps, holds", [(2, True), (3.2, False)])
def test_the_edge_is_where_the_verdict_flips_to_the_resolution(qps, holds):
    work = _work(qps)
    margin = pool_margin(work, SCENARIO)
    step = math.ceil(RESOLUTION * 400)
    assert margin.blocks == 400 and margin.holds is holds and margin.searched_blocks == (200, 800)
    assert margin.edge_blocks is not None and (margin.edge_blocks < 400) is holds
    # re-simulated directly: the edge holds and a pool one resolution step smaller overloads
    assert not _overloaded(work, margin.edge_blocks)
    assert _overloaded(work, margin.edge_blocks - step)
    assert margin.change == pytest.approx(margin.edge_blocks / 400 - 1)
    # the base replay, one at the far end, then a bisection to 4 blocks of the 200-block bracket below the pool
    # (6 halvings) or the 400-block one above it (7)
    assert margin.simulations == 2 + (6 if holds else 7)
    assert f"{margin.edge_blocks:,}" in margin.sentence() and f"{margin.change:+.0%}" in margin.sentence()
    # it claims what the bisection checked, the edge and its neighbour, not every pool below ("overloading below")
    assert f"at {margin.edge_blocks:,} ({margin.change:+.0%}), where a pool at most 1% of it smaller overloads" \
        in margin.sentence()


def test_a_verdict_the_pool_does_not_decide_has_no_edge():
    light = pool_margin(_work(1), SCENARIO)
    assert light.holds and light.edge_blocks is None and light.change is None and not light.near
    assert not _overloaded(_work(1), 200)                  # it holds at half the pool too
    flooded = pool_margin(_work(50), SCENARIO, holds=queue_holds(simulate(_work(50), SCENARIO)))
    assert not flooded.holds and flooded.edge_blocks is None and flooded.simulations == 1
    assert _overloaded(_work(50), 800)                     # twice the pool still overloads
    assert "does not rest on the pool estimate" in flooded.sentence()


def test_the_margin_replays_the_fleet_it_is_given():
    fleet = Fleet(2, "round-robin")
    work = _work(6)
    margin = pool_margin(work, SCENARIO, fleet=fleet)
    assert margin.edge_blocks is not None
    assert not _overloaded(work, margin.edge_blocks, fleet)
    assert _overloaded(work, margin.edge_blocks - math.ceil(RESOLUTION * 400), fleet)
    assert margin.near is (abs(margin.change) <= NEAR)


def test_simulate_cli_reports_the_margin(tmp_path):
    db = tmp_path / "s.duckdb"
    args = ("simulate", "--synthetic", "requests=2000,input=512,output=256,qps=3.2,seed=1", "--model", "llama-3-8b",
            "--gpu", "a100-80gb-sxm", "--max-num-seqs", "64", "--max-num-batched-tokens", "512",
            "--num-gpu-blocks", "400", "--max-model-len", "8192")
    obj = cli_json(*args, db=db)
    margin = pool_margin(_work(3.2), SCENARIO)
    assert obj["verdict"] == "overloaded"
    assert obj["kv_margin"] == {"blocks": 400, "holds": False, "edge_blocks": margin.edge_blocks,
                                "change": pytest.approx(margin.change), "near": margin.near,
                                "searched_blocks": [200, 800], "simulations": margin.simulations - 1}
    assert cli_json(*args, "--no-kv-margin", db=db)["kv_margin"] is None


def test_a_pool_too_small_for_a_request_does_not_hold():
    # 19 short requests and one of 7,000 + 5 tokens (438 blocks, 439 with vLLM's null block): refused outright
    # below that, it never queues, so the verdict alone would read every smaller pool as stable
    work = sorted_workload(np.arange(20) * 1.0, np.r_[np.full(19, 100), 7000], np.full(20, 5), "one huge")
    roomy = SCENARIO.replace(num_gpu_blocks=600)
    assert simulate(work, roomy.replace(num_gpu_blocks=300)).verdict == "stable"
    margin = pool_margin(work, roomy)
    assert margin.holds and 439 <= margin.edge_blocks < 439 + math.ceil(RESOLUTION * 600)
    assert not queue_holds(simulate(work, roomy.replace(num_gpu_blocks=438)))
    assert queue_holds(simulate(work, roomy.replace(num_gpu_blocks=439)))
