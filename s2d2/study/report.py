"""The benchmark grid's report: its tables, from its per-problem results.

    python -m s2d2.study.report docs/results/bundled-llada2   # rewrite table.md from runs.csv and summary.json

``s2d2.study.bench`` writes ``table.md`` at the end of a run; this module is that
writer, so a committed grid's report can be rebuilt (or extended with a new
section) from its files without decoding anything again. Sections:

- the paper's Table 1 shape, one row per method;
- where exact S2D2 pays off, per task family;
- how many outputs each method shares with AR, token for token (the exactness
  claim, counted on every problem rather than asserted);
- what token editing changes: each "+ editing" method against its "no editing" twin;
- the AR energy of each method's outputs (Figure 2 as numbers).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
from pathlib import Path

from .evaluate import ProblemResult, mean_energy

EDITING, NO_EDITING = " + editing", ", no editing"


def write_runs(path: Path, results: list[ProblemResult]) -> None:
    """``runs.csv``: one row per (method, problem), in the order given."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[field.name for field in dataclasses.fields(ProblemResult)])
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in results)


def _parse(kind: str, text: str):
    if kind == "bool":
        return text == "True"
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "float | None":
        return float(text) if text else None
    return text


def read_runs(path: Path) -> list[ProblemResult]:
    """The results of a ``runs.csv`` as :func:`write_runs` wrote them."""
    kinds = {field.name: str(field.type) for field in dataclasses.fields(ProblemResult)}
    with path.open(newline="") as f:
        return [ProblemResult(**{k: _parse(kinds[k], v) for k, v in row.items()}) for row in csv.DictReader(f)]


def table_markdown(rows: list[dict], family_names: list[str]) -> str:
    """Paper Table 1 shape: accuracy per task and on average, forwards, tokens per forward, speedups."""

    def pct(x):
        return f"{100 * x:.1f}"

    def times(x):
        return "—" if x is None else f"{x:.2f}×"

    head = (
        "| method | "
        + " | ".join(family_names)
        + " | avg | NFE / problem | tokens / fwd | fed / fwd | wall s / problem "
        "| speedup vs AR (NFE) | speedup vs AR (wall) | vs best dynamic at ≥ acc. (NFE) | (wall) | acceptance "
        "| verify rate |"
    )
    lines = [head, "|---|" + "---:|" * (len(family_names) + 11)]
    for r in rows:
        acc = " | ".join(pct(r["accuracy_by_family"].get(f, 0.0)) for f in family_names)
        accept = "—" if r["acceptance_rate"] is None else f"{100 * r['acceptance_rate']:.0f}%"
        verify = "—" if r["verify_rate"] is None else f"{100 * r['verify_rate']:.0f}%"
        lines.append(
            f"| {r['method']} | {acc} | {pct(r['accuracy'])} | {r['nfe_per_problem']:.1f} | {r['tokens_per_forward']:.2f} | "
            f"{r['tokens_fed_per_forward']:.1f} | "
            f"{r['wall_per_problem']:.3f} | {times(r.get('speedup_nfe_vs_ar'))} | {times(r.get('speedup_wall_vs_ar'))} | "
            f"{times(r['speedup_nfe_vs_best_dynamic'])} | {times(r['speedup_wall_vs_best_dynamic'])} | {accept} | "
            f"{verify} |"
        )
    return "\n".join(lines)


def regime_markdown(rows: list[dict], family_names: list[str]) -> str:
    """Where S2D2 pays off, per task family: exact S2D2's cheapest block size against AR and against the
    cheapest dynamic setting at least as accurate on that family, in forwards and in wall time."""
    exact = [r for r in rows if " exact" in r["method"]]
    dynamic = [r for r in rows if r["method"].startswith("dynamic")]
    ar = next((r for r in rows if r["method"] == "AR"), None)
    if not exact or ar is None:
        return ""
    lines = [
        "| family | AR NFE | exact S2D2 (fewest forwards) | its acc. | NFE | wall s | × fewer forwards than AR "
        "| cheapest dynamic at ≥ acc. (NFE) | × fewer forwards | fastest dynamic at ≥ acc. (wall) | × less wall time |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---|---:|",
    ]

    def ratio(reference, key, value):
        return f"{reference[key][f] / value:.2f}×" if reference else "—"

    for f in family_names:
        best = min(exact, key=lambda r: r["nfe_by_family"][f])
        acc, nfe, wall = best["accuracy_by_family"][f], best["nfe_by_family"][f], best["wall_by_family"][f]
        matched = [r for r in dynamic if r["accuracy_by_family"][f] >= acc]
        by_nfe = min(matched, key=lambda r: r["nfe_by_family"][f]) if matched else None
        by_wall = min(matched, key=lambda r: r["wall_by_family"][f]) if matched else None
        nfe_ref = f"{by_nfe['method']} ({by_nfe['nfe_by_family'][f]:.1f})" if by_nfe else "none as accurate"
        wall_ref = f"{by_wall['method']} ({by_wall['wall_by_family'][f]:.3f} s)" if by_wall else "none as accurate"
        lines.append(
            f"| {f} | {ar['nfe_by_family'][f]:.1f} | {best['method']} | {100 * acc:.1f} | {nfe:.1f} | {wall:.3f} | "
            f"{ar['nfe_by_family'][f] / nfe:.2f}× | {nfe_ref} | "
            f"{ratio(by_nfe, 'nfe_by_family', nfe)} | {wall_ref} | {ratio(by_wall, 'wall_by_family', wall)} |"
        )
    return "\n".join(lines)


