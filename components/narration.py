"""One sentence per decoding step, in words: what the drafter, the router and the verifier did.

Pure functions of a :class:`~s2d2.trace.Trace`, so the animation, the slider,
the tests and a saved file all tell the same story.
"""

from __future__ import annotations

from s2d2.trace import (
    ACCEPTED,
    CARRIED,
    CONFIDENT,
    FALLBACK,
    KEPT,
    LOOKAHEAD_DISCARDED,
    LOOKAHEAD_USED,
    RATIO,
    RESAMPLED,
    THRESHOLD,
    StepRecord,
    Trace,
)

from .palette import display_token

LOOKAHEAD_WORDS = {
    LOOKAHEAD_USED: "; the same verify forward already drafted the next block (lookahead used)",
    LOOKAHEAD_DISCARDED: "; the next block's draft it carried was thrown away (lookahead discarded)",
}


def forwards_after(trace: Trace) -> list[int]:
    """For each step, how many forwards the run had spent once that step was done (prefill included)."""
    counts, spent = [], 0
    for step in trace.steps:
        if step.forwards:
            spent = max(spent, max(step.forwards) + 1)
        counts.append(spent)
    return counts


def quoted(trace: Trace, token: int) -> str:
    return f"‘{display_token(trace.text_of(token))}’"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _list(items: list[str], limit: int = 3) -> str:
    shown = items[:limit] + ([f"{len(items) - limit} more"] if len(items) > limit else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _mine(trace: Trace, step: StepRecord) -> list:
    """The step's positions inside the generated text (a prompt's tail block has negative ones)."""
    return [p for p in step.positions if 0 <= p.position < len(trace.output_ids)]


def _ar_sentence(trace: Trace, step: StepRecord) -> str:
    committed = [p for p in _mine(trace, step) if p.outcome]
    if not committed:
        return "the model ran one forward and committed nothing"
    p = committed[0]
    return f"one forward at block size 1 predicted {quoted(trace, p.committed)} at position {p.position}"


def _diffusion_part(trace: Trace, commits: list, rule: str) -> str:
    tokens = [quoted(trace, p.committed) for p in commits]
    if not tokens:
        return f"the {rule} committed nothing"
    return f"the {rule} committed {_plural(len(tokens), 'token')} ({_list(tokens)})"


def _verifier_part(trace: Trace, step: StepRecord, mine: list) -> str:
    by = {o: [p for p in mine if p.outcome == o] for o in (ACCEPTED, RESAMPLED, KEPT, RATIO, FALLBACK, CONFIDENT)}
    route = step.route
    parts = [f"the verifier accepted {len(by[ACCEPTED])}"]
    if route is not None and route.span_length and len(by[ACCEPTED]) == route.span_length:
        parts[0] += " (all it checked)"
    for p in by[RESAMPLED]:
        parts.append(f"replaced {quoted(trace, p.token)} by {quoted(trace, p.committed)} at position {p.position}")
    for p in by[KEPT]:
        parts.append(f"rejected {quoted(trace, p.token)} at position {p.position} but kept it (no resampling)")
    if by[RATIO]:
        parts.append(f"let {_plural(len(by[RATIO]), 'later draft')} through on the ratio threshold")
    if by[FALLBACK]:
        parts.append(f"then the confidence rule added {len(by[FALLBACK])}")
    if by[CONFIDENT]:
        parts.append(f"{_plural(len(by[CONFIDENT]), 'confident draft')} outside the span were committed too")
    return _join(parts)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def sub_blocks(trace: Trace) -> tuple[int, int] | None:
    """``(sub-block length, sub-blocks per block)`` when the run decoded its blocks in sub-blocks (Fast-dLLM v2)."""
    block_length = trace.config.get("block_length") or 0
    sub = trace.config.get("sub_block_length") or block_length
    return (sub, -(-block_length // sub)) if 0 < sub < block_length else None


def step_place(trace: Trace, step: StepRecord) -> str:
    """Which block the step worked on and, where blocks are decoded in sub-blocks, which one.

    A student reading "the drafter proposed 16 tokens" in a 32-token block
    needs to know that only this sub-block was open to the draft.
    """
    place = f"block {step.block}"
    layout = sub_blocks(trace)
    drafted = [p.position for p in step.positions if p.outcome != CARRIED]
    if layout and drafted:
        sub, count = layout
        place += f", sub-block {(min(drafted) - step.block_start) // sub + 1} of {count}"
    return place


def _edit_sentence(trace: Trace, edit) -> str:
    return (
        f"; then the editing pass (τ_edit) rewrote the already committed {quoted(trace, edit.old)} as "
        f"{quoted(trace, edit.new)} at position {edit.position}, the new draft being {edit.confidence:.2f} sure of it"
    )


def step_sentence(trace: Trace, index: int, forwards: int) -> str:
    """What step ``index`` did, ending with the forwards spent so far."""
    step = trace.steps[index]
    mine = _mine(trace, step)
    carried = [p for p in mine if p.outcome == CARRIED]
    lead = f"step {index}"
    if trace.method == "ar":
        body = _ar_sentence(trace, step)
    else:
        lead += f" ({step_place(trace, step)})"
        drafted = [p for p in mine if p.outcome != CARRIED]
        body = f"the drafter proposed {_plural(len(drafted), 'token')}"
        route = step.route
        if route is not None and not route.verify:
            expected = "" if route.expected_accepted is None else f" (E[K] = {route.expected_accepted:.1f})"
            body += f", the router skipped verification{expected}, so " + _diffusion_part(
                trace, [p for p in mine if p.outcome in (THRESHOLD, FALLBACK)], "confidence rule"
            )
        elif step.accepted is not None:
            body += ", " + _verifier_part(trace, step, mine)
        else:
            body += ", " + _diffusion_part(trace, [p for p in mine if p.outcome == THRESHOLD], "confidence rule")
    if carried:
        body = f"{quoted(trace, carried[0].committed)} was carried over from the previous forward; " + body
    for f in step.forwards:
        if f < len(trace.forwards) and trace.forwards[f].lookahead:
            body += LOOKAHEAD_WORDS[trace.forwards[f].lookahead]
    for edit in step.edits:
        body += _edit_sentence(trace, edit)
    ending = ""
    if index == len(trace.steps) - 1 and trace.stop_reason == "stop_token":
        ending = " The end-of-text token was committed, so the run stops."
    return f"{lead}: {body}; {_plural(forwards, 'forward')} so far.{ending}"


def narrate(trace: Trace) -> list[str]:
    """One sentence per step of ``trace``."""
    counts = forwards_after(trace)
    return [step_sentence(trace, i, counts[i]) for i in range(len(trace.steps))]
