"""The README's engine example runs as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_in_the_readme_runs_and_answers():
    section = README.read_text(encoding="utf-8").split("## Use it from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    text, nfe = out.getvalue().rsplit(" ", 1)
    assert "19" in text and int(nfe) < 10
