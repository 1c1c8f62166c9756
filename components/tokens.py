"""A run's text with every token coloured by how it was committed, details on hover."""

from __future__ import annotations

import html

from s2d2.trace import EditRecord, PositionRecord, Trace

from .narration import forwards_after
from .palette import OUTCOME_COLORS, OUTCOME_LABELS, display_outcome, display_token


def commit_records(trace: Trace) -> dict[int, tuple[int, int, PositionRecord]]:
    """For each generated position: ``(global step, block, record)`` of its commit."""
    found = {}
    for index, step in enumerate(trace.steps):
        for p in step.committed:
            if p.position < len(trace.output_ids):
                found[p.position] = (index, step.block, p)
    return found


def final_edits(trace: Trace) -> dict[int, tuple[int, EditRecord]]:
    """For each edited position: ``(global step, last edit)``."""
    return {e.position: (index, e) for index, step in enumerate(trace.steps) for e in step.edits}


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def token_tooltip(trace: Trace, step_index: int, block: int, p: PositionRecord) -> str:
    lines = [
        f"position {p.position} · block {block} · step {step_index}",
        OUTCOME_LABELS[display_outcome(trace.method, p.outcome)],
        f"drafted {display_token(trace.text_of(p.token))!r}"
        + ("" if p.committed == p.token else f" → committed {display_token(trace.text_of(p.committed))!r}"),
        f"p (drafter) {_fmt(p.p)}",
    ]
    if p.q is not None:
        lines += [
            f"q (verifier) {_fmt(p.q)}",
            f"ratio q/p {_fmt(p.ratio)}",
            f"residual energy e {_fmt(p.energy, '+.3f')}",
        ]
    return "\n".join(lines)


def _split_space(token: str) -> tuple[str, str]:
    """Leading whitespace goes outside the coloured box, so words read naturally."""
    body = token.lstrip(" ")
    if not body:
        return "", token.replace("\n", "⏎\n") or "∅"
    return token[: len(token) - len(body)], body


def tokens_html(trace: Trace) -> str:
    """The generated text as coloured ``<span>`` tokens with native hover tooltips.

    Each token carries the step that committed it (``data-step``) and the
    forwards spent by then (``data-f``), so the page's player can show the text
    as it stood at any step, or at any forward count across runs, and its
    position (``data-pos``), so a click opens the inspector there.
    """
    spent = forwards_after(trace)
    commits = commit_records(trace)
    edits = final_edits(trace)
    spans = []
    for position, token in enumerate(trace.output_tokens):
        if position not in commits:
            continue
        step_index, block, record = commits[position]
        outcome = display_outcome(trace.method, record.outcome)
        tooltip = token_tooltip(trace, step_index, block, record)
        edited = ""
        if position in edits:
            edit_step, edit = edits[position]
            old, new = display_token(trace.text_of(edit.old)), display_token(trace.text_of(edit.new))
            tooltip += f"\nedited at step {edit_step}: {old!r} → {new!r} (confidence {edit.confidence:.3f})"
            edited = " tok-edited"
        title = html.escape(tooltip, quote=True)
        space, body = _split_space(display_token(token))
        spans.append(
            f'{space}<span class="tok tok-{outcome}{edited}" data-pos="{position}" data-step="{step_index}" data-f="{spent[step_index]}" '
            f'title="{title}">{html.escape(body)}</span>'
        )
    stop = {
        "stop_token": "",
        "running": ' <span class="tok-cut">… decoding</span>',
    }.get(trace.stop_reason, ' <span class="tok-cut">… (max new tokens)</span>')
    return f'<div class="tokens">{"".join(spans)}{stop}</div>'


def outcomes_in(runs: dict[str, Trace]) -> tuple[str, ...]:
    """The colours the runs' texts use, in the legend's order: a legend of ten colours where three occur only
    sends the reader looking for the other seven."""
    used = {display_outcome(t.method, p.outcome) for t in runs.values() for s in t.steps for p in s.committed}
    return tuple(o for o in OUTCOME_LABELS if o in used)


def legend_html(outcomes=tuple(OUTCOME_LABELS), edited: bool = True) -> str:
    """One swatch per outcome in ``outcomes`` (and the editing outline when ``edited``)."""
    items = "".join(
        f'<span class="legend-item"><span class="swatch" style="background:{OUTCOME_COLORS[o]}"></span>{html.escape(OUTCOME_LABELS[o])}</span>'
        for o in outcomes
    )
    if edited:
        items += '<span class="legend-item"><span class="swatch swatch-edited"></span>edited later (τ_edit)</span>'
    return f'<div class="legend">{items}</div>'
