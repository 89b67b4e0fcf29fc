"""Reports: the CLI contract, every section in all three twins, reproducibility facts, offline HTML, inert
payloads, saved reports opened from their link."""

import hashlib
import html
import json
import shlex
import re

import numpy as np
import pytest
from helpers import ROOT, app_page, cli_json, run_cli

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.recommend.plan import RecommendOptions
from planner.report.build import build_report
from planner.report.render import SECTIONS, chart_svgs, markdown_text, to_html, to_markdown
from planner.report.store import list_reports, load_report, publish_report
from planner.scenario import Scenario
from planner.traces import store
from planner.traces.ingest import ingest_file
from planner.traces.samples import SAMPLE_PATH
from planner.traces.split import split_by_model

MODEL, GPU = get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")
PAYLOAD = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def small_trace(path, n=240, seed=3):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.5, n))
    rows = "\n".join(f"{a:.3f},{int(i)},{int(o)}" for a, i, o in zip(t, rng.integers(50, 900, n),
                                                                       rng.integers(20, 300, n), strict=True))
    path.write_text("arrival,input_tokens,output_tokens\n" + rows + "\n")
    return path


@pytest.fixture(scope="module")
def payload_report(tmp_path_factory):
    """A report on a small trace whose name and file name carry a script-injection payload."""
    tmp = tmp_path_factory.mktemp("payload")
    con = store.open_store(tmp / "p.duckdb")
    source = small_trace(tmp / "t.csv")
    info = ingest_file(con, source, name=PAYLOAD, source_file=f"{PAYLOAD}.csv")
    report = build_report(con, info.trace_id, Scenario(MODEL, GPU, max_model_len=4096),
                          RecommendOptions(slos=("chat:ttft_p99<2000",)))
    yield con, source, report
    con.close()


