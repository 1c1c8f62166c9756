"""The layering the project promises, checked statically."""

from __future__ import annotations

import ast
import dataclasses
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
# The task families: the dashboard grades a run's answer with their own scorers (components/grading.py).
TASK_FAMILIES = "s2d2.study.tasks"


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
        if is_within(target, OUTSIDE_THE_ENGINE) and target != DASHBOARD_READER and not is_within(target, [TASK_FAMILIES])
    }
    assert not offenders, sorted(offenders)


def test_the_results_reader_imports_nothing_of_the_project():
    assert import_graph()[DASHBOARD_READER] == set()


def test_the_task_families_import_nothing_of_the_project_but_themselves():
    """So grading a run on the page pulls in no model, evaluation loop or grid runner."""
    graph = import_graph()
    outside = {f"{name} imports {target}" for name, targets in graph.items() if is_within(name, [TASK_FAMILIES])
               for target in targets if not is_within(target, [TASK_FAMILIES])}  # fmt: skip
    assert not outside, sorted(outside)


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


# -- the decode loop names no rule, option or family ----------------------------------------------

# The modules whose classes run the decode loop, and the size a reader can hold in mind.
LOOP_MODULES = ("decode.py", "verifier.py")
DECODER_MAX_LINES = 250
METHOD_MAX_LINES = 40


def family_flags() -> set[str]:
    """A family's conventions that would make the loop branch if read there: the loop asks the adapter's hooks."""
    from s2d2.models.base import OfficialConventions

    adapter = {"family", "next_token_from_commit", "stop_at_block_end", "supports_incremental_kv"}
    return adapter | {f.name for f in dataclasses.fields(OfficialConventions)}


def setting_choices() -> set[str]:
    """Every declared choice of every setting: methods and commit rules, policies, estimators and their options."""
    from s2d2.settings import SETTINGS

    return {choice for s in SETTINGS if s.choices for choice in s.choices}


def loop_classes(source: str) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]


def loop_offences(source: str) -> list[str]:
    """Family flags read, or setting choices named (a commit rule, a policy, an estimator option), inside the
    methods of a loop module's classes other than ``__init__`` (which may choose a part once, outside the loop)."""
    flags, choices = family_flags(), setting_choices()
    found = []
    for cls in loop_classes(source):
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef) or method.name == "__init__":
                continue
            where = f"{cls.name}.{method.name}"
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and node.attr in flags:
                    found.append(f"{where}: family flag .{node.attr}")
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in choices:
                    found.append(f"{where}: setting choice {node.value!r}")
    return sorted(found)


def size_offences(source: str) -> list[str]:
    """``Decoder`` over :data:`DECODER_MAX_LINES` lines, or a loop class's method over :data:`METHOD_MAX_LINES`."""
    found = []
    for cls in loop_classes(source):
        length = cls.end_lineno - cls.lineno + 1
        if cls.name == "Decoder" and length > DECODER_MAX_LINES:
            found.append(f"Decoder: {length} lines")
        for method in cls.body:
            if isinstance(method, ast.FunctionDef) and method.end_lineno - method.lineno + 1 > METHOD_MAX_LINES:
                found.append(f"{cls.name}.{method.name}: {method.end_lineno - method.lineno + 1} lines")
    return found


def loop_sources() -> dict[str, str]:
    return {name: (ENGINE / name).read_text(encoding="utf-8") for name in LOOP_MODULES if (ENGINE / name).exists()}


def test_the_decode_loop_names_no_rule_option_or_family_flag():
    offences = [f"{name}: {o}" for name, source in loop_sources().items() for o in loop_offences(source)]
    assert offences == []


def test_the_decoder_and_its_methods_fit_on_a_screen():
    offences = [f"{name}: {o}" for name, source in loop_sources().items() for o in size_offences(source)]
    assert offences == []


def test_the_loop_check_sees_flags_rule_names_and_estimator_options():
    probe = (
        "class Decoder:\n    def __init__(self):\n        self.at_end = model.stop_at_block_end\n"
        "    def _step(self):\n        if self.model.next_token_from_commit or self.config.verify.policy == 'ucb':\n"
        "            pass\n"
        "class Verifier:\n    def route(self):\n        if self.config.verify.ucb_entropy_source == 'masked':\n"
        "            rule = 'dynamic'\n"
        "        keep = self.official.draft_ver_rows_in_commit\n"
    )
    assert loop_offences(probe) == [
        "Decoder._step: family flag .next_token_from_commit",
        "Decoder._step: setting choice 'ucb'",
        "Verifier.route: family flag .draft_ver_rows_in_commit",
        "Verifier.route: setting choice 'dynamic'",
        "Verifier.route: setting choice 'masked'",
    ]


def test_the_size_check_counts_the_decoder_and_each_method():
    long_method = "    def run(self):\n" + "        x = 1\n" * 40
    probe = "class Decoder:\n" + long_method + "    def small(self):\n        pass\n" * 105
    assert size_offences(probe) == ["Decoder: 252 lines", "Decoder.run: 41 lines"]
