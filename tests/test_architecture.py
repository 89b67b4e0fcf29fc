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


def test_nothing_imports_the_cli_and_the_simulator_reads_no_store():
    core = [p for p in (ROOT / "planner").rglob("*.py")
            if "cli" not in p.relative_to(ROOT / "planner").parts and p.name != "__main__.py"]
    assert [(p.name, m) for p in core for m in imported_modules(p) if m.startswith("planner.cli")] == []
    sim = list((ROOT / "planner" / "sim").rglob("*.py"))
    assert sim and [(p.name, m) for p in sim for m in imported_modules(p)
                    if m.split(".")[0] == "duckdb" or m.startswith(("planner.traces", "planner.workload"))] == []


def test_the_scenario_is_built_in_one_place_per_shell():
    """The CLI builds it in its argument group, the app in its scenario widgets; no other module calls Scenario(."""
    modules = [*(ROOT / "planner").rglob("*.py"), *(ROOT / "pages").glob("*.py")]
    builders = {p.relative_to(ROOT).as_posix() for p in modules
                if "Scenario(" in p.read_text().replace("class Scenario(", "")}
    assert builders == {"planner/cli/scenario_args.py", "pages/_scenario.py"}


def test_the_cli_and_ingest_start_without_the_compiler():
    """numba takes 0.3 s to import; the parser and an ingest need none of it, only a simulation does."""
    import subprocess
    import sys

    code = ("import sys; import planner.cli.main, planner.traces.ingest, planner.sim.routers; "
            "print(sorted(m for m in ('numba', 'planner.sim.kernel', 'planner.sim.prefix') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
