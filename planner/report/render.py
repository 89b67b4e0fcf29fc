"""A report's HTML and Markdown twins. The HTML is one self-contained file: charts are SVG rendered here by
vl-convert (no JavaScript, no network) and embedded as ``data:`` images (an image never runs a script, and
sanitizers such as Streamlit's ``st.html`` keep them), styles inline, and a Content-Security-Policy that forbids
every fetch and script. Every text that came from a user (trace, file, column, model, class names) is escaped."""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from planner.capacity.report import memory_plan_table, prefix_capacity_table
from planner.recommend.table import FLEET_CHARTS, class_table, fleet_table, schedule_tables
from planner.tables import Table, fmt
from planner.workload.stats import stats_percentile_rows

if TYPE_CHECKING:
    from planner.report.build import Report

SECTIONS = (("workload", "Workload"), ("memory", "Memory and capacity"), ("simulation", "Simulation"),
            ("recommendations", "Recommendations"), ("sensitivity", "Sensitivity"),
            ("assumptions", "Assumptions and reproduction"))
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
# every rule scoped to the report's own wrapper: shown inside the app (st.html) it must not restyle the page
STYLE = """.cr{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1b1f24}
.cr table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:13px}.cr th,.cr td{border:1px solid #d0d7de;
padding:3px 8px;text-align:right}.cr th{background:#f3f5f7}.cr td:first-child,.cr th:first-child{text-align:left}
.cr pre{background:#f6f8fa;padding:.6em;overflow-x:auto;white-space:pre-wrap}.cr figure{margin:1em 0}
.cr figcaption{color:#57606a;font-size:12px}.cr .meta{color:#57606a}.cr img{max-width:100%}
.cr .scroll{overflow-x:auto}.cr nav a{margin-right:1em}
.cr h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:2em}"""


def chart_svgs(specs: dict[str, dict]) -> dict[str, str]:
    """Each Vega-Lite spec rendered to SVG markup (vl-convert bundles Vega; no browser, no network)."""
    import vl_convert

    return {name: vl_convert.vegalite_to_svg(spec) for name, spec in specs.items()}


def _image(name: str, svg: str) -> str:
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{html.escape(name)}" src="data:image/svg+xml;base64,{data}">'


def _warnings(report: Report) -> list[str]:
    """What the report's figures rest on that the reader should know: the trace's, then the calibration's (where
    it is applied, then what its file says of its fit)."""
    return [*report.assumptions["trace_warnings"], *report.assumptions["calibration_warnings"],
            *report.assumptions["calibration_fit"]]


def _rows(report: Report) -> dict[str, list[Table]]:
    """Per section, its tables: the one source both twins render (the recommendation and simulation tables are the
    pages' own builders)."""
    out = {key: [] for key, _ in SECTIONS}
    out["workload"].append(replace(Table.of(stats_percentile_rows(report.stats)),
                                   caption="Request lengths and measured latencies"))
    fits = []
    for f, fit in report.fits.items():
        if "error" in fit:
            fits.append([f, None, None, None, None, fit["error"]])
            continue
        best = fit["candidates"][0]
        params = json.dumps({k: round(v, 4) for k, v in (best.get("params") or {}).items()})
        fits.append([f, fit["best"], fit["censored_at"], f"{fit['censored_fraction']:.2%}", best.get("ks"), params])
    out["workload"].append(Table("Length fits (censored MLE, ranked by AIC)",
                                 ["field", "best", "censored at", "censored", "KS", "parameters"], fits))
    if report.arrivals:
        arr = report.arrivals
        out["workload"].append(Table("Arrivals", ["span s", "mean req/s", "peak req/s (p99 per minute)", "CV",
                                                  "Poisson-consistent", "best inter-arrival fit"],
                                     [[arr["span_s"], arr["peaks"]["mean_rate_rps"], arr["peaks"]["peak_rate_rps"],
                                       arr["fit"]["cv"], arr["fit"]["poisson_consistent"], arr["fit"]["best"]]]))
    plan = report.memory.plan
    out["memory"].append(memory_plan_table(plan))
    breakdown = plan.breakdown_gib()
    out["memory"].append(Table("Where the memory goes (GiB)", list(breakdown), [list(breakdown.values())]))
    if report.memory.trace:
        trace = report.memory.trace
        out["memory"].append(Table("Concurrency on this trace", list(trace), [list(trace.values())]))
    if report.memory.prefix_cache:
        out["memory"].append(prefix_capacity_table(report.memory.prefix_cache))
    sim = report.simulation
    if sim:
        latency = sim.latency_table()
        out["simulation"].append(replace(latency, caption=f"Replay at the trace's own rate ({sim.engine}): "
                                                          f"{latency.caption}"))
        out["simulation"].append(sim.throughput_table())
        out["simulation"].append(sim.prefix_cache_table())
        if report.kv_margin:
            out["simulation"].append(report.kv_margin.table())
    if report.recommendation:
        out["recommendations"].append(class_table(report.recommendation))
        out["recommendations"].append(fleet_table(report.recommendation))
        out["recommendations"] += schedule_tables(report.recommendation)
    return out


def _missing(key: str, report: Report) -> str | None:
    """Why a section is empty, in one sentence, or what it leaves out."""
    if key in ("simulation", "recommendations", "sensitivity") and report.simulation is None:
        return "The trace has no arrival times, and replaying it at a rate needs them: no simulation here."
    if key in ("recommendations", "sensitivity") and report.recommendation_error:
        return f"No recommendation: {report.recommendation_error}"
    if key == "simulation":
        return " ".join(report.simulation.notes) or None
    return None


