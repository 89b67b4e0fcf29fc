"""One AppTest per page, the upload path included (Streamlit's own test harness, real DuckDB store)."""

import pytest
from helpers import ROOT, app_page
from streamlit.testing.v1 import AppTest

from planner.catalog.gpus import get_gpu
from planner.catalog.presets import get_model
from planner.recommend.search import Search
from planner.scenario import Scenario
from planner.traces import store
from planner.traces.store_path import default_db_path
from planner.workload.replay import from_trace

BURST = (b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
         b"5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,230,1317,Conversation log\n"
         b"50,GPT-4,0,0,0,Conversation log\n60,ChatGPT,abc,12,12,API log\n")


@pytest.fixture
def app(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def table_with(at, column: str):
    """The first dataframe that has this column (AppTest exposes keys only for selectable dataframes)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_overview_shows_the_bundled_sample(app):
    got = metrics(app)
    assert got["Requests"] == "8,397" and got["Failed"] == "47" and got["Rejected"] == "0"
    assert got["Inter-arrival CV"] == "2.12"          # of the 8,350 requests that did not fail
    # the mean rate is the one every replay scales: (n - 1) / span over the non-failed requests
    con = store.open_store(default_db_path())
    workload = from_trace(con, "sample_chat")
    con.close()
    assert workload.n == 8_350
    assert got["Mean rate"] == f"{(workload.n - 1) / workload.arrival_s[-1]:.3g} req/s"
    search = Search(workload, Scenario(get_model("llama-3-8b"), get_gpu("h100-sxm")))
    assert got["Mean rate"] == f"{search.base_rate:.3g} req/s"
    table = table_with(app, "p999")
    assert list(table["field"]) == ["input_tokens", "output_tokens", "total_tokens", "ttft_ms", "tpot_ms", "e2e_ms"]
    assert table["p50"][0] == 662.0


def test_trace_picker_is_bound_to_the_url(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "q.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["trace"] = "sample_chat"
    at.run()
    assert not at.exception and at.selectbox(key="trace").value == "sample_chat"


def test_a_link_value_the_picker_cannot_take_is_named_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "q.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["trace"] = "nope"
    at.run()
    assert at.selectbox(key="trace").value == "sample_chat"
    # a trace reference is not repeated: the page prints no name or id the workspace does not hold
    assert [w.value for w in at.warning if "link" in w.value] == [
        "Not applied from this link: `trace` (showing `sample_chat`). A control takes only the choices it offers, "
        "within its range, and shows its own value otherwise: compare views only once these are set."]
    assert not [w for w in at.run().warning if "link" in w.value]      # said on arrival, not on every run
    good = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    good.query_params["trace"] = "sample_chat"
    assert not [w for w in good.run().warning if "link" in w.value]


def test_a_link_value_is_applied_when_the_widget_holds_it_as_streamlit_writes_it():
    from pages._link import same, unapplied

    assert same("0.90", 0.9) and same("8192", 8192) and same("true", True) and same("", None)
    assert same("h100-sxm", "h100-sxm") and same("4", 4)
    # the vLLM version's selectbox writes its label to the URL; the widget holds the option
    assert same("0.11: V1 0.11 (FlashInfer sampler; full CUDA graphs for decode)", "0.11")
    assert not same("0.11: V1 0.11 (FlashInfer sampler)", "0.15") and not same("0.110", "0.11")
    assert not same("1.5", 1.0) and not same("3", 1) and not same("abc", None) and not same("1", True)
    from pages._link import echoed

    # a crafted value cannot make the notice's Markdown draw a link or fetch an image
    assert echoed("![x](https://evil.example/a.png)`") == "xhttps://evil.example/a.png"
    assert echoed("a" * 50) == "a" * 40 + "…" and echoed("1.5") == "1.5"
    link = {"tp": "3", "util": "0.9", "cap": "512", "max_len": "abc"}
    # cap: no widget of this page drew it, so nothing is said of it
    assert unapplied(link, {"tp": 1, "util": 0.9, "max_len": None}) == [("tp", "3", 1), ("max_len", "abc", None)]


def test_traces_page_uploads_maps_and_ingests(app):
    app.switch_page("pages/traces.py").run()
    assert not app.exception
    app.file_uploader(key="traces_upload").set_value(("burst.csv", BURST, "text/csv")).run()
    assert not app.exception
    fields = {s.label: s.value for s in app.selectbox if s.key and s.key.startswith("traces_map_")}
    assert fields["input_tokens"] == "Request tokens" and fields["arrival"] == "Timestamp"
    assert any("layout **burstgpt**" in c.value for c in app.caption)
    app.button(key="traces_ingest").click().run()
    assert not app.exception
    got = metrics(app)
    assert (got["Stored"], got["Failed"], got["Rejected"]) == ("3", "1", "1")
    rejects = table_with(app, "reason")
    assert list(rejects["row"]) == [4] and "abc is not a number" in rejects["reason"][0]
    assert app.get("download_button")
    names = list(table_with(app, "created")["name"])
    assert sorted(names) == ["burst", "sample_chat"]


def test_traces_page_deletes_the_picked_trace_and_says_so(app):
    app.switch_page("pages/traces.py").run()
    app.file_uploader(key="traces_upload").set_value(("burst.csv", BURST, "text/csv")).run()
    app.button(key="traces_ingest").click().run()
    ids = dict(zip(*(list(table_with(app, "created")[c]) for c in ("name", "trace_id")), strict=True))
    app.selectbox(key="traces_delete_pick").set_value(ids["burst"]).run()
    app.button(key="traces_delete").click().run()
    assert not app.exception
    assert [s.value for s in app.success] == [f"Deleted burst ({ids['burst']})."]
    assert list(table_with(app, "created")["name"]) == ["sample_chat"]
    app.run()                                    # said once: the next run lists without it
    assert not app.success and list(table_with(app, "created")["name"]) == ["sample_chat"]


def test_a_trace_deleted_and_ingested_again_under_its_id_shows_its_new_figures(app, tmp_path):
    from planner.traces.ingest import ingest_file
    from planner.traces.samples import SAMPLE_PATH

    app.switch_page("pages/overview.py").run()
    tid = app.session_state["selected_trace_id"]
    assert metrics(app)["Mean rate"] == "1.55 req/s"            # cached per trace id
    app.switch_page("pages/traces.py").run()
    app.selectbox(key="traces_delete_pick").set_value(tid).run()
    app.button(key="traces_delete").click().run()
    # the same bytes without their arrival column: the id comes back, the rate does not
    again = ingest_file(store.open_store(tmp_path / "app.duckdb"), SAMPLE_PATH, overrides={"arrival": ""})
    assert again.trace_id == tid and not again.has_timestamps
    app.session_state["selected_trace_id"] = tid
    app.switch_page("pages/overview.py").run()
    assert not app.exception and "Mean rate" not in metrics(app)


def test_traces_page_splits_one_servers_requests_off_and_selects_them(app):
    app.switch_page("pages/traces.py").run()
    ids = dict(zip(*(list(table_with(app, "created")[c]) for c in ("name", "trace_id")), strict=True))
    app.selectbox(key="traces_split_pick").set_value(ids["sample_chat"]).run()
    models = app.selectbox(key="traces_split_model")
    assert models.options == ["llama-3-8b (5,954 rows)", "llama-3-70b (2,443 rows)"]
    models.set_value("llama-3-70b").run()
    app.button(key="traces_split").click().run()
    assert not app.exception
    (said,) = [s.value for s in app.success]
    assert said.startswith("Stored 2,443 rows of llama-3-70b as sample_chat-llama-3-70b (")
    table = table_with(app, "created")
    assert dict(zip(table["name"], table["rows"], strict=True)) == {"sample_chat": 8397,
                                                                     "sample_chat-llama-3-70b": 2443}
    # the sidebar's picker (app.py, which AppTest's switch_page does not run) takes it on the next run
    assert app.session_state["pending_trace"] == "sample_chat-llama-3-70b"
    app.button(key="traces_split").click().run()            # the same split again finds the first
    assert [s.value for s in app.success] == [said.replace("Stored 2,443 rows of llama-3-70b as",
                                                           "llama-3-70b's rows were split off before, as")]
    assert len(table_with(app, "created")) == 2


def test_traces_page_lets_the_user_map_unknown_columns(app):
    app.switch_page("pages/traces.py").run()
    app.file_uploader(key="traces_upload").set_value(("odd.csv", b"when,a,b\n1,10,2\n2,20,3\n", "text/csv")).run()
    assert "no recognisable token columns" in app.warning[0].value
    by_label = {s.label: s for s in app.selectbox if s.key and s.key.startswith("traces_map_")}
    by_label["input_tokens"].set_value("a")
    by_label["output_tokens"].set_value("b")
    app.run()
    app.button(key="traces_ingest").click().run()
    assert not app.exception
    assert metrics(app)["Stored"] == "2"


def test_traces_page_reports_bad_files_without_storing(app):
    app.switch_page("pages/traces.py").run()
    app.file_uploader(key="traces_upload").set_value(("empty.csv", b"", "text/csv")).run()
    assert not app.exception
    assert "is empty" in app.error[0].value
    assert list(table_with(app, "created")["name"]) == ["sample_chat"]
    # the errors name the user's file and the page's Format control, not the temporary copy and a CLI flag
    app.file_uploader(key="traces_upload").set_value(("bad.parquet", b"PAR1 not really", "text/plain")).run()
    error = app.error[0].value
    assert "bad.parquet" in error and "planner-upload-" not in error and "--format" not in error, error
    app.file_uploader(key="traces_upload").set_value(("odd.jsonl", b'{"a": 1}\n{"a": 2}\n', "text/plain")).run()
    assert app.warning[0].value.endswith("(or pick the columns below)"), app.warning[0].value


def test_traces_page_unit_override_reaches_the_store(app, tmp_path):
    from planner.traces import store
    from planner.workload import stats

    app.switch_page("pages/traces.py").run()
    csv = b"arrival_time,prompt_tokens,completion_tokens\n0,1,2\n1500,3,4\n"
    app.file_uploader(key="traces_upload").set_value(("ms.csv", csv, "text/csv")).run()
    app.selectbox(key="traces_arrival_unit").set_value("ms").run()
    app.button(key="traces_ingest").click().run()
    assert not app.exception
    con = store.open_store(tmp_path / "app.duckdb")
    info = store.get_trace(con, "ms")
    assert info.units["arrival"] == "relative_ms"
    assert stats.trace_stats(con, info.trace_id)["arrivals"]["span_s"] == 1.5


def test_workload_page_fits_the_sample(app):
    app.switch_page("pages/workload.py").run()
    assert not app.exception
    got = metrics(app)
    assert got["Requests fitted"] == "8,350" and got["Cap"] == "7936" and got["Censored"] == "1.64%"
    assert got["Best fit (AIC)"] == "lognormal_pareto"
    ranking = table_with(app, "delta_aic")
    # the empirical row has no AIC: the column is written as text, its empty cell "—", never "None"
    assert ranking["delta_aic"][0] == "0" and ranking["family"][0] == "lognormal_pareto"
    assert list(ranking["aic"])[-1] == "—"
    assert "empirical" in list(ranking["family"]) and len(app.get("vega_lite_chart")) == 3
    assert sorted(set(table_with(app, "group")["group"])) == ["llama-3-70b", "llama-3-8b"]

    app.segmented_control(key="field").set_value("output_tokens").run()
    app.number_input(key="cap").set_value(512).run()
    got = metrics(app)
    assert got["Cap"] == "512" and float(got["Censored"].rstrip("%")) > 5


@pytest.mark.parametrize("view, expected", [
    ("Arrivals", {"Inter-arrival CV": "2.12", "Poisson?": "rejected", "Mean rate": "1.55 req/s"}),
    ("Joint", {"Spearman ρ (input, output)": "-0.005"}),
])
def test_workload_views_are_bound_to_the_url(tmp_path, monkeypatch, view, expected):
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "v.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["view"] = view
    at.run()
    at.switch_page("pages/workload.py").run()
    assert not at.exception
    assert expected.items() <= metrics(at).items()


def test_workload_latency_view_names_the_driver_bucket(app):
    app.session_state["view"] = "Latency"
    app.switch_page("pages/workload.py").run()
    assert not app.exception
    notes = [m.value for m in app.markdown if "holds most requests above it" in m.value]
    assert len(notes) == 6 and "bucket **2048+**" in notes[0]
    app.text_input(key="buckets").set_value("1000").run()
    assert list(table_with(app, "tail_lift")["bucket"]) == ["0–1000", "1000+"]
    for bad in ("abc", "0", "nan", "2048,512"):        # a 0 or a NaN edge broke the bucket query (ParserException)
        app.text_input(key="buckets").set_value(bad).run()
        assert not app.exception
        assert app.error[0].value == f"Bucket edges {bad!r}: expected increasing positive token counts such as 512,2048"


@pytest.mark.parametrize("view, message", [("Arrivals", "no timestamps"), ("Latency", "no TTFT")])
def test_workload_page_on_a_lengths_only_trace(tmp_path, monkeypatch, view, message):
    from planner.traces import store
    from planner.traces.ingest import ingest_file

    db = tmp_path / "lo.duckdb"
    con = store.open_store(db)
    path = tmp_path / "lengths.csv"
    path.write_text("input_tokens,output_tokens\n" + "".join(f"{10 + i * 7},{3 + i % 11}\n" for i in range(40)))
    ingest_file(con, path)
    con.close()
    monkeypatch.setenv("PLANNER_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["trace"] = "lengths"
    at.query_params["view"] = view
    at.run()
    at.switch_page("pages/workload.py").run()
    assert not at.exception
    assert message in at.info[0].value


def test_workload_arrivals_of_one_instant_show_no_rate_and_no_test(tmp_path, monkeypatch):
    # every request at one instant: no mean rate (it raised a TypeError formatting None) and no Poisson test to run
    # (the tile said "rejected")
    from planner.traces.ingest import ingest_file

    db = tmp_path / "burst.duckdb"
    con = store.open_store(db)
    (tmp_path / "burst.csv").write_text("arrival,input_tokens,output_tokens\n" + "5,100,20\n" * 3)
    ingest_file(con, tmp_path / "burst.csv")
    con.close()
    at = app_page("pages/workload.py", db, monkeypatch, trace="burst", view="Arrivals")
    assert not at.exception
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Mean rate"] == "—" and tiles["Poisson?"] == "untested"


def test_no_data_grid_shows_an_empty_cell_as_none(tmp_path, monkeypatch):
    """Streamlit draws a missing value as "None": every grid of every page holds values or "—"."""
    import numpy as np

    from planner.traces.ingest import ingest_file

    db = tmp_path / "grids.duckdb"
    con = store.open_store(db)
    rng = np.random.default_rng(2)
    prompts = np.where(rng.random(200) < 0.3, 9_000, rng.integers(100, 3_000, 200))
    rows = "\n".join(f"{0.4 * k:.1f},{p},{o},{40 + k % 7}" for k, (p, o) in
                     enumerate(zip(prompts, rng.integers(20, 300, 200), strict=True)))
    (tmp_path / "t.csv").write_text("arrival,input_tokens,output_tokens,ttft_ms\n" + rows + "\n")
    ingest_file(con, tmp_path / "t.csv", name="grids")
    con.close()
    monkeypatch.setenv("PLANNER_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["trace"] = "grids"
    at.query_params["slos"] = "chat:ttft_p99<5000"
    at.run()
    seen = 0
    for page, views in (("pages/overview.py", [None]), ("pages/workload.py", ["Lengths", "Arrivals", "Latency"]),
                        ("pages/memory.py", [None]), ("pages/simulate.py", [None]), ("pages/recommend.py", [None])):
        for view in views:
            if view:
                at.query_params["view"] = view
            at.switch_page(page).run()
            assert not at.exception, page
            for grid in at.dataframe:
                seen += 1
                assert not grid.value.isna().any().any(), (page, view, list(grid.value.columns))
            if page in ("pages/simulate.py", "pages/recommend.py"):     # 30% of the prompts exceed 8,192
                assert any("were rejected: their prompts" in w.value for w in at.warning), page
    assert seen >= 10
    # the report says it too, once built
    at.switch_page("pages/report.py").run()
    at.button(key="report_build").click().run()
    assert not at.exception and any("were rejected: their prompts" in w.value for w in at.warning)


def test_simulate_page_runs_a_fleet_behind_a_router(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "fleet.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["replicas"] = "3"
    at.query_params["router"] = "round-robin"
    at.query_params["scale"] = "4"
    at.run()
    at.switch_page("pages/simulate.py").run()
    assert not at.exception
    grid = table_with(at, "replica")
    assert list(grid["replica"]) == [1, 2, 3] and grid["requests"].sum() > 0
    # round-robin: the replicas' shares differ by at most one request
    assert grid["requests"].max() - grid["requests"].min() <= 1
    assert any(m.label == "Queue" and m.value in ("stable", "backlogged", "overloaded") for m in at.metric)
    assert any("3 replicas (round-robin)" in c.value for c in at.caption)
    # the KV pool margin names the pool the page simulated (warning or caption, by how near the edge is)
    blocks = next(m.value for m in at.metric if m.label == "KV blocks")
    edge = [e.value for e in (*at.caption, *at.warning) if e.value.startswith("KV pool margin: The queue")]
    assert len(edge) == 1 and f"at {blocks} KV blocks" in edge[0]


def test_simulate_page_shows_no_latency_where_none_was_measured(tmp_path, monkeypatch):
    # every prompt past max_model_len: the metrics read "0 ms" for percentiles of nothing
    at = app_page("pages/simulate.py", tmp_path / "none.duckdb", monkeypatch, source="synthetic",
                  spec="requests=50,input=99999,output=64,qps=8")
    assert not at.exception
    got = {m.label: m.value for m in at.metric}
    assert (got["Completed"], got["TTFT p99"], got["TPOT p99"], got["Queueing p99"]) == ("0", "—", "—", "—")
    assert any("50 of 50 requests (100.0%) were rejected" in w.value for w in at.warning)


def test_prefix_reuse_and_cache_on_the_pages(tmp_path, monkeypatch):
    """The sample's sessions give a derived prefix identity: the Workload page's reuse, the Memory page's pool and
    the Simulate page's hits show the planner's own figures."""
    from planner.capacity.report import prefix_cache_capacity
    from planner.workload.tables import trace_reuse

    at = app_page("pages/workload.py", tmp_path / "prefix.duckdb", monkeypatch, view="Prefix reuse",
                  memory_view="Prefix cache")
    assert not at.exception
    reuse_metrics = metrics(at)
    assert any("derived from sessions" in c.value for c in at.caption)
    at.switch_page("pages/memory.py").run()
    assert not at.exception
    memory_metrics = metrics(at)
    hold_delta = next(m.delta for m in at.metric if m.label == "gpu_memory_utilization to hold it")
    at.switch_page("pages/simulate.py").run()
    assert not at.exception
    cache = table_with(at, "hit rate")
    assert list(cache["cache"]) == ["on"] and list(cache["identity"]) == ["sessions"]
    assert cache["hit tokens"][0] > 0
    at.toggle(key="prefix_caching").set_value(False).run()
    off = table_with(at, "hit rate")
    assert list(off["cache"]) == ["off"] and off["hit tokens"][0] == 0
    # the same figures from the planner, on the store the app wrote (the app's connection lives in this process)
    from pages._shared import connection
    con = connection()
    reuse = trace_reuse(con, "sample_chat")
    assert reuse_metrics["Ideal hit rate"] == f"{reuse.ideal_hit_rate:.1%}"
    assert reuse_metrics["Working set"] == f"{reuse.working_set_tokens:,} tokens"
    expected = prefix_cache_capacity(Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")), reuse)
    assert memory_metrics["LRU hit rate at this pool"] == f"{expected['lru_hit_rate_at_pool']:.1%}"
    util = expected["gpu_memory_utilization_to_hold"]
    assert memory_metrics["gpu_memory_utilization to hold it"] == f"{util:.2f}"
    # a fraction above 1 is no setting: the metric says these GPUs cannot hold it
    assert (hold_delta == "beyond these GPUs") == (util > 1), (util, hold_delta)
    assert memory_metrics[f"KV for {expected['holding_share']:.0%} of ideal"] == f"{expected['holding_gib']:,.1f} GiB"
    plan = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm")).memory
    assert expected["pool_gib"] == expected["pool_tokens"] * plan.kv_bytes_per_token / 2**30


def test_the_memory_page_shows_a_dash_where_no_kv_size_holds_the_reuse(tmp_path, monkeypatch):
    # one request: no reuse to hold, so no size and no utilization (the tile read "0.0 GiB")
    from planner.traces.ingest import ingest_file

    db = tmp_path / "one.duckdb"
    con = store.open_store(db)
    (tmp_path / "one.csv").write_text("arrival,input_tokens,output_tokens\n0,300,20\n")
    ingest_file(con, tmp_path / "one.csv")
    con.close()
    at = app_page("pages/memory.py", db, monkeypatch, trace="one", shared_prefix="64:1", memory_view="Prefix cache")
    assert not at.exception
    got = metrics(at)
    assert got["KV for 95% of ideal"] == got["gpu_memory_utilization to hold it"] == "—"


def test_simulate_page_replays_the_traces_fitted_lengths(tmp_path, monkeypatch):
    """The fitted workload draws 10,000 requests from the trace's best-ranked length fits."""
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "fitted.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["source"] = "trace lengths, fitted"
    at.run()
    at.switch_page("pages/simulate.py").run()
    assert not at.exception
    assert metrics(at)["Completed"] == "10,000"
    from planner.workload.fits import fit_length_field

    con = store.open_store(default_db_path())
    trace_id = store.get_trace(con, "sample_chat").trace_id
    best = [fit_length_field(con, trace_id, f).best for f in ("input_tokens", "output_tokens")]
    con.close()
    assert any(c.value.startswith(f"fitted lengths ({best[0]} / {best[1]}) at 2 req/s") for c in at.caption)


def test_simulate_page_sets_the_replay_beside_the_traces_own_latencies(tmp_path, monkeypatch):
    """The sample carries TTFT and TPOT, measured on two servers (its model column names llama-3-8b and
    llama-3-70b): a replay of one server's requests at their own rate is shown against that server's latencies,
    table and CDFs; a replay of both servers' traffic on one scenario is compared with neither."""
    from planner.sim.trace_calibration import latency_errors
    from planner.workload.replay import measured_latencies

    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "measured.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/simulate.py").run()
    assert not at.exception
    assert at.selectbox(key="served_by").options == ["all requests", "llama-3-8b", "llama-3-70b"]
    assert metrics(at)["Completed"] == "8,350"
    assert not any("measured_ms" in d.value.columns for d in at.dataframe)
    assert any(c.value.startswith("The trace's latencies were measured on 2 servers (llama-3-8b, llama-3-70b)")
               for c in at.caption)
    at.selectbox(key="served_by").set_value("llama-3-70b").run()
    assert not at.exception and metrics(at)["Completed"] == "2,429"
    grid = table_with(at, "measured_ms")
    assert list(grid["metric"]) == ["TTFT mean", "TTFT p50", "TTFT p90", "TTFT p99", "TPOT mean", "TPOT p50",
                                    "TPOT p90", "TPOT p99"]
    from pages._shared import connection
    _, ttft, tpot, _ = measured_latencies(connection(), "sample_chat", trace_model="llama-3-70b")
    expected = latency_errors(ttft, tpot, ttft, tpot)          # the measured side, from the planner directly
    assert grid["measured_ms"].tolist() == pytest.approx([r["measured_ms"] for r in expected])
    assert (grid["error"] == grid["predicted_ms"] / grid["measured_ms"] - 1).all()
    # the scenario's model (llama-3-8b) is not the one that server ran: the page says so, as the CLI does
    [warning] = [w.value for w in at.warning if "replayed as" in w.value]
    assert warning.startswith("The trace says llama-3-70b served these requests, and they are replayed as llama-3-8b")
    # calibrating says it once, not again among the fit's warnings (which open with the same note, as the CLI's do)
    at.button(key="calibrate").click().run()
    assert not at.exception and table_with(at, "part")["part"][0] == "in-sample (1,700 requests)"
    assert [w.value for w in at.warning if "replayed as" in w.value] == [warning]
    # a replay sped up is not the trace's own load: nothing to compare with
    at.number_input(key="scale").set_value(2.0).run()
    assert not any("measured_ms" in d.value.columns for d in at.dataframe)
    # a link naming a model the trace does not: the page replays every request
    link = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    link.query_params["served_by"] = "gpt-4"
    link.run()
    link.switch_page("pages/simulate.py").run()
    assert not link.exception and metrics(link)["Completed"] == "8,350"


