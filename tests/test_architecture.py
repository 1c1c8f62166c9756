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


# A family's conventions that would make the decode loop branch if read there: the loop asks the adapter's hooks.
FAMILY_FLAGS = {"family", "next_token_from_commit", "stop_at_block_end", "supports_incremental_kv"}


def loop_offences(source: str) -> list[str]:
    """Family flags read, or policy names compared, inside ``Decoder``'s methods other than ``__init__``
    (which may choose a rule once, outside the loop)."""
    from s2d2.policies import POLICIES

    decoder = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "Decoder")
    found = []
    for method in decoder.body:
        if not isinstance(method, ast.FunctionDef) or method.name == "__init__":
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Attribute) and node.attr in FAMILY_FLAGS:
                found.append(f"{method.name}: .{node.attr}")
            if isinstance(node, ast.Constant) and node.value in POLICIES:
                found.append(f"{method.name}: {node.value!r}")
    return found


def test_the_decode_loop_never_branches_on_a_family_flag_or_a_policy_name():
    assert loop_offences((ENGINE / "decode.py").read_text(encoding="utf-8")) == []


def test_the_loop_check_sees_a_flag_and_a_policy_name():
    probe = (
        "class Decoder:\n    def __init__(self):\n        self.at_end = model.stop_at_block_end\n"
        "    def _step(self):\n        if self.model.next_token_from_commit or self.config.verify.policy == 'ucb':\n"
        "            pass\n"
    )
    assert loop_offences(probe) == ["_step: .next_token_from_commit", "_step: 'ucb'"]
