"""The README's claims: its engine example runs as written, its results table is the committed grids' numbers,
its links and the docs index lead somewhere, and it stays a Space card."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# The results table's rows: the grid each comes from and its three methods (AR, the best threshold baseline,
# exact S2D2), in the table's column order.
RESULT_ROWS = {
    "SDAR": ("bundled", ["AR", "dynamic B=4 τ=0.9", "S2D2 B=16 exact + lookahead"]),
    "Fast-dLLM v2": (
        "bundled-fast-dllm-v2",
        ["AR", "dynamic sub-block=4 τ=0.9", "S2D2 sub-block=32 exact + lookahead"],
    ),
    "LLaDA2.x": ("bundled-llada2", ["AR", "dynamic B=4 τ=0.9", "S2D2 B=32 exact + lookahead"]),
}
CELL = re.compile(r"([\d.]+)% · ([\d.]+) NFE · ([\d.]+) s")


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def test_python_example_in_the_readme_runs_and_answers():
    section = readme_text().split("## Use it from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    text, nfe = out.getvalue().rsplit(" ", 1)
    assert text == "7 + 12 = 19. The answer is 19." and int(nfe) < 10


def grid_rows(grid: str) -> dict[str, list[str]]:
    """``method -> cells`` of the first table of a committed grid's table.md (Table 1's shape)."""
    lines = (DOCS / "results" / grid / "table.md").read_text(encoding="utf-8").splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def test_the_results_table_is_the_committed_grids_numbers():
    table = [line for line in readme_text().split("## Results", 1)[1].splitlines() if line.startswith("| ")]
    found = {}
    for line in table[1:]:
        family = next((name for name in RESULT_ROWS if line.startswith(f"| {name} (")), None)
        if family:
            found[family] = CELL.findall(line)
    assert sorted(found) == sorted(RESULT_ROWS)
    for family, (grid, methods) in RESULT_ROWS.items():
        rows = grid_rows(grid)
        expected = [(rows[m]["avg"], rows[m]["NFE / problem"], rows[m]["wall s / problem"]) for m in methods]
        assert found[family] == expected, family


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a markdown file's headings: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def relative_links(path: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")) if "://" not in t]


def test_every_link_of_the_readme_and_the_docs_index_leads_to_a_file_and_heading():
    checked = 0
    for page in (README, DOCS / "README.md"):
        for target in relative_links(page):
            file, _, anchor = target.partition("#")
            linked = (page.parent / file).resolve()
            assert linked.exists(), f"{page.name} links to a missing {target}"
            if anchor:
                assert anchor in heading_anchors(linked), f"{page.name}: no heading for #{anchor} in {file}"
            checked += 1
    assert checked >= 15


def test_the_docs_index_lists_every_page_of_docs():
    linked = {Path(t.partition("#")[0]).name for t in relative_links(DOCS / "README.md")}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages and pages <= linked, sorted(pages - linked)


def test_the_readme_is_a_space_card_of_at_most_150_lines():
    text = readme_text()
    front_matter = text.split("---\n")[1]
    assert text.startswith("---\n") and "sdk: gradio" in front_matter and "app_file: app.py" in front_matter
    assert len(text.splitlines()) <= 150
    assert (ROOT / "docs" / "screenshot.png").stat().st_size < 400_000 and "](docs/screenshot.png)" in text
