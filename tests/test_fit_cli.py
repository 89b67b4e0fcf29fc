"""`python -m planner fit` as CONTRACT.md writes it, on the bundled sample and on the real public traces."""

import pytest
from helpers import SHARED_TRACES, cli_json, needs_shared, run_cli

from planner.traces.samples import SAMPLE_PATH

CONTRACT_FAMILIES = {"lognormal": {"mu", "sigma"}, "gamma": {"shape", "scale"}, "weibull": {"shape", "scale"},
                     "exponential": {"scale"}, "lomax": {"shape", "scale"}, "logt": {"mu", "sigma", "df"}}


def check_contract(obj: dict, field: str) -> None:
    assert obj["field"] == field
    assert {"n", "best", "censored_at", "censored_fraction", "candidates"} <= obj.keys()
    assert obj["best"] == obj["candidates"][0]["family"]
    for cand in obj["candidates"]:
        assert {"family", "params", "aic", "bic", "ks", "quantiles"} <= cand.keys()
        if cand["family"] in CONTRACT_FAMILIES and cand["aic"] is not None:
            assert set(cand["params"]) == CONTRACT_FAMILIES[cand["family"]]
            assert set(cand["quantiles"]) == {"p50", "p90", "p99"}
    aics = [c["aic"] for c in obj["candidates"] if c["aic"] is not None]
    assert aics == sorted(aics)
    assert not [c for c in obj["candidates"] if c.get("error")], "every family converges on these traces"


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("fit") / "fit.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    return db


def test_fit_contract_on_the_sample(sample_db):
    inputs = cli_json("fit", "sample_chat", "--field", "input_tokens", db=sample_db)
    check_contract(inputs, "input_tokens")
    assert inputs["n"] == 8350 and inputs["censored_at"] == 7936
    assert inputs["best"] == "lognormal_pareto"            # the generator's own family
    params = inputs["candidates"][0]["params"]
    assert params["w"] == pytest.approx(0.08, abs=0.02) and params["alpha"] == pytest.approx(1.4, rel=0.2)
    outputs = cli_json("fit", "sample_chat", "--field", "output_tokens", db=sample_db)
    check_contract(outputs, "output_tokens")
    assert outputs["censored_at"] == 1024 and outputs["best"] in ("lognormal", "logt")
    gaps = cli_json("fit", "sample_chat", "--field", "interarrival", db=sample_db)
    check_contract(gaps, "interarrival")
    assert gaps["cv"] == pytest.approx(2.13, abs=0.01) and gaps["poisson_consistent"] is False
    assert gaps["best"] == "gamma"


def test_a_given_cap_overrides_detection(sample_db):
    obj = cli_json("fit", "sample_chat", "--field", "output_tokens", "--cap", "512", db=sample_db)
    assert obj["censored_at"] == 512 and obj["censored_fraction"] > 0.05


def test_fit_errors_are_one_line(sample_db, tmp_path):
    bad = run_cli("fit", "sample_chat", "--field", "nope", "--json", db=sample_db, check=False)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    missing = run_cli("fit", "no_such_trace", "--field", "input_tokens", "--json", db=sample_db, check=False)
    assert missing.returncode == 2 and missing.stderr.startswith("error:")
    lengths_only = tmp_path / "l.csv"
    lengths_only.write_text("input_tokens,output_tokens\n10,5\n20,6\n30,7\n")
    cli_json("ingest", str(lengths_only), "--quiet", db=sample_db)
    no_times = run_cli("fit", "l", "--field", "interarrival", "--json", db=sample_db, check=False)
    assert no_times.returncode == 2 and "no timestamps" in no_times.stderr
    # a cap censors token lengths: given with inter-arrival times it was silently ignored
    capped = run_cli("fit", "sample_chat", "--field", "interarrival", "--cap", "5", db=sample_db, check=False)
    assert capped.returncode == 2 and capped.stderr.strip() == ("error: --cap 5: a cap censors token lengths; "
                                                                "expected no --cap with --field interarrival")
    text = run_cli("fit", "sample_chat", "--field", "interarrival", db=sample_db).stdout
    assert text.startswith("interarrival: n=8349, not censored; best ")