def _class_notes(report: Report) -> list[tuple[str, str, list[str]]]:
    classes = report.recommendation.classes if report.recommendation else []
    return [(r.name, r.launch_command, (r.details or {}).get("diagnosis", [])) for r in classes]


def _charts_of(section: str, report: Report) -> list[str]:
    names = list(report.charts)
    if section == "workload":
        return [n for n in names if n.endswith("_histogram") or n == "arrival_rate"]
    if section == "memory":
        return [n for n in names if n in ("memory_breakdown", "concurrency", "prefix_reuse")]
    if section == "simulation":
        return [n for n in names if n.startswith("simulation_")]
    if section == "recommendations":
        return [n for n in names if n.rpartition(":")[2] in FLEET_CHARTS]
    if section == "sensitivity":
        return [n for n in names if ":" in n and n.rpartition(":")[2] not in FLEET_CHARTS]
    return []


def _facts(report: Report) -> str:
    """The scenario and assumptions block both twins print (JSON)."""
    body = report.to_dict()
    return json.dumps({"scenario": body["scenario"], **body["assumptions"]}, indent=1)


def to_html(report: Report, svgs: dict[str, str]) -> str:
    """The self-contained HTML twin; ``svgs`` from :func:`chart_svgs`."""
    e = html.escape
    t = report.trace
    parts = [f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<title>{e(report.title)}</title><style>{STYLE}</style></head><body><div class=cr>",
             f"<h1>{e(report.title)}</h1>",
             f"<p class=meta>Trace <b>{e(t['name'])}</b> (id <code>{e(t['trace_id'])}</code>, content SHA-256 "
             f"<code>{e(t['content_sha256'])}</code>, {fmt(t['rows'])} requests, file {e(t['source_file'])}) · "
             f"planner {e(report.app_version)} · {e(report.created_utc)}</p>",
             "<nav>" + "".join(f'<a href="#{key}">{e(title)}</a>' for key, title in SECTIONS) + "</nav>"]
    tables = _rows(report)
    for key, title in SECTIONS:
        parts.append(f'<section id="{key}"><h2>{e(title)}</h2>')
        if _missing(key, report):
            parts.append(f"<p>{e(_missing(key, report))}</p>")
        for table in tables[key]:
            parts.append(f"<div class=scroll><table><caption>{e(table.caption)}</caption><tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in table.columns) + "</tr>"
                         + "".join("<tr>" + "".join(f"<td>{e(fmt(v))}</td>" for v in row) + "</tr>"
                                   for row in table.rows)
                         + "</table></div>")
        if key == "recommendations":
            for name, command, notes in _class_notes(report):
                parts.append(f"<h3>{e(name)}</h3><pre>{e(command)}</pre>"
                             + ("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>" if notes else ""))
        for name in _charts_of(key, report):
            if name in svgs:
                parts.append(f"<figure>{_image(name, svgs[name])}<figcaption>{e(name)}</figcaption></figure>")
        if key == "assumptions":
            parts += [f"<p><b>Warning:</b> {e(w)}</p>" for w in _warnings(report)]
            parts.append(f"<p>Reproduce:</p><pre>{e(report.assumptions['reproduce'])}</pre>")
            parts.append("<pre>" + e(_facts(report)) + "</pre>")
        parts.append("</section>")
    parts.append("</div></body></html>")
    return "\n".join(parts)


def markdown_text(text) -> str:
    """``text`` (or a number, formatted) safe in Markdown: no HTML, link, image or emphasis can come of it."""
    # Markdown renders inline HTML: escape it
    text = html.escape(fmt(text) if not isinstance(text, str) else text, quote=False)
    # and Markdown's own syntax: a name must not become a link, an image or emphasis
    return re.sub(r"([\\`*_{}\[\]()#+!|~])", r"\\\1", text).replace("\n", " ")


def to_markdown(report: Report) -> str:
    """The Markdown twin: the same tables, commands and diagnosis; charts are in the HTML twin."""
    t, md = report.trace, markdown_text
    lines = [f"# {md(report.title)}", "",
             f"Trace **{md(t['name'])}** (id `{t['trace_id']}`, content SHA-256 `{t['content_sha256']}`, "
             f"{fmt(t['rows'])} requests, file {md(t['source_file'])}) · planner {md(report.app_version)} · "
             f"{md(report.created_utc)}", ""]
    tables = _rows(report)
    for key, title in SECTIONS:
        lines += [f"## {title}", ""] + ([md(_missing(key, report)), ""] if _missing(key, report) else [])
        for table in tables[key]:
            lines += [f"**{md(table.caption)}**", "", "| " + " | ".join(md(h) for h in table.columns) + " |",
                      "|" + "---|" * len(table.columns)]
            lines += ["| " + " | ".join(md(v) for v in row) + " |" for row in table.rows]
            lines.append("")
        if key == "recommendations":
            for name, command, notes in _class_notes(report):
                lines += [f"### {md(name)}", "", "```bash", command.replace("```", "'''"), "```", ""]
                lines += [f"- {md(n)}" for n in notes] + [""]
        charts = _charts_of(key, report)
        if charts:
            lines += [f"Charts in the HTML twin: {', '.join(md(c) for c in charts)}.", ""]
        if key == "assumptions":
            for warning in _warnings(report):
                lines += [f"**Warning:** {md(warning)}", ""]
            lines += ["```bash", report.assumptions["reproduce"].replace("```", "'''"), "```", "", "```json",
                      _facts(report).replace("```", "'''"), "```", ""]
    return "\n".join(lines)


def twins(report: Report) -> dict[str, str]:
    """The report as each format's text: ``html`` (charts rendered here), ``md`` and ``json``."""
    return {"html": to_html(report, chart_svgs(report.charts)), "md": to_markdown(report),
            "json": json.dumps(report.to_dict())}
