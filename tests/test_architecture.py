"""House rules that code review would otherwise have to remember."""

import ast

from helpers import ROOT


def imported_modules(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_planner_never_imports_streamlit_or_pandas():
    offenders = [(p.name, m) for p in (ROOT / "planner").rglob("*.py") for m in imported_modules(p)
                 if m.split(".")[0] in ("streamlit", "pandas")]
    assert offenders == []


def test_app_is_only_a_frame_and_pages_stay_thin():
    assert "st.navigation" in (ROOT / "app.py").read_text()
    for page in (ROOT / "pages").glob("*.py"):
        assert len(page.read_text().splitlines()) <= 200, page.name


def test_planner_modules_stay_under_400_lines():
    for path in (ROOT / "planner").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name
