"""Why each token was accepted, rejected or committed: recording the decision, and saying it in words.

The decoder records, per drafted position, the top-k of the drafter's ``p``,
of the verifier's ``q`` and of the residual ``(q − p)+`` it resampled from,
with the uniform draw and the acceptance probability (``trace_top_k``). The
top-k are taken on the device in one batched ``topk`` per distribution and
travel to the host with the rest of the step's numbers, so recording adds no
host sync per token. :func:`decisions_at` and :func:`describe_position` read
them back for ``python -m s2d2 generate --inspect`` and the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .rules import RULES
from .trace import (
    ACCEPTED,
    CARRIED,
    CONFIDENT,
    DETAIL_VERSION,
    FALLBACK,
    KEPT,
    RATIO,
    RESAMPLED,
    THRESHOLD,
    PositionRecord,
    StepRecord,
    Trace,
)


def top_k_columns(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Rows ``(n, V)`` to ``(n, 2k)`` float64: the k most likely token ids, then their probabilities.

    Float64 holds any vocabulary's ids exactly, so ids and probabilities go to
    the host in the same transfer as the step's other numbers.
    """
    top = torch.topk(probs, min(k, probs.shape[-1]), dim=-1)
    return torch.cat([top.indices.double(), top.values.double()], dim=-1)


def top_pairs(row: list[float]) -> list[list]:
    """One host row of :func:`top_k_columns` as ``[[token, probability], ...]``, zero-probability tokens left out."""
    k = len(row) // 2
    return [[int(t), p] for t, p in zip(row[:k], row[k:]) if p > 0]


# -- reading it back -----------------------------------------------------------


@dataclass
class Decision:
    """One position in one step, with the step around it."""

    index: int  # the step's index in ``trace.steps``
    step: StepRecord
    record: PositionRecord


def decisions_at(trace: Trace, position: int) -> list[Decision]:
    """Every step that drafted or committed generated ``position``, in order."""
    return [
        Decision(i, step, p) for i, step in enumerate(trace.steps) for p in step.positions if p.position == position
    ]


def has_detail(trace: Trace) -> bool:
    """Whether the trace recorded top-k distributions (schema 4 with ``trace_top_k`` > 0)."""
    return any(p.p_top is not None for s in trace.steps for p in s.positions)


def missing_detail(trace: Trace) -> str:
    """Why a trace has no top-k to show."""
    if trace.schema_version < DETAIL_VERSION:
        return (
            f"this trace (schema version {trace.schema_version}) was saved before schema version {DETAIL_VERSION}, "
            "when traces began to record the "
            "top-k of p and q, u and the residual; decode again to see them"
        )
    return "this run was decoded with trace_top_k = 0, so no top-k was recorded"


