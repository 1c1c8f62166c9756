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


ROOT = ENGINE.parent
# What studies, trains or plugs in the engine: the engine (every other module of s2d2/) imports none of it.
OUTSIDE_THE_ENGINE = ("s2d2.training", "s2d2.study", "s2d2.integrations")
COMMAND_ALIASES = {"s2d2.lm_eval"}  # `python -m s2d2.lm_eval`, kept at its short name: a command, not the engine
DASHBOARD_READER = "s2d2.study.results"  # the one study module the dashboard may read finished grids through


def module_name(path: Path) -> str:
    """``s2d2/models/base.py`` -> ``s2d2.models.base``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every module of s2d2/, components/ and app.py, by dotted name."""
    paths = [*ENGINE.rglob("*.py"), *(ROOT / "components").rglob("*.py"), ROOT / "app.py"]
    return {module_name(path): path for path in paths}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports, at top level or inside functions, relative imports resolved.

    ``from package import thing`` is an import of ``package.thing`` when that is a module, else of ``package``.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
    return found & known


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (or a module importing itself), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(graph.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1 or node in graph.get(node, ()):
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def is_within(name: str, packages) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def test_no_import_circles_among_the_modules_of_s2d2_and_the_dashboard():
    assert import_circles(import_graph()) == []


def test_the_engine_never_imports_training_studies_or_integrations():
    offenders = {
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if is_within(name, ("s2d2",)) and not is_within(name, OUTSIDE_THE_ENGINE) and name not in COMMAND_ALIASES
        for target in targets
        if is_within(target, OUTSIDE_THE_ENGINE)
    }
    assert not offenders, sorted(offenders)


def test_the_dashboard_reads_studies_through_the_results_reader_alone():
    offenders = {
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if not is_within(name, ("s2d2",))
        for target in targets
        if is_within(target, OUTSIDE_THE_ENGINE) and target != DASHBOARD_READER
    }
    assert not offenders, sorted(offenders)


def test_the_results_reader_imports_nothing_of_the_project():
    assert import_graph()[DASHBOARD_READER] == set()


def test_the_graph_check_sees_relative_lazy_and_circular_imports(tmp_path):
    probe = tmp_path / "pkg"
    (probe / "sub").mkdir(parents=True)
    (probe / "__init__.py").write_text("")
    (probe / "sub" / "__init__.py").write_text("")
    (probe / "sub" / "a.py").write_text("from .. import b\nfrom ..c import thing\n")
    (probe / "b.py").write_text("def f():\n    from pkg.sub import a\n")
    (probe / "c.py").write_text("import os\nthing = 1\n")
    known = {"pkg", "pkg.sub", "pkg.sub.a", "pkg.b", "pkg.c"}
    a_imports = imports_of("pkg.sub.a", probe / "sub" / "a.py", known)
    b_imports = imports_of("pkg.b", probe / "b.py", known)
    assert a_imports == {"pkg.b", "pkg.c"} and b_imports == {"pkg.sub.a"}
    graph = {"pkg.sub.a": a_imports, "pkg.b": b_imports, "pkg.c": set()}
    assert import_circles(graph) == [["pkg.b", "pkg.sub.a"]]


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
