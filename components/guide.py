"""A guided step: one S2D2 verification taken apart in order, with the run's own numbers.

The inspector answers "why this token?"; the walk-through answers "what happens in one step?" for a
learner who has not met the terms yet. It goes through one step part by part: the block's drafts and
their ``p``, the verifier's span and ``q``, the acceptance test position by position, the first
rejection and its residual, and what the diffusion rule commits after it. Each part names the cells it
talks about (``data-step`` and ``data-positions``), which the page's player script outlines in the
trajectory, and every term is defined where it first appears. A pure function of a trace, like every
view, so a live run, a saved one and a replayed file walk through alike.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from s2d2.decisions import Decision, acceptance_test
from s2d2.trace import ACCEPTED, FALLBACK, KEPT, RATIO, RESAMPLED, THRESHOLD, PositionRecord, StepRecord, Trace

from .narration import quoted, step_place

AUTO = "auto"  # the page's first ask: the step worth walking through, chosen here


@dataclass(frozen=True)
class Part:
    """One stop of the walk-through: what it says and which positions of the step it is about."""

    text: str
    positions: tuple[int, ...]


def step_to_walk(trace: Trace) -> int | None:
    """The step a first walk-through opens on: the first with a rejection, else the first verification."""
    verified = [i for i, s in enumerate(trace.steps) if s.accepted is not None and _generated(trace, s)]
    rejected = [i for i in verified if any(p.outcome == RESAMPLED for p in _generated(trace, trace.steps[i]))]
    return (rejected or verified or [None])[0]


def _generated(trace: Trace, step: StepRecord) -> list[PositionRecord]:
    """The step's positions inside the generated text (a prompt's tail block has negative ones)."""
    return [p for p in step.positions if 0 <= p.position < len(trace.output_ids)]


def _tested(trace: Trace, step: StepRecord) -> list[PositionRecord]:
    """The verified span's positions, in order (those the verifier gave a q)."""
    return sorted((p for p in _generated(trace, step) if p.q is not None), key=lambda p: p.position)


def _drafts_part(trace: Trace, step: StepRecord, index: int) -> Part:
    drafted = _generated(trace, step)
    shown = ", ".join(f"{quoted(trace, p.token)} (p = {p.p:.2f})" for p in drafted[:6])
    more = f" and {len(drafted) - 6} more" if len(drafted) > 6 else ""
    text = (
        f"Step {index} works on {step_place(trace, step)}. The <b>drafter</b> is the model in diffusion mode: one "
        f"forward fills every masked position of the block at once. It proposed {len(drafted)} token(s): "
        f"{shown}{more}. <b>p</b> is the drafter's own probability for its proposal, its confidence; "
        "a threshold baseline would commit the drafts whose p clears τ."
    )
    return Part(text, tuple(p.position for p in drafted))


def _verifier_part(trace: Trace, step: StepRecord) -> Part:
    tested = _tested(trace, step)
    route = step.route
    why = ""
    if route is not None and route.expected_accepted is not None:
        why = f" (its estimate of accepted drafts E[K] = {route.expected_accepted:.1f} made verifying worth a forward)"
    greedy = trace.config.get("verify", {}).get("acceptance") == "greedy"
    rule = (
        "With greedy acceptance a draft is kept when it is the verifier's most likely token (its argmax)."
        if greedy
        else "A draft is kept with probability min(1, q/p): a uniform draw u below it accepts. Where the verifier "
        "likes the token at least as much as the drafter (q ≥ p) that is certain."
    )
    text = (
        f"The router chose to verify{why}. The <b>span</b> is the run of positions from the first still-masked one: "
        f"here positions {tested[0].position}–{tested[-1].position}. The <b>verifier</b> is the same model reading left "
        f"to right at block size 1; one forward over the span gives <b>q</b>, its probability for each draft given "
        f"everything before it. {rule}"
    )
    return Part(text, tuple(p.position for p in tested))


def _test_words(trace: Trace, step: StepRecord, index: int, p: PositionRecord) -> str:
    return html.escape(acceptance_test(trace, Decision(index, step, p), lambda t: quoted(trace, t)) or "")


