"""bench/fidelity_v1.py's reading of inference-sim's published vLLM v0.15.1 runs: the prompt identity it recovers,
the metrics it compares, and (where a clone of inference-sim/training is at hand) a run as loaded."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import fidelity_v1  # noqa: E402


def test_prompt_ids_follow_the_cycle_and_repair_send_order_swaps():
    rng = np.random.default_rng(3)
    lengths_of = rng.integers(500, 700, fidelity_v1.PROMPTS)
    truth = np.arange(1000) % fidelity_v1.PROMPTS
    sent = truth.copy()
    sent[[250, 252]] = sent[[252, 250]]          # two requests sent two places out of order
    sent[[611, 612]] = sent[[612, 611]]
    ids = fidelity_v1.prompt_ids(lengths_of[sent])
    assert np.array_equal(lengths_of[ids], lengths_of[sent])      # every request gets a prompt of its own length
    assert ids[250] == 52 and ids[252] == 50 and ids[611] == 12 and ids[612] == 11


def test_metrics_are_the_studys_definitions():
    ttft = np.array([0.040, 0.050, 0.060])
    e2e = np.array([3.0, 4.0, 5.0])
    out = np.array([251, 251, 251])
    m = fidelity_v1.metrics(ttft, e2e, out)
    assert m["ttft_mean"] == pytest.approx(50.0) and m["e2e_mean"] == pytest.approx(4000.0)
    assert m["tpot"] == pytest.approx((4000.0 - 50.0) / 250)
    assert m["ttft_p99"] == pytest.approx(np.percentile(ttft * 1e3, 99))


CLONE = os.environ.get("INFSIM_TRAINING", "")


@pytest.mark.skipif(not CLONE or not Path(CLONE).exists(),
                    reason="no clone of inference-sim/training (INFSIM_TRAINING)")
def test_a_published_run_loads_with_its_stages_and_blocks():
    run = fidelity_v1.load(Path(CLONE), "codellama34b-tp2-codegen")
    assert run.work.n == 9000 and np.bincount(run.stage).tolist() == [3000, 6000] and run.rates == (5.0, 10.0)
    assert run.logged_blocks == 26_602 and abs(run.scenario.settings.num_blocks / 26_602 - 1) < 0.01
    assert set(run.work.output_tokens.tolist()) == {247}
    # 100 prompts: a first occurrence shares its group's 100-token system prompt (a virtual sequence), every later
    # one the whole prompt of the prompt's previous occurrence
    parent, shared, n = run.work.prefix.parent, run.work.prefix.shared_tokens, run.work.n
    first = parent >= n
    assert first.sum() == 100 and np.unique(parent[first]).size == 10 and (shared[first] == 100).all()
    assert (parent[~first] < np.arange(n)[~first]).all() and (shared[~first] == run.work.input_tokens[~first]).all()
