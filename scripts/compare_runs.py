"""Whether two benchmark runs decoded the same: every (method, family, problem) row's output, forwards and counts.

    python scripts/compare_runs.py docs/results runs/grid-check

Compares each grid directory present in both (``runs.csv``) on every column but wall time, which no two
runs share; AR energies are compared to 1e-9 (one float64 sum per output). Exits non-zero on a difference,
so a refactor of the decoder can be checked against the committed grid.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

TIMED = {"wall_seconds"}  # the one column no two runs share


def read_rows(path: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    with path.open(newline="") as f:
        return {(r["method"], r["family"], r["index"]): r for r in csv.DictReader(f)}


def differences(before: dict, after: dict) -> list[str]:
    found = [f"only in the first run: {key}" for key in before.keys() - after.keys()]
    found += [f"only in the second run: {key}" for key in after.keys() - before.keys()]
    for key in sorted(before.keys() & after.keys()):
        for column, old in before[key].items():
            new = after[key].get(column)
            if column in TIMED or old == new:
                continue
            if column == "ar_energy" and new is not None and math.isclose(float(old), float(new), abs_tol=1e-9):
                continue
            found.append(f"{key} {column}: {old!r} -> {new!r}")
    return found


def main(first: str, second: str) -> int:
    status = 0
    for runs in sorted(Path(second).glob("*/runs.csv")):
        reference = Path(first) / runs.parent.name / "runs.csv"
        if not reference.exists():
            continue
        before, after = read_rows(reference), read_rows(runs)
        found = differences(before, after)
        print(f"{runs.parent.name}: {len(after)} rows compared, {len(found)} differences")
        for line in found[:20]:
            print("  " + line)
        status |= bool(found)
    return status


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