def test_report_has_every_section_in_all_three_twins(payload_report):
    con, source, report = payload_report
    body = report.to_dict()
    assert {"workload", "memory", "simulation", "recommendations", "assumptions", "charts"} <= body.keys()
    assert body["trace"]["content_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert body["workload"]["stats"]["rows"] == 240 and body["simulation"]["completed"] == 240
    # the arrival fit counts what it fitted, the gaps, as the `fit` CLI object does
    from planner.workload.fits import fit_report

    arrival_fit = body["workload"]["arrivals"]["fit"]
    assert arrival_fit["n"] == fit_report(con, report.trace["trace_id"], "interarrival")["n"] == 239
    assert arrival_fit["arrivals"] == 240
    svgs = chart_svgs(body["charts"])
    page, md = to_html(report, svgs), to_markdown(report)
    for key, title in SECTIONS:
        assert f'<section id="{key}">' in page and f"## {title}" in md
    # both twins name the file the trace came from, each escaped its own way
    assert f"file {html.escape(PAYLOAD)}.csv)" in page and f"file {markdown_text(PAYLOAD + '.csv')})" in md
    images = re.findall(r"<img [^>]*>", page)
    assert len(images) == len(body["charts"]) >= 8              # lengths, arrivals, memory, replay, sensitivity
    assert all(re.fullmatch(r'<img alt="[^"<>]*" src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]+">', i)
               for i in images)
    (row,) = [r for r in body["recommendations"]["classes"] if r["slo"]]
    assert html.escape(row["launch_command"]) in page and row["launch_command"] in md
    # the fleet: its table in both twins, the replicas-vs-SLO chart in the Recommendations section
    assert "Fleet at the trace" in page and "Fleet at the trace" in md and "one fewer fails" in md
    recommendations = page.split('<section id="recommendations">')[1].split("</section>")[0]
    assert f'alt="{row["name"]}:fleet"' in recommendations and f'alt="{row["name"]}:schedule"' in recommendations
    assert row["fleet"]["replicas"] == row["replicas_for_peak"] and row["router"] == "least-loaded"
    # reproducible: the scenario, cost model, model config and a command that rebuilds the report
    assumptions = body["assumptions"]
    assert assumptions["cost_model"]["mfu"] == 0.55 and assumptions["model_config"]["layers"] == 32
    assert assumptions["reproduce"].startswith("python -m planner report ") and "--model llama-3-8b" in \
        assumptions["reproduce"]
    # the command runs as printed: the CLI's own parser takes every flag of it
    from planner.cli.main import build_parser

    args = build_parser().parse_args(shlex.split(assumptions["reproduce"].removeprefix("python -m planner ")))
    assert args.trace == body["trace"]["trace_id"] and args.output == ["report.html"]
    # the replay's KV pool margin, against the memory plan's pool, in both twins
    margin = body["simulation"]["kv_margin"]
    assert margin["blocks"] == body["memory"]["plan"]["num_blocks"] and margin["holds"] is True
    assert margin["simulations"] >= 1 and "KV pool margin" in page and "KV pool margin" in md
    assert json.loads(json.dumps(body)) == body                                   # the JSON twin round-trips


def test_a_script_payload_in_names_is_inert(payload_report, tmp_path):
    con, source, report = payload_report
    page, md = to_html(report, chart_svgs(report.charts)), to_markdown(report)
    assert "<script" not in page.lower()                                  # no tag from the payload, nor of ours
    assert all(i.startswith('<img alt="') and 'src="data:image/svg+xml;base64,' in i
               for i in re.findall(r"<img\b[^>]*>", page, flags=re.I))     # only the charts, as images
    assert html.escape(PAYLOAD) in page                                   # shown, as text
    # Markdown renders inline HTML (not inside code blocks, where the JSON assumptions are)
    prose = re.sub(r"```.*?```", "", md, flags=re.S)
    assert "<script" not in prose and "<img" not in prose and "](" not in prose.replace("\\]\\(", "")
    assert "&lt;script&gt;alert\\(\"x\"\\)&lt;/script&gt;" in prose       # shown as text
    assert re.search(r'http-equiv="Content-Security-Policy" content="default-src \'none\'', page)


def test_report_cli_contract_saves_a_linkable_report(tmp_path):
    # one build writes every twin (-o repeats): the HTML, the Markdown and the JSON of the same saved report
    db = tmp_path / "r.duckdb"
    cli_json("ingest", str(SAMPLE_PATH), "--quiet", db=db)
    paths = [tmp_path / f"cap.{fmt}" for fmt in ("html", "md", "json")]
    out = cli_json("report", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--max-model-len",
                   "8192", "--slo", "chat:ttft_p99<3000", *[a for p in paths for a in ("-o", str(p))], "--quiet",
                   db=db)
    assert out["path"] == str(paths[0]) and out["paths"] == [str(p) for p in paths] and out["format"] == "html"
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", out["report_id"])                  # 16 random bytes = 128 bits
    page = paths[0].read_text()
    con = store.open_store(db)
    saved = load_report(con, out["report_id"])
    assert saved.html == page and saved.markdown == paths[1].read_text()
    assert json.loads(paths[2].read_text()) == saved.body
    assert saved.body["trace"]["content_sha256"] == hashlib.sha256(SAMPLE_PATH.read_bytes()).hexdigest()
    assert [c["name"] for c in saved.body["recommendations"]["classes"]] == ["chat"]
    assert not re.search(r'(src|href)="(https?:)?//', page)                   # nothing fetched from a network
    reports = con.execute("SELECT count(*) FROM reports").fetchall()[0][0]
    con.close()
    assert saved.body["trace"]["name"] == "sample_chat" and reports == 1
    assert paths[1].read_text().startswith("# Capacity report: sample\\_chat on 1× A100 80GB SXM4 \\(")
    # bad targets fail before any work: nothing written, nothing saved
    for target, message in (("c.pdf", "expected one of html, md, json"), (str(tmp_path), "is a directory")):
        bad = run_cli("report", "sample_chat", "--model", "llama-3-8b", "--gpu", "a100-80gb-sxm", "-o",
                      str(tmp_path / target), "--json", db=db, check=False)
        assert bad.returncode == 2 and message in bad.stderr
    assert not (tmp_path / "c.pdf").exists()
    con = store.open_store(db)
    assert con.execute("SELECT count(*) FROM reports").fetchall()[0][0] == 1
    con.close()


def test_saved_reports_open_only_by_their_exact_id(payload_report):
    con, source, report = payload_report
    saved = publish_report(con, report, owner="alice@example.com")
    assert load_report(con, saved.report_id).title == report.title
    from planner.errors import PlannerError

    for wrong in (saved.report_id[:-1] + ("A" if saved.report_id[-1] != "A" else "B"), "short",
                  "' OR 1=1 --xxxxxxxxxxxxx", ""):
        with pytest.raises(PlannerError, match="report"):
            load_report(con, wrong)


def test_the_report_link_opens_read_only_for_anyone(payload_report, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    con, source, report = payload_report
    db = tmp_path / "app.duckdb"
    app_con = store.open_store(db)
    ingest_file(app_con, small_trace(tmp_path / "t.csv"), name="mine")
    saved = publish_report(app_con, report)
    app_con.close()
    monkeypatch.setenv("PLANNER_DB", str(db))

    def visit(**query):       # each link opened in a new browser session
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        # sign-in configured and nobody signed in
        at.secrets["auth"] = {"redirect_uri": "http://localhost/oauth2callback",
                              "cookie_secret": "Jx9-kq2Lw7RmZ4tVb8NcP1sYd6FgH3aE0uKoQiWlXn",
                              "client_id": "c", "client_secret": "c",
                              "server_metadata_url": "http://idp/.well-known/openid-configuration"}
        at.secrets["planner"] = {"allowed_domains": ["corp.example"]}
        for key, value in query.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception
        return at

    front = visit()
    assert [b.label for b in front.button] == ["Sign in"] and not front.get("selectbox")   # no trace listed
    shared = visit(report=saved.report_id)
    assert [b.label for b in shared.get("download_button")] == ["Download HTML", "Download Markdown",
                                                                 "Download JSON"]
    assert any(html.escape(PAYLOAD) in h.proto.body for h in shared.get("html"))
    assert "no saved report has that id" in visit(report="x" * 22).error[0].value


def test_a_trace_without_times_still_reports_and_says_why_sections_are_empty(con, tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("input_tokens,output_tokens\n100,20\n200,30\n300,40\n150,25\n")
    info = ingest_file(con, path)
    report = build_report(con, info.trace_id, Scenario(MODEL, GPU, max_model_len=4096), RecommendOptions())
    body = report.to_dict()
    assert body["simulation"] is None and body["recommendations"] is None
    assert body["memory"]["trace"]["mean_final_tokens"] == pytest.approx((120 + 230 + 340 + 175) / 4)
    page, md = to_html(report, chart_svgs(report.charts)), to_markdown(report)
    assert page.count("no arrival times") == 3 and md.count("no arrival times") == 3


def test_a_report_on_a_calibration_from_another_server_says_so_in_every_twin(con, tmp_path):
    from planner.sim.cost_model import FittedOn

    path = tmp_path / "lengths.csv"
    path.write_text("input_tokens,output_tokens\n100,20\n200,30\n300,40\n150,25\n")
    info = ingest_file(con, path)
    from planner.sim.calibration_file import params_from_json

    # what `calibrate -o` writes: the fit's errors in sample and held out, and its warnings, travel with the file
    fitted = params_from_json(json.dumps({
        "model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "engine": "vllm-v1", "params": {"mfu": 0.45, "mbu": 0.7},
        "fitted": ["mfu", "mbu"], "mape": 0.057, "held_out": {"median_abs_error": 0.092, "bias": 0.083},
        "warnings": ["mbu is poorly constrained"]}), "h100.json")
    assert fitted.fitted_on == FittedOn("llama-3-8b", "h100-sxm", 1, "vllm-v1", ("mfu", "mbu"), fit_notes=(
        "the calibration's own fit: 5.7% mean absolute error on what it fitted; 9.2% median absolute error on "
        "held-out data, bias +8.3%", "mbu is poorly constrained"))
    assert params_from_json('{"params": {"mfu": 0.45}, "model": "m", "gpu": "g", "tp": 1}', "x").fitted_on.fit_notes \
        == ()
    # a blank warning or an undefined error says nothing (the page capitalises each note's first letter)
    blank = '{"params": {"mfu": 0.45}, "model": "m", "gpu": "g", "tp": 1, "mape": NaN, "warnings": ["", " ", "w"]}'
    assert params_from_json(blank, "x").fitted_on.fit_notes == ("w",)
    report = build_report(con, info.trace_id, Scenario(MODEL, GPU, max_model_len=4096, cost=fitted),
                          RecommendOptions())
    body = report.to_dict()
    (warning,) = body["assumptions"]["calibration_warnings"]
    assert warning.startswith("the calibration was fitted on h100-sxm and is applied to a100-80gb-sxm: its mfu, mbu")
    assert body["assumptions"]["cost_model"]["fitted_on"]["gpu"] == "h100-sxm"
    assert body["assumptions"]["calibration_fit"] == list(fitted.fitted_on.fit_notes)
    page, md = to_html(report, chart_svgs(report.charts)), to_markdown(report)
    for said in (warning, *fitted.fitted_on.fit_notes):
        assert f"<b>Warning:</b> {html.escape(said)}" in page and f"**Warning:** {markdown_text(said)}" in md
    plain = build_report(con, info.trace_id, Scenario(MODEL, GPU, max_model_len=4096), RecommendOptions())
    assert plain.to_dict()["assumptions"]["calibration_warnings"] == [] and "Warning:" not in to_markdown(plain)
    assert plain.to_dict()["assumptions"]["calibration_fit"] == []
    assert plain.to_dict()["assumptions"]["trace_warnings"] == [] and plain.trace["served_by"] == {}


def test_a_report_on_several_servers_traffic_says_it_is_planned_as_one(con, tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("input_tokens,output_tokens,model\n100,20,llama-3-8b\n200,30,llama-3-70b\n300,40,llama-3-8b\n"
                    "150,25,llama-3-8b\n")
    info = ingest_file(con, path)
    report = build_report(con, info.trace_id, Scenario(MODEL, GPU, max_model_len=4096), RecommendOptions())
    (warning,) = report.to_dict()["assumptions"]["trace_warnings"]
    assert warning.startswith("the trace's requests were served by 2 models (llama-3-8b (3), llama-3-70b (1)), and "
                              f"all of them are replayed on one {MODEL.name} server")
    assert f"<b>Warning:</b> {html.escape(warning)}" in to_html(report, chart_svgs(report.charts))
    assert "**Warning:** the trace's requests were served by 2 models" in to_markdown(report)
    # split off, one server's requests are planned without it
    eight = split_by_model(con, info.trace_id, "llama-3-8b")
    alone = build_report(con, eight.trace_id, Scenario(MODEL, GPU, max_model_len=4096), RecommendOptions())
    assert alone.to_dict()["assumptions"]["trace_warnings"] == [] and alone.trace["served_by"] == {"llama-3-8b": 3}
    assert alone.stats["rows"] == 3 and "Warning:" not in to_markdown(alone)


def test_the_report_page_builds_saves_and_lists_a_report(tmp_path, monkeypatch):
    db = tmp_path / "page.duckdb"
    page_con = store.open_store(db)
    ingest_file(page_con, small_trace(tmp_path / "small.csv"), name="small")
    page_con.close()
    at = app_page("pages/report.py", db, monkeypatch, timeout=240, trace="small", max_len="4096")
    assert not at.exception
    at.button(key="report_build").click().run()
    assert not at.exception and at.success[0].value.startswith("Saved: Capacity report: small on")
    link = at.get("code")[0].proto.code_text
    report_id = re.search(r"\?report=([A-Za-z0-9_-]{22})$", link).group(1)
    assert [b.label for b in at.get("download_button")] == ["Download HTML", "Download Markdown", "Download JSON"]
    listed = next(d.value for d in at.dataframe if "link" in d.value.columns)
    assert list(listed["link"]) == [link] and list(listed["title"]) == ["Capacity report: small on 1× A100 80GB SXM4 "
                                                                           "(llama-3-8b)"]
    con = store.open_store(db)
    assert load_report(con, report_id).body["trace"]["name"] == "small"
    con.close()


def test_the_report_page_saves_a_report_without_a_recommendation_as_the_cli_does(tmp_path, monkeypatch):
    # every request at one instant: no rate to scale; the CLI's report says so, the page saved nothing
    db = tmp_path / "page.duckdb"
    page_con = store.open_store(db)
    body = "".join(f"0,{100 + i},20\n" for i in range(40))
    (tmp_path / "burst.csv").write_text("arrival,input_tokens,output_tokens\n" + body)
    ingest_file(page_con, tmp_path / "burst.csv", name="burst")
    page_con.close()
    at = app_page("pages/report.py", db, monkeypatch, timeout=240, trace="burst", max_len="4096")
    at.button(key="report_build").click().run()
    assert not at.exception and not at.error and at.success[0].value.startswith("Saved: Capacity report: burst")
    con = store.open_store(db)
    (saved,) = list_reports(con)
    assert "distinct arrival times" in load_report(con, saved["report_id"]).body["recommendations"]["error"]
    con.close()


def test_degenerate_traces_still_report_and_markdown_names_stay_text(con, tmp_path):
    # three requests within half a second, every length the same; a name that Markdown would make an image
    path = tmp_path / "tiny.csv"
    path.write_text("arrival,input_tokens,output_tokens\n0.0,100,20\n0.2,100,20\n0.4,100,20\n")
    info = ingest_file(con, path, name="![t](https://example.invalid/p.png) *x*")
    report = build_report(con, info.trace_id, Scenario(MODEL, GPU, max_model_len=4096), RecommendOptions())
    assert report.simulation.completed == 3 and "arrival_rate" not in report.charts
    page, md = to_html(report, chart_svgs(report.charts)), to_markdown(report)
    assert "<section id=\"recommendations\">" in page
    prose = re.sub(r"```.*?```", "", md, flags=re.S)
    assert "](" not in prose.replace("\\]\\(", "") and "*x*" not in prose and "\\!\\[t\\]\\(https" in prose


def test_a_calibration_file_name_cannot_add_a_line_to_the_reproduce_command():
    from dataclasses import replace

    from planner.report.build import reproduce_command
    from planner.sim.cost_model import CostParams

    source = "calibrated (fit.json\ntouch /tmp/x\n#)"
    scenario = Scenario(MODEL, GPU, cost=replace(CostParams(), source=source))
    command = reproduce_command("abc", scenario, RecommendOptions())
    assert "\n" not in command and command.endswith("# calibrated (fit.json touch /tmp/x #)")


def test_repeated_class_names_are_refused():
    from planner.errors import PlannerError
    from planner.recommend.plan import slo_classes

    with pytest.raises(PlannerError, match="names repeat"):
        slo_classes(("chat:ttft_p99<300", "chat:tpot_p99<50"))