# KS distances of MLE lognormal and exponential fits from reference/workloads.md §3 ("Family check"); ours
# censor the caps and count a token as the interval x ± 0.5, which moves them by up to 0.015 (most where
# outputs of a few tokens are common: Azure code).
REAL = [
    ("AzureLLMInferenceTrace_code.csv", "input_tokens", 8819, 7434, 337, 0.107, 0.045),
    ("AzureLLMInferenceTrace_code.csv", "output_tokens", 8819, None, 0, 0.133, 0.200),
    ("AzureLLMInferenceTrace_conv.csv", "input_tokens", 19366, None, 0, 0.159, 0.130),
    ("AzureLLMInferenceTrace_conv.csv", "output_tokens", 19366, 1000, 11, 0.182, 0.158),
    ("BurstGPT_1_first400.csv", "input_tokens", 383, None, 0, 0.108, 0.147),
    ("BurstGPT_1_first400.csv", "output_tokens", 383, None, 0, 0.150, 0.074),
]


@pytest.fixture(scope="module")
def real_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("real") / "real.duckdb"
    if SHARED_TRACES.is_dir():
        for name in {r[0] for r in REAL}:
            cli_json("ingest", str(SHARED_TRACES / name), "--quiet", db=db)
    return db


@needs_shared
@pytest.mark.parametrize("name, field, n, cap, capped, ks_lognormal, ks_exponential", REAL)
def test_real_traces_fit(real_db, name, field, n, cap, capped, ks_lognormal, ks_exponential):
    obj = cli_json("fit", name.removesuffix(".csv"), "--field", field, db=real_db)
    check_contract(obj, field)
    assert obj["n"] == n and obj["censored_at"] == cap
    assert obj["censored_fraction"] == pytest.approx(capped / n)
    ks = {c["family"]: c["ks"] for c in obj["candidates"]}
    assert ks["lognormal"] == pytest.approx(ks_lognormal, abs=0.02)
    assert ks["exponential"] == pytest.approx(ks_exponential, abs=0.02)


@needs_shared
@pytest.mark.parametrize("name, cv, poisson", [("AzureLLMInferenceTrace_code.csv", 13.15, False),
                                               ("AzureLLMInferenceTrace_conv.csv", 1.094, False),
                                               ("BurstGPT_1_first400.csv", 4.46, False)])   # 383 not failed
def test_real_traces_interarrival(real_db, name, cv, poisson):
    obj = cli_json("fit", name.removesuffix(".csv"), "--field", "interarrival", db=real_db)
    check_contract(obj, "interarrival")
    assert obj["cv"] == pytest.approx(cv, rel=0.005) and obj["poisson_consistent"] is poisson
    assert obj["quantized"] is False


def test_the_fit_object_counts_the_zero_length_requests_no_family_fits(tmp_path):
    # 12 of 60 prompts are 0 tokens (a zero output is a failed request, counted apart at ingest): n counts all 60,
    # and the JSON says 12 of them were left out of the fit
    db = tmp_path / "zeros.duckdb"
    path = tmp_path / "zeros.csv"
    path.write_text("input_tokens,output_tokens\n" + "".join(f"{0 if i % 5 == 0 else 100 + 13 * i},{20 + 7 * i}\n"
                                                               for i in range(60)))
    cli_json("ingest", str(path), "--quiet", db=db)
    fitted = cli_json("fit", "zeros", "--field", "input_tokens", db=db)
    assert fitted["n"] == 60 and fitted["dropped_nonpositive"] == 12
    assert cli_json("fit", "zeros", "--field", "output_tokens", db=db)["dropped_nonpositive"] == 0