def test_traces_page_reads_a_glob_on_the_server_only_where_the_deployment_allows(tmp_path, monkeypatch):
    import duckdb

    root = tmp_path / "shared-traces"
    (root / "day").mkdir(parents=True)
    for i, n in enumerate((3, 4)):
        duckdb.connect().execute(f"COPY (SELECT range * 1.0 AS timestamp, 100 AS input_tokens, 5 AS output_tokens "
                                 f"FROM range({n})) TO '{root / 'day' / f'part-{i}.parquet'}'")
    outside = tmp_path / "private.csv"
    outside.write_text("input_tokens,output_tokens\n1,1\n")
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/traces.py").run()
    assert not at.exception
    assert not [t for t in at.text_input if t.key == "traces_server_path"]      # off by default
    assert any("PLANNER_SERVER_PATHS" in i.value for i in at.info)

    monkeypatch.setenv("PLANNER_SERVER_PATHS", str(root))
    at.run()
    at.text_input(key="traces_server_path").set_value(str(outside)).run()
    assert any("outside the folders" in e.value for e in at.error)
    at.text_input(key="traces_server_path").set_value(str(root / "day" / "part-*.parquet")).run()
    assert not at.exception and any("2 files" in c.value for c in at.caption)
    at.button(key="traces_server_ingest").click().run()
    assert not at.exception
    assert metrics(at)["Stored"] == "7"
    assert "shared-traces" not in list(table_with(at, "created")["name"]) and \
        "day" in list(table_with(at, "created")["name"])
    # a server file no layout maps is a warning naming it (it raised NameError: the upload's names were used)
    (root / "odd.csv").write_text("foo,bar\n1,2\n")
    at.text_input(key="traces_server_path").set_value(str(root / "odd.csv")).run()
    assert not at.exception and any("odd.csv" in w.value or "input_tokens" in w.value for w in at.warning)


