"""What a finished benchmark grid means: the names of its figure methods and Figure 3's series.

The grid runner (:mod:`s2d2.study.bench`) names its methods with these functions, and readers of a
``summary.json`` (the dashboard) look the methods up with them, without importing the runner and what it
imports (the evaluation loop, the task families, the models).
"""

from __future__ import annotations

SCALING_BLOCKS = (4, 8, 16, 32)  # Figure 3's block sizes (Fast-dLLM v2: sub-block sizes inside its 32-token block)
AGGRESSIVE_DYNAMIC = "dynamic B=16 τ=0.3"  # Figure 2's parallel trajectory: far from what AR would write


def config_b_name(unit: str, size: int) -> str:
    """Figure 3's config B (stochastic acceptance, always verify, no lookahead) at one parallel unit size."""
    return f"S2D2 {unit}={size} always (c=0)"


def exact_name(unit: str, size: int) -> str:
    """Figure 3's exact S2D2 (greedy acceptance, always verify, lookahead) at one parallel unit size."""
    return f"S2D2 {unit}={size} exact + lookahead"


def scaling_series(rows: list[dict], dynamic_choice: dict[int, str], family: str, unit: str = "B") -> dict[str, list]:
    """Figure 3's data: accuracy on ``family`` against the parallel unit's size for the dynamic baseline (the τ
    chosen per size on the development split), config B and exact S2D2. Sizes with no row are left out."""
    by_name = {r["method"]: r for r in rows}
    series = {
        "dynamic (best τ on dev)": {B: dynamic_choice.get(B) for B in SCALING_BLOCKS},
        "S2D2 config B (stochastic)": {B: config_b_name(unit, B) for B in SCALING_BLOCKS},
        "S2D2 exact (greedy) + lookahead": {B: exact_name(unit, B) for B in SCALING_BLOCKS},
    }
    out = {}
    for label, names in series.items():
        points = [(B, by_name[n]) for B, n in names.items() if n in by_name]
        out[label] = [
            {"block_length": B, "method": r["method"], "accuracy": r["accuracy_by_family"].get(family),
             "nfe": r.get("nfe_by_family", {}).get(family)}
            for B, r in points
        ]  # fmt: skip
    return out
