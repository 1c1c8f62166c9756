"""The layering the project promises, checked statically."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "s2d2"
FORBIDDEN = ("gradio", "plotly", "components")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_engine_never_imports_the_dashboard_or_plotting():
    offenders = {
        f"{path.relative_to(ENGINE.parent)}: {name}"
        for path in ENGINE.rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN
    }
    assert not offenders, sorted(offenders)


def test_the_check_sees_imports_inside_functions(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from components.benchmarks import write_frontiers\n    import plotly.io\n")
    assert {"components.benchmarks", "plotly.io"} <= imported_modules(probe)
