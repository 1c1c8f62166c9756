"""The expected speed-up, explained: from how often drafts are accepted to what a token costs.

A verification accepts its span's drafts left to right until the first rejection, so with acceptance rate
``α_i`` at the i-th position of a span the expected number accepted is ``E[K] = Σ_k Π_{i≤k} α_i`` (the
engine's own :func:`s2d2.policies.expected_accepted_length`). Each verification then commits those drafts
plus the one token it puts in place of the first rejected draft. With one draft forward and one verify
forward per verification, tokens per forward is ``(E[K] + P(a rejection)) / 2``; when drafts ride along in
the verify forwards (lookahead) the cost approaches one forward per verification. The panel measures
``α_i`` on the run itself and sets what that predicts beside what the run spent.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
import torch

from s2d2.policies import expected_accepted_length
from s2d2.trace import ACCEPTED, Trace

from .figures import empty_figure
from .palette import RUN_COLORS

ALPHAS = [i / 100 for i in range(101)]


def span_length(trace: Trace) -> int:
    """How many drafts one verification can test: the sub-block where blocks are split, else the block."""
    return int(trace.config.get("sub_block_length") or trace.config.get("block_length") or 1)


def acceptance_by_offset(trace: Trace) -> list[tuple[int, int]]:
    """``(tested, accepted)`` at each offset into the verified spans: a draft is tested only if all before it
    in its span were accepted, which is what makes ``α_i`` conditional, as ``E[K]`` needs."""
    counts: list[list[int]] = []
    for step in trace.steps:
        if step.accepted is None:
            continue
        tested = sorted((p for p in step.positions if p.q is not None), key=lambda p: p.position)
        for offset, p in enumerate(tested):
            if offset == len(counts):
                counts.append([0, 0])
            counts[offset][0] += 1
            if p.outcome != ACCEPTED:
                break
            counts[offset][1] += 1
    return [(n, a) for n, a in counts]


def tokens_per_verification(alphas: list[float]) -> float:
    """Accepted drafts plus the replacement of the first rejected one (none when all pass)."""
    alpha = torch.tensor(alphas, dtype=torch.float64)
    all_pass = float(alpha.clamp(0, 1).prod()) if alphas else 1.0
    return float(expected_accepted_length(alpha)) + (1.0 - all_pass)


def constant_curve(length: int, forwards: int) -> list[float]:
    """Tokens per forward against a constant α over a span of ``length``, at ``forwards`` per verification."""
    return [tokens_per_verification([a] * length) / forwards for a in ALPHAS]


def measured(trace: Trace) -> dict | None:
    """The run's own numbers: α per offset, E[K], the prediction and what it spent; ``None`` without a verification."""
    counts = acceptance_by_offset(trace)
    if not counts:
        return None
    alphas = [a / n for n, a in counts]
    tested = sum(n for n, _ in counts)
    s = trace.summary
    return {
        "alphas": alphas,
        "tested": [n for n, _ in counts],
        "alpha": sum(a for _, a in counts) / tested,
        "expected": float(expected_accepted_length(torch.tensor(alphas, dtype=torch.float64))),
        "predicted": tokens_per_verification(alphas) / 2,
        "spent": s.generated_tokens / max(s.nfe, 1),
        "verifications": s.verifications,
    }


def speedup_html(runs: dict[str, Trace]) -> str:
    """The panel's sentences: measured α_i, E[K], and the prediction beside what the run spent."""
    trace = runs.get("S2D2")
    numbers = measured(trace) if trace is not None else None
    if numbers is None:
        return '<div class="speedup">This comparison has no S2D2 verification to learn acceptance from.</div>'
    shown = ", ".join(f"α<sub>{i + 1}</sub> = {a:.2f} ({n})" for i, (a, n) in
                      enumerate(zip(numbers["alphas"][:8], numbers["tested"][:8])))  # fmt: skip
    more = ", …" if len(numbers["alphas"]) > 8 else ""
    ar = runs.get("AR")
    versus = ""
    if ar is not None:
        ar_tpf = ar.summary.generated_tokens / max(ar.summary.nfe, 1)
        versus = f" AR spends one forward per token ({ar_tpf:.2f} tokens per forward here, the prompt's prefill included)."
    return (
        '<div class="speedup"><p>How often the verifier accepted the i-th draft of a span, given that every draft '
        f"before it passed (drafts tested in brackets; later offsets see fewer, since spans shrink as a block "
        f"fills): {shown}{more}. For a full span of {span_length(trace)} drafts that gives E[K] = Σ<sub>k</sub> "
        f"Π<sub>i≤k</sub> α<sub>i</sub> = <b>{numbers['expected']:.2f}</b> accepted drafts per verification (this "
        f"run's spans averaged {trace.summary.mean_accepted_length or 0:.2f}); each verification also "
        f"puts in one token where it rejects, so with a draft and a verify forward per verification this predicts "
        f"<b>{numbers['predicted']:.2f} tokens per forward</b>. The run spent "
        f"<b>{numbers['spent']:.2f}</b> ({html.escape(_why(trace, numbers))}).{versus}</p></div>"
    )


def _why(trace: Trace, numbers: dict) -> str:
    """Why the measurement may differ from the two-forwards-per-verification prediction."""
    reasons = []
    if trace.config.get("lookahead"):
        reasons.append("lookahead drafts the next block inside verify forwards, so fewer than two a verification")
    if trace.summary.verifications_skipped:
        reasons.append(f"the router skipped {trace.summary.verifications_skipped} verification(s)")
    reasons.append("the prefill and the last block's commit add forwards")
    return "; ".join(reasons)


def speedup_figure(runs: dict[str, Trace]) -> go.Figure:
    """Tokens per forward against a constant acceptance rate α, for the run's span length, with the run marked."""
    trace = runs.get("S2D2")
    numbers = measured(trace) if trace is not None else None
    if numbers is None:
        return empty_figure("No S2D2 verification in this comparison.")
    length = span_length(trace)
    fig = go.Figure()
    for forwards, dash, name in ((2, "solid", "draft + verify forward per verification"),
                                 (1, "dot", "one forward per verification (drafts fused in)")):  # fmt: skip
        fig.add_trace(go.Scatter(x=ALPHAS, y=constant_curve(length, forwards), mode="lines", name=name,
                                 line=dict(color=RUN_COLORS["S2D2"], dash=dash),
                                 hovertemplate="α = %{x:.2f}: %{y:.2f} tokens per forward<extra></extra>"))  # fmt: skip
    fig.add_trace(go.Scatter(x=[0, 1], y=[1, 1], mode="lines", name="AR: one token per forward",
                             line=dict(color=RUN_COLORS["AR"], dash="dash"), hoverinfo="skip"))  # fmt: skip
    fig.add_trace(go.Scatter(x=[numbers["alpha"]], y=[numbers["spent"]], mode="markers", name="this run (measured)",
                             marker=dict(size=13, color="#111827", symbol="diamond"),
                             hovertemplate="this run: α = %{x:.2f}, %{y:.2f} tokens per forward<extra></extra>"))  # fmt: skip
    fig.update_layout(
        title=f"Tokens per forward against acceptance rate α (spans of {length})",
        xaxis_title="acceptance rate α (the same at every position)",
        yaxis_title="tokens per forward",
        height=380,
        margin=dict(l=60, r=20, t=50, b=50),
        legend=dict(orientation="h", y=-0.25),
        template="plotly_white",
    )
    return fig
