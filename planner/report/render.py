"""A report's HTML and Markdown twins. The HTML is one self-contained file: charts are SVG rendered here by
vl-convert (no JavaScript, no network) and embedded as ``data:`` images (an image never runs a script, and
sanitizers such as Streamlit's ``st.html`` keep them), styles inline, and a Content-Security-Policy that forbids
every fetch and script. Every text that came from a user (trace, file, column, model, class names) is escaped."""

from __future__ import annotations

import base64
import html
import json
import math
import re

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


def _num(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def _rows(report: dict) -> dict[str, list[tuple[str, list[str], list[list]]]]:
    """Per section, its tables as (caption, header, rows of raw values): the one source both twins render."""
    stats, wl = report["workload"]["stats"], report["workload"]
    pct = ("mean", "p50", "p90", "p99", "max")
    out: dict[str, list] = {key: [] for key, _ in SECTIONS}
    lengths = [[f, *[stats[f].get(p) for p in pct]] for f in ("input_tokens", "output_tokens", "total_tokens")
               if stats.get(f)]
    latencies = [[f"{k} ms", *[v.get(p) for p in pct]] for k, v in (stats.get("latency_ms") or {}).items()]
    out["workload"].append(("Request lengths and measured latencies", ["field", *pct], lengths + latencies))
    fits = []
    for f, fit in wl["fits"].items():
        if "error" in fit:
            fits.append([f, "—", None, "—", None, fit["error"]])
            continue
        best = fit["candidates"][0]
        params = json.dumps({k: round(v, 4) for k, v in (best.get("params") or {}).items()})
        fits.append([f, fit["best"], fit["censored_at"], f"{fit['censored_fraction']:.2%}", best.get("ks"), params])
    out["workload"].append(("Length fits (censored MLE, ranked by AIC)",
                            ["field", "best", "censored at", "censored", "KS", "parameters"], fits))
    if wl.get("arrivals"):
        arr = wl["arrivals"]
        out["workload"].append(("Arrivals", ["span s", "mean req/s", "peak req/s (p99 per minute)", "CV",
                                             "Poisson-consistent", "best inter-arrival fit"],
                                [[arr["span_s"], arr["peaks"]["mean_rate_rps"], arr["peaks"]["peak_rate_rps"],
                                  arr["fit"]["cv"], arr["fit"]["poisson_consistent"], arr["fit"]["best"]]]))
    mem = report["memory"]
    gib = 1024 ** 3
    out["memory"].append(("Memory plan (per GPU)", ["parameters", "weights GiB", "KV bytes/token (per GPU)",
                                                    "KV pool GiB", "blocks", "KV tokens", "max concurrency"],
                          [[mem["param_count"], mem["weights_bytes"] / gib, mem["kv_bytes_per_token_per_gpu"],
                            mem["kv_pool_bytes"] / gib, mem["num_blocks"], mem["kv_capacity_tokens"],
                            mem["max_concurrency"]]]))
    out["memory"].append(("Where the memory goes (GiB)", list(mem["breakdown_gib"]),
                          [list(mem["breakdown_gib"].values())]))
    if mem.get("trace"):
        out["memory"].append(("Concurrency on this trace", list(mem["trace"]), [list(mem["trace"].values())]))
    sim = report.get("simulation")
    if sim:
        out["simulation"].append((f"Replay at the trace's own rate ({sim['engine']}, engine defaults)",
                                  ["metric", *pct], [[f"{m} ms", *[(sim.get(m) or {}).get(p) for p in pct]]
                                                     for m in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")]))
        out["simulation"].append(("Throughput", ["input tok/s", "output tok/s", "requests/s", "preemptions",
                                                 "saturated"],
                                  [[sim["throughput_tok_s"]["input"], sim["throughput_tok_s"]["output"],
                                    sim["request_rate_rps"], sim["preemptions"], sim["saturated"]]]))
    rec = report.get("recommendations")
    if rec:
        out["recommendations"].append(("Per SLO class", [
            "class", "SLO", "feasible", "max_num_seqs", "max_num_batched_tokens", "preemption", "TP",
            "TTFT p99 ms", "TPOT p99 ms", "output tok/s", "req/s per replica", "replicas", "GPUs", "$/hour",
            "$/M output tokens"], [[
                r["name"], _slo_text(r["slo"]), r["feasible"],
                r["config"]["max_num_seqs"], r["config"]["max_num_batched_tokens"], r["config"]["preemption_mode"],
                r["tp"], ((r["predicted"] or {}).get("ttft_ms") or {}).get("p99"),
                ((r["predicted"] or {}).get("tpot_ms") or {}).get("p99"), r["throughput_tok_s"],
                r["max_qps_per_replica"], r["replicas_for_peak"], r["gpus"], r["cost_per_hour"],
                r["cost_per_million_output_tokens"]] for r in rec["classes"]]))
    return out


def _slo_text(slo: dict) -> str:
    share = slo.get("attainment")
    bounds = ", ".join(f"{k} < {v:g}" for k, v in slo.items() if k != "attainment")
    if share is not None:
        return f"{share:.0%} of requests: {bounds}"
    return bounds or "throughput"


def _missing(key: str, report: dict) -> str | None:
    """Why a section is empty, in one sentence."""
    if key in ("simulation", "recommendations", "sensitivity") and not report.get("simulation"):
        return "The trace has no arrival times, and replaying it at a rate needs them: no simulation here."
    error = (report.get("recommendations") or {}).get("error")
    if key in ("recommendations", "sensitivity") and error:
        return f"No recommendation: {error}"
    return None


def _class_notes(report: dict) -> list[tuple[str, str, list[str]]]:
    rec = report.get("recommendations") or {"classes": []}
    return [(r["name"], r["launch_command"], (r.get("details") or {}).get("diagnosis", [])) for r in rec["classes"]]


def _charts_of(section: str, report: dict) -> list[str]:
    names = list(report["charts"])
    if section == "workload":
        return [n for n in names if n.endswith("_histogram") or n == "arrival_rate"]
    if section == "memory":
        return [n for n in names if n in ("memory_breakdown", "concurrency")]
    if section == "simulation":
        return [n for n in names if n.startswith("simulation_")]
    if section == "sensitivity":
        return [n for n in names if ":" in n]
    return []


def to_html(report: dict, svgs: dict[str, str]) -> str:
    """The self-contained HTML twin; ``svgs`` from :func:`chart_svgs`."""
    e = html.escape
    t = report["trace"]
    parts = [f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<title>{e(report['title'])}</title><style>{STYLE}</style></head><body><div class=cr>",
             f"<h1>{e(report['title'])}</h1>",
             f"<p class=meta>Trace <b>{e(t['name'])}</b> (id <code>{e(t['trace_id'])}</code>, content SHA-256 "
             f"<code>{e(t['content_sha256'])}</code>, {_num(t['rows'])} requests, file {e(t['source_file'])}) · "
             f"planner {e(report['app_version'])} · {e(report['created_utc'])}</p>",
             "<nav>" + "".join(f'<a href="#{key}">{e(title)}</a>' for key, title in SECTIONS) + "</nav>"]
    tables = _rows(report)
    for key, title in SECTIONS:
        parts.append(f'<section id="{key}"><h2>{e(title)}</h2>')
        if _missing(key, report):
            parts.append(f"<p>{e(_missing(key, report))}</p>")
        for caption, header, rows in tables[key]:
            parts.append(f"<div class=scroll><table><caption>{e(caption)}</caption><tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>"
                         + "".join("<tr>" + "".join(f"<td>{e(_num(v))}</td>" for v in row) + "</tr>" for row in rows)
                         + "</table></div>")
        if key == "recommendations":
            for name, command, notes in _class_notes(report):
                parts.append(f"<h3>{e(name)}</h3><pre>{e(command)}</pre>"
                             + ("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>" if notes else ""))
        for name in _charts_of(key, report):
            if name in svgs:
                parts.append(f"<figure>{_image(name, svgs[name])}<figcaption>{e(name)}</figcaption></figure>")
        if key == "assumptions":
            parts.append(f"<p>Reproduce:</p><pre>{e(report['assumptions']['reproduce'])}</pre>")
            parts.append("<pre>" + e(json.dumps({"scenario": report["scenario"], **report["assumptions"]},
                                                indent=1)) + "</pre>")
        parts.append("</section>")
    parts.append("</div></body></html>")
    return "\n".join(parts)


def markdown_text(text) -> str:
    """``text`` (or a number, formatted) safe in Markdown: no HTML, link, image or emphasis can come of it."""
    # Markdown renders inline HTML: escape it
    text = html.escape(_num(text) if not isinstance(text, str) else text, quote=False)
    # and Markdown's own syntax: a name must not become a link, an image or emphasis
    return re.sub(r"([\\`*_{}\[\]()#+!|~])", r"\\\1", text).replace("\n", " ")


def to_markdown(report: dict) -> str:
    """The Markdown twin: the same tables, commands and diagnosis; charts are in the HTML twin."""
    t, md = report["trace"], markdown_text
    lines = [f"# {md(report['title'])}", "",
             f"Trace **{md(t['name'])}** (id `{t['trace_id']}`, content SHA-256 `{t['content_sha256']}`, "
             f"{_num(t['rows'])} requests) · planner {md(report['app_version'])} · {md(report['created_utc'])}", ""]
    tables = _rows(report)
    for key, title in SECTIONS:
        lines += [f"## {title}", ""] + ([_missing(key, report), ""] if _missing(key, report) else [])
        for caption, header, rows in tables[key]:
            lines += [f"**{md(caption)}**", "", "| " + " | ".join(md(h) for h in header) + " |",
                      "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(md(v) for v in row) + " |" for row in rows]
            lines.append("")
        if key == "recommendations":
            for name, command, notes in _class_notes(report):
                lines += [f"### {md(name)}", "", "```bash", command.replace("```", "'''"), "```", ""]
                lines += [f"- {md(n)}" for n in notes] + [""]
        charts = _charts_of(key, report)
        if charts:
            lines += [f"Charts in the HTML twin: {', '.join(md(c) for c in charts)}.", ""]
        if key == "assumptions":
            lines += ["```bash", report["assumptions"]["reproduce"].replace("```", "'''"), "```", "", "```json",
                      json.dumps({"scenario": report["scenario"], **report["assumptions"]}, indent=1)
                      .replace("```", "'''"), "```", ""]
    return "\n".join(lines)


def render(report: dict, fmt: str) -> str:
    """``html``, ``md`` or ``json`` text of a report."""
    if fmt == "html":
        return to_html(report, chart_svgs(report["charts"]))
    if fmt == "md":
        return to_markdown(report)
    if fmt == "json":
        return json.dumps(report)
    from planner.errors import PlannerError

    raise PlannerError(f"--format {fmt!r}: expected html, md or json")
