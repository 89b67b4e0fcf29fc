"""A vLLM ``benchmark_serving`` result (one JSON object of parallel lists per run) read as one row per request."""

from __future__ import annotations

from planner.traces.store import quote_ident


def vllm_benchmark_reader(con, reader: str, columns: dict[str, str]) -> tuple[str, dict[str, str], str]:
    """Unnest a vLLM ``benchmark_serving`` result (one object of parallel lists) into one row per request."""
    select = ["unnest(input_lens) AS input_lens", "unnest(output_lens) AS output_lens"]
    if "ttfts" in columns:
        select.append("unnest(ttfts) AS ttft_s")
    if "itls" in columns:
        # typed as numbers: a run whose every output is one token has only empty lists, which DuckDB types NULL[]
        itls = "CAST(unnest(itls) AS DOUBLE[])"
        select.append(f"list_avg({itls}) AS tpot_s")
        if "ttfts" in columns:
            select.append(f"unnest(ttfts) + coalesce(list_sum({itls}), 0) AS e2e_s")
    if "errors" in columns:
        select.append("nullif(unnest(errors), '') AS error")
    rate = None
    if "request_rate" in columns:
        rate = con.sql(f"SELECT CAST(request_rate AS VARCHAR) FROM {reader}").fetchall()[0][0]
    if rate is not None and str(rate).lower() in ("inf", "infinity"):
        select.append("0.0 AS arrival_s")
        note = "vLLM benchmark with request_rate inf: every request arrives at time 0"
    else:
        note = (f"vLLM benchmark with request_rate {rate}: the result holds no send times, so the trace has "
                "no arrival times")
    unnested = f"(SELECT {', '.join(select)} FROM {reader})"
    cols = {s.rsplit(" AS ", 1)[1]: quote_ident(s.rsplit(" AS ", 1)[1]) for s in select}
    return unnested, cols, note