def test_every_page_opens_on_a_trace_stored_as_its_summary(tmp_path, monkeypatch):
    """A summary keeps no requests: the pages show what it holds (stats, length fits, recommendations, a report)
    and say plainly where a view needs requests, instead of failing."""
    import duckdb

    from planner.traces.ingest import ingest_file
    from planner.traces.samples import SAMPLE_PATH
    from planner.traces.summary import ingest_summary, summary_statements

    con = store.open_store(tmp_path / "app.duckdb")
    info = ingest_file(con, SAMPLE_PATH, name="sample_chat")
    con.execute(f"COPY (SELECT arrival AS arrival_s, input_tokens, output_tokens, ttft_ms, tpot_ms, e2e_ms, failed "
                f"FROM {store.requests_view(info.trace_id)}) TO '{tmp_path / 'r.parquet'}'")
    warehouse = duckdb.connect()
    warehouse.execute(f"CREATE VIEW requests AS SELECT * FROM read_parquet('{tmp_path / 'r.parquet'}')")
    (tmp_path / "summary").mkdir()
    for name, sql in summary_statements().items():
        warehouse.execute(f"COPY ({sql}) TO '{tmp_path / 'summary' / (name + '.parquet')}'")
    ingest_summary(con, tmp_path / "summary", name="summ")
    con.close()
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "app.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["trace"] = "summ"
    at.run()
    for page in ("pages/overview.py", "pages/workload.py", "pages/memory.py", "pages/simulate.py",
                 "pages/recommend.py"):
        at.switch_page(page).run()
        assert not at.exception, page
    for view in ("Arrivals", "Joint", "Latency"):
        at.query_params["view"] = view
        at.switch_page("pages/workload.py").run()
        assert not at.exception and any("This trace is a summary" in i.value for i in at.info), view
    at.switch_page("pages/report.py").run()
    at.button(key="report_build").click().run()
    assert not at.exception


