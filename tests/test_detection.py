"""Property tests: format detection and mapping do not depend on incidental details of a file."""

import gzip
import json

import duckdb
from helpers import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.traces.layouts import GENERIC_ALIASES, detect_mapping
from planner.traces.sources import open_source

records = st.lists(st.fixed_dictionaries({"input_tokens": st.integers(0, 10**6),
                                          "output_tokens": st.integers(0, 10**5),
                                          "model": st.sampled_from(["a", "b,c", 'q"uote'])}),
                   min_size=1, max_size=30)


def render(rows, fmt: str) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in rows).encode()
    if fmt == "json":
        return json.dumps(rows).encode()
    sep = "\t" if fmt == "tsv" else ","

    def cell(v):
        text = str(v)
        return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\t') else text
    lines = [sep.join(rows[0])] + [sep.join(cell(v) for v in r.values()) for r in rows]
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=records, fmt=st.sampled_from(["csv", "tsv", "jsonl", "json"]), gz=st.booleans(),
       suffix=st.sampled_from([".dat", ".txt", ".csv", ".log"]))
def test_format_is_told_from_the_bytes_not_the_name(tmp_path_factory, rows, fmt, gz, suffix):
    data = render(rows, fmt)
    path = write(tmp_path_factory.mktemp("d") / f"trace{suffix}", gzip.compress(data) if gz else data)
    source = open_source(duckdb.connect(), path)
    assert source.format == fmt
    assert source.compression == ("gzip" if gz else "none")
    assert set(source.columns) == {"input_tokens", "output_tokens", "model"}


@settings(max_examples=200, deadline=None)
@given(inp=st.sampled_from(GENERIC_ALIASES["input_tokens"][:10]),
       out=st.sampled_from(GENERIC_ALIASES["output_tokens"][:10]),
       style=st.sampled_from([str.lower, str.upper, str.title, lambda s: s.replace("_", " "),
                              lambda s: " " + s + " "]),
       extra=st.lists(st.sampled_from(["id", "foo", "bar_baz", "region", "user"]), unique=True, max_size=3))
def test_generic_names_map_whatever_their_spelling(inp, out, style, extra):
    columns = [style(inp), style(out), *extra]
    mapping = detect_mapping(columns)
    assert mapping.columns["input_tokens"] == style(inp)
    assert mapping.columns["output_tokens"] == style(out)
    assert "arrival" not in mapping.columns