def energy_markdown(rows: list[dict], family_names: list[str]) -> str:
    """Figure 2 as numbers: each method's mean AR energy per output token, per family."""
    lines = ["| method | " + " | ".join(family_names) + " |", "|---|" + "---:|" * len(family_names)]
    for r in rows:
        if r.get("ar_energy") is None:
            continue
        cells = " | ".join(
            "—" if r["ar_energy_by_family"].get(f) is None else f"{r['ar_energy_by_family'][f]:.3f}"
            for f in family_names
        )
        lines.append(f"| {r['method']} | {cells} |")
    return "\n".join(lines)


def _by_method(results: list[ProblemResult]) -> dict[str, dict[tuple[str, int], ProblemResult]]:
    by_method: dict[str, dict[tuple[str, int], ProblemResult]] = {}
    for r in results:
        by_method.setdefault(r.method, {})[(r.family, r.index)] = r
    return by_method


def agreement_markdown(results: list[ProblemResult], family_names: list[str]) -> str:
    """Per method, the problems whose output is AR's token for token (the exact rows must have all of them)."""
    by_method = _by_method(results)
    ar = by_method.get("AR")
    if ar is None:
        return ""
    lines = [
        "| method | same output as AR | " + " | ".join(family_names) + " |",
        "|---|---:|" + "---:|" * len(family_names),
    ]
    for method, runs in by_method.items():
        if method == "AR":
            continue
        same = {key for key, r in runs.items() if key in ar and r.output == ar[key].output}
        cells = " | ".join(
            f"{sum(1 for k in same if k[0] == f)}/{sum(1 for k in runs if k[0] == f)}" for f in family_names
        )
        lines.append(f"| {method} | {len(same)}/{len(runs)} ({100 * len(same) / len(runs):.1f}%) | {cells} |")
    return "\n".join(lines)


def editing_markdown(results: list[ProblemResult], family_names: list[str]) -> str:
    """Each "+ editing" method against its "no editing" twin on the same problems: how many outputs
    editing changed (per family), and the accuracy and AR energy of both."""
    by_method = _by_method(results)
    pairs = [
        (name, name[: -len(EDITING)] + NO_EDITING)
        for name in by_method
        if name.endswith(EDITING) and name[: -len(EDITING)] + NO_EDITING in by_method
    ]
    if not pairs:
        return ""
    families = " / ".join(family_names)
    lines = [
        f"| method | outputs editing changed | {' | '.join(family_names)} | acc. with / without editing "
        f"| AR energy with editing ({families}) | without |",
        "|---|---:|" + "---:|" * len(family_names) + "---:|---:|---:|",
    ]

    def energies(runs: dict) -> str:
        per_family = [mean_energy([r for k, r in runs.items() if k[0] == f]) for f in family_names]
        return " / ".join("—" if e is None else f"{e:.3f}" for e in per_family)

    def accuracy(runs: dict) -> str:
        return f"{100 * sum(r.correct for r in runs.values()) / len(runs):.1f}"

    for edited_name, plain_name in pairs:
        edited, plain = by_method[edited_name], by_method[plain_name]
        changed = [k for k, r in edited.items() if k in plain and r.output != plain[k].output]
        cells = " | ".join(str(sum(1 for k in changed if k[0] == f)) for f in family_names)
        lines.append(
            f"| {edited_name[: -len(EDITING)]} | {len(changed)}/{len(edited)} ({100 * len(changed) / len(edited):.1f}%) "
            f"| {cells} | {accuracy(edited)} / {accuracy(plain)} | {energies(edited)} | {energies(plain)} |"
        )
    return "\n".join(lines)


def report_markdown(rows: list[dict], results: list[ProblemResult], family_names: list[str]) -> str:
    """``table.md``: every section that has something to say for this grid."""
    sections = [
        table_markdown(rows, family_names),
        ("## Where S2D2 pays off, per family", regime_markdown(rows, family_names)),
        ("## Outputs identical to AR's", agreement_markdown(results, family_names)),
        ("## What token editing changes", editing_markdown(results, family_names)),
        (
            "## AR energy per output token (−log q under the model at block size 1)",
            energy_markdown(rows, family_names),
        ),
    ]
    parts = [sections[0]] + [f"{title}\n\n{body}" for title, body in sections[1:] if body]
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m s2d2.study.report", description="Rewrite a benchmark grid's table.md from its runs.csv."
    )
    parser.add_argument("folder", help="an s2d2.study.bench --out folder (runs.csv and summary.json)")
    folder = Path(parser.parse_args(argv).folder)
    summary = json.loads((folder / "summary.json").read_text())
    text = report_markdown(summary["methods"], read_runs(folder / "runs.csv"), summary["meta"]["families"])
    (folder / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