@pytest.mark.parametrize("gpu, applied", [
    # the L40S's own defaults (its GEMMs against the H100's), not the A100/H100 0.55 / 0.80, and the knee of 2
    ("l40s", "MFU 0.487, MBU 0.754, roofline knee p 2."),
    # an H100's steps stay memory-bound further: its knee is 4
    ("h100-sxm", "MFU 0.55, MBU 0.8, roofline knee p 4."),
])
def test_the_scenario_states_the_gpu_familys_step_efficiencies(tmp_path, monkeypatch, gpu, applied):
    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "family.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["gpu"] = gpu
    at.run()
    at.switch_page("pages/memory.py").run()
    assert not at.exception
    assert any(applied in c.value for c in at.caption)


def test_the_scenario_warns_when_a_calibration_was_fitted_on_another_gpu(tmp_path, monkeypatch):
    # a calibration measured on one A100 with Llama-3-8B under V1, kept in the session as an upload leaves it
    from planner.sim.cost_model import CostParams, FittedOn

    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "calibrated.duckdb"))
    fitted = CostParams(mfu=0.45, mbu=0.7, source="calibrated (a100.json)",
                        fitted_on=FittedOn("llama-3-8b", "a100-80gb-sxm", 1, "vllm-v1", ("mfu", "mbu")))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["model"], at.query_params["gpu"] = "llama-3-8b", "a100-80gb-sxm"
    at.run()
    at.session_state["cost_params"] = fitted
    at.switch_page("pages/memory.py").run()
    assert not at.exception
    assert not any("The calibration was fitted" in w.value for w in at.warning)
    assert any("MFU 0.45, MBU 0.7" in c.value for c in at.caption)
    # the same file on an H100: its MFU and MBU still apply, and the page says they are the A100's
    at.selectbox(key="gpu").set_value("h100-sxm").run()
    warned = [w.value for w in at.warning if "The calibration was fitted" in w.value]
    assert len(warned) == 1 and "fitted on a100-80gb-sxm and is applied to h100-sxm" in warned[0]
    assert any("MFU 0.45, MBU 0.7" in c.value for c in at.caption)