def plain(text: str) -> str:
    """A token for a terminal: byte-level and SentencePiece word markers as spaces, quoted."""
    return repr(text.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\n"))


def acceptance_test(trace: Trace, d: Decision, show: Callable[[int], str]) -> str | None:
    """The verifier's test at this position, in words and numbers; ``None`` if it was not verified.

    Stochastic: ``u = 0.41 < min(1, q/p) = 0.93: accepted``. Greedy: the
    verifier's argmax against the draft. A verified position after the first
    rejection was never tested (only a ratio threshold may still commit it).
    """
    r, step = d.record, d.step
    if r.q is None:
        return None
    verify = trace.config.get("verify", {})
    gamma = verify.get("ratio_tempering", 1.0)
    ratio = "q/p" if gamma == 1.0 else f"(q/p)^{gamma:g}"
    probability = r.accept_probability if r.accept_probability is not None else min(1.0, r.ratio**gamma)
    test = f"min(1, {ratio}) = {probability:.2f}"
    first_rejected = (
        step.route.span_start + step.accepted if step.route is not None and step.accepted is not None else None
    )
    if first_rejected is not None and r.position - step.block_start > first_rejected:
        if r.outcome == RATIO:
            return f"after the first rejection: {test} ≥ ratio threshold {verify.get('ratio_threshold')}: committed"
        return f"not tested: the draft at position {step.block_start + first_rejected}, earlier in the span, was rejected first"
    verdict = "accepted"
    if r.outcome == RESAMPLED:
        verdict = f"rejected, {show(r.committed)} committed"
    elif r.outcome == KEPT:
        verdict = "rejected, kept as drafted (no resampling)"
    elif r.outcome == RATIO:
        verdict = f"rejected, then committed by the ratio threshold {verify.get('ratio_threshold')}"
    elif r.outcome != ACCEPTED:
        verdict = "rejected"
    if verify.get("acceptance") == "greedy":
        # Greedy accepts the argmax and corrects with it, so an older trace without q's top-k still names it.
        argmax = r.q_top[0][0] if r.q_top else {ACCEPTED: r.token, RESAMPLED: r.committed}.get(r.outcome)
        if argmax is None:
            return f"greedy: the draft {show(r.token)} is not the verifier's argmax: {verdict}"
        sign = "=" if argmax == r.token else "≠"
        return f"greedy: the verifier's argmax {show(argmax)} {sign} draft {show(r.token)}: {verdict}"
    if r.u is None:
        return f"{test}: {verdict}"
    return f"u = {r.u:.2f} {'<' if r.u < probability else '≥'} {test}: {verdict}"


def rule_test(trace: Trace, d: Decision) -> str | None:
    """The diffusion rule's verdict for a position it committed (or passed over), against its threshold."""
    r, rule = d.record, d.step.rule or _stored_rule(trace)
    if trace.method == "ar":
        return "AR commits its one prediction per forward" if r.outcome else None
    if r.outcome not in (THRESHOLD, FALLBACK, CONFIDENT, None) or rule is None:
        return None
    if r.outcome is None and d.step.accepted is not None:
        return None  # passed over by the verifier, not by the rule
    confidence = f"confidence p = {r.p:.3f}"
    minimum = rule.get("minimum") or 1
    committed = "committed" if r.outcome else "left masked"
    if rule["rule"] == "dynamic":
        tau = rule["threshold"]
        if r.p > tau:
            return f"{confidence} > τ = {tau:g}: {committed}"
        if r.outcome:
            least = "one" if minimum == 1 else str(minimum)
            return (
                f"{confidence} ≤ τ = {tau:g}, committed anyway: too few drafts cleared τ and the rule commits at "
                f"least {least} per step, the most confident first"
            )
        return f"{confidence} ≤ τ = {tau:g}: left masked"
    if rule["rule"] == "static":
        return f"{confidence}; the static rule commits the {minimum} most confident draft(s) per step: {committed}"
    return f"{confidence}; the entropy rule commits the least uncertain drafts within a budget of {rule.get('budget')}: {committed}"


def _stored_rule(trace: Trace) -> dict:
    """The diffusion rule from the stored config, for a trace from before steps recorded it."""
    config = trace.config
    name = config.get("s2d2_rule") if trace.method == "s2d2" else trace.method
    records = RULES[name].records if name in RULES else ()
    return {"rule": name, **{key: config.get(field) for key, field in records}}


def describe_position(trace: Trace, position: int, show: Callable[[int], str] | None = None) -> str:
    """Every decision about generated ``position``, one paragraph per step (the CLI's ``--inspect``)."""
    show = show or (lambda token: plain(trace.text_of(token)))
    found = decisions_at(trace, position)
    if not found:
        return f"position {position}: no step drafted it (the output has {len(trace.output_ids)} tokens)"
    lines = [f"position {position}: {len(found)} step(s) drafted or committed it"]
    if not has_detail(trace):
        lines.append(f"(no top-k: {missing_detail(trace)})")
    for d in found:
        r = d.record
        head = f"step {d.index} (block {d.step.block}, step {d.step.step}): drafted {show(r.token)} with p = {r.p:.3f}"
        lines.append(head)
        if r.p_top:
            lines.append("  p top-k: " + ", ".join(f"{show(t)} {p:.3f}" for t, p in r.p_top))
        if r.q is not None:
            lines.append(
                f"  q = {r.q:.3f}, residual energy e = {r.energy:+.3f}, residual mass Σ(q − p)+ = {r.residual_mass:.3f}"
            )
            if r.q_top:
                lines.append("  q top-k: " + ", ".join(f"{show(t)} {p:.3f}" for t, p in r.q_top))
            lines.append("  " + acceptance_test(trace, d, show))
            if r.residual_top:
                greedy = trace.config.get("verify", {}).get("acceptance") == "greedy"
                lines.append(
                    "  residual (q − p)+ top-k"
                    + (" (what stochastic acceptance would resample from)" if greedy else "")
                    + ": "
                    + ", ".join(f"{show(t)} {p:.3f}" for t, p in r.residual_top)
                )
        rule = rule_test(trace, d)
        if rule:
            lines.append("  " + rule)
        if r.outcome == CARRIED:
            lines.append("  carried from the previous forward's last row (Fast-dLLM v2)")
        if r.outcome:
            lines.append(f"  outcome: {r.outcome}, committed {show(r.committed)}")
    return "\n".join(lines)
