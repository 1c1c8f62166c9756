"""The token inspector: why one position was accepted, rejected or committed at one step.

A pure function of a trace, a step and a position, returning HTML: the
drafter's ``p`` and the verifier's ``q`` as top-k bars side by side (the
drafted and the committed token marked), the acceptance test in words and
numbers, the residual ``(q − p)+`` a rejected draft was replaced from, and for
a diffusion commit its confidence against the rule's threshold. The page's
player script asks for a panel when a cell or a token is clicked, an arrow
key is pressed or Play moves on (``assets/player.js``).
"""

from __future__ import annotations

import html

from s2d2.decisions import Decision, acceptance_test, decisions_at, has_detail, missing_detail, rule_test
from s2d2.trace import RESAMPLED, Trace

from .palette import OUTCOME_COLORS, OUTCOME_LABELS, display_outcome, display_token, token_quoter
from .whatif import rewind_offer, what_if_offer

KEYS = "click a cell or a token · ← → position · ↑ ↓ step"


def inspector_hint(run: str) -> str:
    """The closed panel: what clicking does."""
    return (
        f'<div class="inspector inspector-closed" data-run="{run}"><p><b>Inspector.</b> Click any cell of the {run} '
        "trajectory (or a token of its text above) to see what the drafter and the verifier wanted there, "
        "and why the token was accepted, rejected or committed.</p></div>"
    )


def _bars(trace: Trace, title: str, pairs: list, marks: dict[int, str], color: str) -> str:
    """One distribution's top-k as horizontal bars, tokens named in ``marks`` labelled."""
    rows = []
    for token, prob in pairs:
        label = "".join(f'<span class="insp-mark insp-mark-{m}">{m}</span>' for m in marks.get(token, "").split())
        shown = html.escape(display_token(trace.text_of(token)).replace("\n", "⏎"))
        rows.append(
            f'<div class="insp-row"><span class="insp-token">{shown}</span>'
            f'<span class="insp-bar"><span style="width:{100 * prob:.1f}%;background:{color}"></span></span>'
            f'<span class="insp-value">{prob:.3f}</span>{label}</div>'
        )
    return f'<div class="insp-dist"><div class="insp-dist-title">{title}</div>{"".join(rows)}</div>'


def _marks(record) -> dict[int, str]:
    marks = {record.token: "drafted"}
    if record.outcome and record.committed is not None:
        marks[record.committed] = (marks.get(record.committed, "") + " committed").strip()
    return marks


def _confidence_bar(trace: Trace, d: Decision) -> str:
    """A baseline commit: its confidence as a bar, the rule's threshold as a line across it."""
    tau = (d.step.rule or {}).get("threshold", trace.config.get("threshold") if trace.method == "dynamic" else None)
    line = (
        "" if tau is None else f'<span class="insp-threshold" style="left:{100 * tau:.1f}%" title="τ = {tau:g}"></span>'
    )
    color = OUTCOME_COLORS[display_outcome(trace.method, d.record.outcome)] if d.record.outcome else "#94a3b8"
    return (
        '<div class="insp-confidence"><span class="insp-dist-title">confidence against the threshold</span>'
        f'<span class="insp-bar insp-bar-wide"><span style="width:{100 * d.record.p:.1f}%;background:{color}"></span>{line}</span>'
        f'<span class="insp-value">p = {d.record.p:.3f}{"" if tau is None else f" · τ = {tau:g}"}</span></div>'
    )


def _numbers(d: Decision) -> str:
    r = d.record
    items = [("p(draft)", f"{r.p:.3f}")]
    if r.q is not None:
        items += [
            ("q(draft)", f"{r.q:.3f}"),
            ("q/p", f"{r.ratio:.2f}"),
            ("residual energy e = log p − log q", f"{r.energy:+.2f}"),
            ("residual mass Σ(q − p)+", f"{r.residual_mass:.2f}"),
        ]
    cells = "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="insp-numbers">{cells}</dl>'


def _header(trace: Trace, run: str, index: int, position: int) -> str:
    step = trace.steps[index]
    return (
        f'<div class="insp-head"><span><b>position {position}</b> · step {index} '
        f"(block {step.block})</span>"
        f'<button type="button" class="insp-close" aria-label="Close the {run} inspector">×</button></div>'
        f'<div class="insp-keys">{KEYS}</div>'
    )


def inspector_html(trace: Trace | None, run: str, index: int, position: int) -> str:
    """The panel for generated ``position`` at step ``index`` of ``trace``."""
    if trace is None or not trace.steps:
        return inspector_hint(run)
    index = max(0, min(index, len(trace.steps) - 1))
    attrs = f'data-run="{run}" data-step="{index}" data-position="{position}"'
    head = _header(trace, run, index, position)
    found = {d.index: d for d in decisions_at(trace, position)}
    if index not in found:
        where = [d for d in found.values() if d.record.outcome]
        note = f"Position {position} was not drafted at this step"
        if where:
            d = where[0]
            note += (
                f": step {d.index} committed it ({html.escape(display_token(trace.text_of(d.record.committed)))!r}). "
                "Press ↑ or ↓ to go there, or click its coloured cell."
            )
        else:
            note += "."
        return f'<div class="inspector" {attrs}>{head}<p class="insp-note">{note}</p></div>'
    d = found[index]
    r, show = d.record, token_quoter(trace)
    parts = [head]
    if r.outcome:
        outcome = display_outcome(trace.method, r.outcome)
        parts.append(
            f'<div class="insp-outcome" style="border-color:{OUTCOME_COLORS[outcome]}">'
            f"{html.escape(OUTCOME_LABELS[outcome])}: {html.escape(show(r.committed))} committed</div>"
        )
    else:
        parts.append(
            f'<div class="insp-outcome">drafted {html.escape(show(r.token))}, still masked after this step</div>'
        )
    test = acceptance_test(trace, d, show)
    if test:
        parts.append(f'<p class="insp-test"><b>Verifier:</b> {html.escape(test)}</p>')
    rule = rule_test(trace, d)
    if rule:
        parts.append(f'<p class="insp-test insp-rule"><b>Diffusion rule:</b> {html.escape(rule)}</p>')
        parts.append(_confidence_bar(trace, d))
    if not has_detail(trace):
        parts.append(f'<p class="insp-missing">No top-k here: {html.escape(missing_detail(trace))}.</p>')
    else:
        marks = _marks(r)
        dists = [_bars(trace, "p — drafter (diffusion)", r.p_top or [], marks, "#3b82f6")]
        if r.q_top:
            dists.append(_bars(trace, "q — verifier (AR)", r.q_top, marks, "#16a34a"))
        parts.append(f'<div class="insp-dists">{"".join(dists)}</div>')
        if r.residual_top:
            greedy = trace.config.get("verify", {}).get("acceptance") == "greedy"
            title = "residual (q − p)+, normalised: " + (
                "what stochastic acceptance would have drawn from (greedy commits q's argmax)"
                if greedy
                else "the replacement was drawn from this"
            )
            parts.append(_bars(trace, title, r.residual_top, marks, "#dc2626" if r.outcome == RESAMPLED else "#ea580c"))
    parts.append(_numbers(d))
    if trace.method == "s2d2" and d.step.accepted is not None:
        parts.append(
            f'<button type="button" class="guide-go" data-step="{index}" data-part="0">'
            f"Walk me through step {index}, part by part</button>"
        )
    parts.append(what_if_offer(trace, run, index, r))
    parts.append(rewind_offer(trace, run, index, position))
    return f'<div class="inspector" {attrs}>{"".join(parts)}</div>'