def _accepted_part(trace: Trace, step: StepRecord, index: int, accepted: list[PositionRecord]) -> Part:
    lines = "".join(f"<li>position {p.position}: {_test_words(trace, step, index, p)}</li>" for p in accepted[:8])
    more = f"<li>… and {len(accepted) - 8} more, each accepted</li>" if len(accepted) > 8 else ""
    text = (
        f"The test runs left to right. The first {len(accepted)} draft(s) pass, so each is committed as drafted:"
        f"<ul>{lines}{more}</ul>"
    )
    return Part(text, tuple(p.position for p in accepted))


def _rejection_part(trace: Trace, step: StepRecord, index: int, rejected: PositionRecord) -> Part:
    test = _test_words(trace, step, index, rejected)
    greedy = trace.config.get("verify", {}).get("acceptance") == "greedy"
    if rejected.outcome == KEPT:
        replaced = "With resampling off, the rejected draft is committed as it is."
    elif greedy:
        replaced = f"Greedy acceptance puts in the verifier's argmax, {quoted(trace, rejected.committed)}."
    else:
        top = ", ".join(f"{quoted(trace, t)} {q:.2f}" for t, q in (rejected.residual_top or [])[:3])
        replaced = (
            f"The replacement, {quoted(trace, rejected.committed)}, is drawn from the <b>residual</b> (q − p)+: the "
            "verifier's probability where it exceeds the drafter's, renormalised. Drawing from it after a rejection is "
            "what makes the committed token follow q exactly, as if the verifier had written it"
            + (f" (residual's top: {top})." if top else ".")
        )
    text = f"Position {rejected.position} fails: {test}. {replaced}"
    return Part(text, (rejected.position,))


def _after_part(trace: Trace, step: StepRecord, index: int, rejected: PositionRecord | None) -> Part:
    generated = _generated(trace, step)
    fallback = [p for p in generated if p.outcome in (FALLBACK, THRESHOLD)]
    ratio = [p for p in generated if p.outcome == RATIO]
    later = [p for p in _tested(trace, step) if rejected is not None and p.position > rejected.position]
    parts = []
    if later:
        parts.append(
            f"Nothing after position {rejected.position} is tested: those {len(later)} draft(s) were written without "
            "the corrected token, so they go back to masks and are redrafted next step"
        )
    elif rejected is None:
        parts.append("Every draft in the span passed, so the whole span is committed")
    if ratio:
        parts.append(f"{len(ratio)} later draft(s) still went in on the ratio threshold")
    if fallback:
        tokens = ", ".join(quoted(trace, p.committed) for p in fallback[:4])
        parts.append(
            f"then the <b>fallback</b>, the diffusion rule applied after a verification that committed too few, "
            f"added {len(fallback)} confident draft(s): {tokens}"
        )
    cost = len(step.forwards)
    parts.append(f"this step cost {cost} forward{'s' if cost != 1 else ''} in all")
    text = "; ".join(parts) + ". The next step drafts the block's remaining masks with these tokens in place."
    return Part(text[0].upper() + text[1:], tuple(p.position for p in later + fallback + ratio))


def _skip_parts(trace: Trace, step: StepRecord, index: int) -> list[Part]:
    route = step.route
    expected = "" if route is None or route.expected_accepted is None else f" (E[K] = {route.expected_accepted:.1f})"
    committed = [p for p in _generated(trace, step) if p.outcome]
    text = (
        f"The router skipped verification here{expected}: a verify forward would not have paid for itself. So "
        f"the diffusion rule alone committed {len(committed)} draft(s), "
        + (", ".join(quoted(trace, p.committed) for p in committed[:4]) or "none")
        + ", exactly as the baseline would have."
    )
    return [Part(text, tuple(p.position for p in committed))]


def walk_parts(trace: Trace, index: int) -> list[Part]:
    """Every part of the walk through step ``index``, in order."""
    step = trace.steps[index]
    parts = [_drafts_part(trace, step, index)]
    if step.accepted is None:
        return parts + _skip_parts(trace, step, index)
    tested = _tested(trace, step)
    if not tested:
        return parts
    parts.append(_verifier_part(trace, step))
    accepted = [p for p in tested if p.outcome == ACCEPTED]
    rejected = next((p for p in tested if p.outcome in (RESAMPLED, KEPT)), None)
    if accepted:
        parts.append(_accepted_part(trace, step, index, accepted))
    if rejected is not None:
        parts.append(_rejection_part(trace, step, index, rejected))
    parts.append(_after_part(trace, step, index, rejected))
    return parts


