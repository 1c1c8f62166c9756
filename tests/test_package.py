"""The installable package: metadata that agrees with the requirements files, the ``s2d2`` command and the
lm-eval entry point, read from the installed metadata (``run_tests.sh`` installs the checkout with ``pip -e``)."""

from __future__ import annotations

import subprocess
import sysconfig
import tomllib
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def requirement_lines(name: str) -> list[str]:
    """The requirements of a requirements file, comments and blank lines dropped."""
    lines = (line.split("#", 1)[0].strip() for line in (ROOT / name).read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def test_dependencies_are_the_requirements_files():
    """The package's dependencies are requirements.txt's, except that torch and transformers are ranges there
    (SGLang's environment, ``.[sglang]``, pins its own) which admit the versions requirements.txt pins."""
    pinned = {Requirement(line).name: Requirement(line) for line in requirement_lines("requirements.txt")}
    declared = {Requirement(line).name: Requirement(line) for line in PROJECT["dependencies"]}
    assert declared.keys() == pinned.keys()
    for name in ("torch", "transformers"):
        (pin,) = pinned[name].specifier
        assert pin.operator == "==" and declared[name].specifier.contains(pin.version), (name, declared[name])
    assert {str(r) for n, r in declared.items() if n not in ("torch", "transformers")} == {
        str(r) for n, r in pinned.items() if n not in ("torch", "transformers")
    }
    assert PROJECT["optional-dependencies"]["dev"] == requirement_lines("requirements-dev.txt")
    assert PROJECT["optional-dependencies"]["eval"] == [
        r for r in requirement_lines("requirements-dev.txt") if r.startswith("lm_eval")
    ]


def test_the_installed_distribution_is_this_checkout():
    dist = distribution("s2d2")
    assert dist.version == PROJECT["version"]
    import s2d2

    assert Path(s2d2.__file__).resolve().parent == ROOT / "s2d2"


def test_console_script_is_the_module_cli(capsys):
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "s2d2"]
    from s2d2.__main__ import main

    assert script.load() is main
    with pytest.raises(SystemExit) as exit_info:
        script.load()(["generate", "--help"])
    assert exit_info.value.code == 0
    assert "--prompt" in capsys.readouterr().out


def test_console_script_runs():
    """The installed command is the CLI: its settings are parsed and checked (bad ones are one line on
    stderr and status 2, as with python -m s2d2), and the error names the setting."""
    command = Path(sysconfig.get_path("scripts")) / "s2d2"
    done = subprocess.run(
        [str(command), "generate", "--prompt", "x", "--block-length", "0"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2 and done.stderr.startswith("error:"), done.stderr
    assert "block" in done.stderr.lower(), done.stderr


def test_lm_eval_entry_point_resolves_to_the_model_class():
    (model,) = [ep for ep in entry_points(group="lm_eval.models") if ep.name == "s2d2"]
    from s2d2.integrations.lm_eval import S2D2LM

    assert model.load() is S2D2LM
    # lm-eval's main branch reconciles the entry point with @register_model("s2d2") by this path.
    assert model.value == f"{S2D2LM.__module__}:{S2D2LM.__name__}"
    from lm_eval.api.registry import get_model

    assert get_model("s2d2") is S2D2LM
