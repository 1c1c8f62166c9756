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


# -- the engine's imports form no circle ----------------------------------------------------------


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, root: Path) -> set[str]:
    """Every module a file under ``root`` imports, relative imports resolved (inside functions too), a
    ``from m import name`` counted as ``m.name`` and ``m``. Its own packages are left out: Python runs
    them before any of their modules, so a module importing its package closes no circle."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.update({base, *(f"{base}.{alias.name}" for alias in node.names)})
    return {m for m in found if m != name and not name.startswith(m + ".")}


def import_circles(package: Path) -> list[list[str]]:
    """The modules of ``package`` that import each other, directly or through others: one list per circle."""
    root = package.parent
    paths = {module_name(p, root): p for p in package.rglob("*.py")}
    graph = {name: module_imports(path, root) & set(paths) for name, path in paths.items()}
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        reach[start] = seen
    circles = {tuple(sorted({n} | {m for m in reach[n] if n in reach[m]})) for n in graph if n in reach[n]}
    return sorted(map(list, circles))


def test_the_engine_imports_form_no_circle():
    assert import_circles(ENGINE) == []


def test_the_circle_check_sees_a_circle_through_a_lazy_import(tmp_path):
    probe = tmp_path / "s2d2"
    (probe / "tasks").mkdir(parents=True)
    (probe / "config.py").write_text("from .policies import POLICIES\n")
    (probe / "policies.py").write_text("from . import trace\n")
    (probe / "trace.py").write_text("def upgrade():\n    from .config import DecodeConfig\n")
    (probe / "tasks" / "__init__.py").write_text("def families():\n    from .team import TeamPicks\n")
    (probe / "tasks" / "team.py").write_text("from . import Task\n")
    assert import_circles(probe) == [["s2d2.config", "s2d2.policies", "s2d2.trace"]]