def _numbers_table(trace: Trace, step: StepRecord, index: int, now: tuple[int, ...]) -> str:
    """Every drafted position of the step with p, q, the test and the verdict; the part's rows marked."""
    greedy = trace.config.get("verify", {}).get("acceptance") == "greedy"
    rows = []
    for p in sorted(_generated(trace, step), key=lambda p: p.position):
        if greedy:  # the test is "is the draft q's argmax?": no draw, no min(1, q/p)
            test = html.escape(quoted(trace, p.q_top[0][0])) if p.q_top else ""
        else:
            limit = "" if p.accept_probability is None else f"{p.accept_probability:.2g}"
            test = f"{limit}</td><td>{'' if p.u is None else f'{p.u:.2f}'}"
        q = "" if p.q is None else f"{p.q:.3g}"
        verdict = p.outcome or "masked again"
        committed = "" if p.committed is None or p.committed == p.token else f" → {quoted(trace, p.committed)}"
        mark = ' class="guide-now"' if p.position in now else ""
        rows.append(
            f"<tr{mark}><td>{p.position}</td><td>{html.escape(quoted(trace, p.token))}</td><td>{p.p:.3f}</td>"
            f"<td>{q}</td><td>{test}</td><td>{html.escape(verdict + committed)}</td></tr>"
        )
    tests = "<th>q's argmax</th>" if greedy else "<th>min(1,q/p)</th><th>u</th>"
    head = f"<tr><th>pos</th><th>draft</th><th>p</th><th>q</th>{tests}<th>verdict</th></tr>"
    return f'<div class="guide-table-wrap"><table class="guide-table">{head}{"".join(rows)}</table></div>'


def guide_html(trace: Trace | None, run: str, asked_step: str, asked_part: str) -> str:
    """The walk-through panel at one part of one step (``asked_step`` may be :data:`AUTO`)."""
    if trace is None or trace.method != "s2d2" or not trace.steps:
        return '<div class="guide"><p>The walk-through follows an S2D2 run: run or replay one first.</p></div>'
    try:
        index = step_to_walk(trace) if asked_step == AUTO else int(asked_step)
        part = int(asked_part)
    except ValueError:
        index, part = step_to_walk(trace), 0
    if index is None:
        return '<div class="guide"><p>This run never verified a draft, so there is no verification to walk through.</p></div>'
    index = max(0, min(index, len(trace.steps) - 1))
    parts = walk_parts(trace, index)
    part = max(0, min(part, len(parts) - 1))
    now = parts[part]
    step = trace.steps[index]
    attrs = (
        f'data-run="{run}" data-step="{index}" data-part="{part}" '
        f'data-positions="{",".join(map(str, now.positions))}"'
    )
    back = f'<button type="button" class="guide-go" data-step="{index}" data-part="{part - 1}"{" disabled" if part == 0 else ""}>◀ Previous</button>'
    last = part == len(parts) - 1
    forward = f'<button type="button" class="guide-go" data-step="{index}" data-part="{part + 1}"{" disabled" if last else ""}>Next ▶</button>'
    later = step_after(trace, index)
    another = (
        ""
        if later is None
        else f'<button type="button" class="guide-go" data-step="{later}" data-part="0">Next verification (step {later})</button>'
    )
    return (
        f'<div class="guide inspector" {attrs}>'
        f'<div class="insp-head"><span><b>Walk-through</b> · step {index} ({step_place(trace, step)}) · '
        f"part {part + 1} of {len(parts)}</span>"
        f'<button type="button" class="insp-close" aria-label="Close the walk-through">×</button></div>'
        f'<div class="guide-text">{now.text}</div>'
        f'<div class="guide-nav">{back}{forward}{another}</div>'
        f"{_numbers_table(trace, step, index, now.positions)}</div>"
    )


def step_after(trace: Trace, index: int) -> int | None:
    """The next step that verified something, for "next verification"."""
    return next((i for i in range(index + 1, len(trace.steps)) if trace.steps[i].accepted is not None), None)