def test_simulate_page_calibrates_to_the_traces_latencies_and_applies_the_fit(tmp_path, monkeypatch):
    """The sample carries TTFT and TPOT: the page fits MFU and MBU to its first 70% of arrivals, shows the error
    on both parts, offers the file, and applies it to the session's scenario on request."""
    from planner.catalog.gpus import get_gpu
    from planner.catalog.presets import get_model
    from planner.scenario import Scenario
    from planner.sim.trace_calibration import fit_trace_held_out
    from planner.workload.replay import measured_latencies

    monkeypatch.setenv("PLANNER_DB", str(tmp_path / "calibrate.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["model"], at.query_params["gpu"] = "llama-3-8b", "a100-80gb-sxm"
    at.run()
    at.switch_page("pages/simulate.py").run()
    at.selectbox(key="served_by").set_value("llama-3-8b").run()
    # a fleet's replay is not what the fit replays (one server, the trace as stored): no button, and why
    at.number_input(key="replicas").set_value(2).run()
    assert not [b for b in at.button if b.key == "calibrate"]
    assert any(c.value.startswith("Calibration fits one server to the trace as stored") for c in at.caption)
    at.number_input(key="replicas").set_value(1).run()
    at.button(key="calibrate").click().run()
    assert not at.exception
    grid = table_with(at, "part")
    # the sample's latencies were measured on two models' servers: the fit takes llama-3-8b's and says so
    assert len(grid) == 16 and grid["part"][0] == "in-sample (4,145 requests)"
    assert grid["part"][15] == "held-out (1,776 requests)"
    assert any(w.value.startswith("Calibrated on the 5,921 requests the trace says llama-3-8b served") for w in
               at.warning)
    # the same fit the CLI makes, from the planner directly
    from pages._shared import connection
    scenario = Scenario(get_model("llama-3-8b"), get_gpu("a100-80gb-sxm"))
    work, ttft, tpot, _ = measured_latencies(connection(), "sample_chat", scenario.model)
    fit = fit_trace_held_out(scenario, work, ttft, tpot)
    assert grid["predicted_ms"].tolist() == pytest.approx(
        [r["predicted_ms"] for split in ("in_sample", "held_out") for r in fit[split]["metrics"]])
    shown = f"MFU {fit['params']['mfu']:.3g}, MBU {fit['params']['mbu']:.3g} (in place of MFU 0.55, MBU 0.8)"
    assert any(shown in m.value for m in at.markdown)
    assert [b.label for b in at.get("download_button")] == ["Download the calibration file"]
    at.button(key="calibration_apply").click().run()
    assert not at.exception
    assert any(c.value == "Cost model: calibrated (sample_chat, Simulate page)" for c in at.caption)
    held = fit["held_out"]
    assert any(c.value.startswith("The calibration's own fit: ") and f"{held['median_abs_error']:.1%} median "
               f"absolute error on held-out data, bias {held['bias']:+.1%}" in c.value for c in at.caption)
    assert any(f"step costs at MFU {fit['params']['mfu']:.3g}, MBU {fit['params']['mbu']:.3g}," in c.value
               for c in at.caption)
    # fitted on this server: nothing to warn of; and the defaults are one click away
    assert not any("The calibration was fitted" in w.value for w in at.warning)
    at.button(key="cost_defaults").click().run()
    assert any(c.value == "Cost model: defaults (reference/performance-models.md)" for c in at.caption)


@pytest.mark.parametrize("rows", ["100,20\n", "100,20\n" * 30])
def test_workload_lengths_of_one_request_or_one_value_say_why_nothing_is_fitted(tmp_path, monkeypatch, rows):
    # the Lengths tab raised the fit's PlannerError for one request, or for lengths all alike
    from planner.traces.ingest import ingest_file

    db = tmp_path / "few.duckdb"
    con = store.open_store(db)
    (tmp_path / "few.csv").write_text("input_tokens,output_tokens\n" + rows)
    ingest_file(con, tmp_path / "few.csv")
    con.close()
    at = app_page("pages/workload.py", db, monkeypatch, trace="few", view="Lengths")
    assert not at.exception
    assert "nothing to fit" in at.info[0].value or "distinct" in at.info[0].value
    assert at.dataframe        # the exact percentiles are still shown


def test_a_trace_deleted_and_ingested_again_shows_its_new_prefix_reuse(app, tmp_path):
    # the prefix reuse is a resource cache shared by sessions: deleting the trace had left its sessions' reuse
    from planner.traces.ingest import ingest_file

    rows = "".join(f"{i},{100 + 50 * (i % 3)},20,s{i // 3}\n" for i in range(30))
    path = tmp_path / "sess.csv"
    path.write_text("arrival,input_tokens,output_tokens,session_id\n" + rows)
    tid = ingest_file(store.open_store(tmp_path / "app.duckdb"), path).trace_id

    def reuse_groups():
        app.session_state["selected_trace_id"] = tid
        app.session_state["view"] = "Prefix reuse"
        app.switch_page("pages/workload.py").run()
        assert not app.exception
        return {m.label: m.value for m in app.metric}.get("Groups (session)")

    assert reuse_groups() == "10"
    app.switch_page("pages/traces.py").run()
    app.selectbox(key="traces_delete_pick").set_value(tid).run()
    app.button(key="traces_delete").click().run()
    again = ingest_file(store.open_store(tmp_path / "app.duckdb"), path, overrides={"session_id": ""})
    assert again.trace_id == tid and reuse_groups() is None
