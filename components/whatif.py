"""What if the drafter had proposed another token? The inspector's offer, and the forced run set beside the original.

The offer lists the drafter's other top-k candidates at a drafted S2D2 position. A pick decodes the run
again with that token forced into the step's draft (:class:`s2d2.forcing.ForcedDraft`; everything before
the step is the original run, token for token), and the panel says what the verifier did with it and
what it cost, in the words the inspector uses. The forced run is not a decode of the model, so the panel
makes no exactness claim for it: it states what happened.
"""

from __future__ import annotations

import html

from s2d2.decisions import acceptance_test, decisions_at
from s2d2.trace import ACCEPTED, Trace

from .palette import display_token, token_quoter

MOST_OFFERED = 4  # the drafter's next most likely tokens offered in place of its draft
SHOWN_TOKENS = 12  # of each text, from where they part


def what_if_offer(trace: Trace, run: str, index: int, record) -> str:
    """Buttons for the drafter's other likely tokens at ``record`` (a position drafted at step ``index``)."""
    if trace.method != "s2d2" or not record.p_top or trace.steps[index].accepted is None:
        return ""
    others = [token for token, _ in record.p_top if token != record.token][:MOST_OFFERED]
    if not others:
        return ""
    show = token_quoter(trace)
    buttons = "".join(
        f'<button type="button" class="whatif-go" data-run="{run}" data-step="{index}" '
        f'data-position="{record.position}" data-token="{token}">{html.escape(show(token))}</button>'
        for token in others
    )
    return (
        f'<div class="whatif-offer"><span>What if the drafter had proposed</span>{buttons}'
        "<span>here instead? The run is decoded again with that draft forced.</span></div>"
    )


def _forced_decision(forced: Trace):
    """The forced run's step index and its decision at the forced position."""
    f = forced.forced
    index = next(i for i, s in enumerate(forced.steps) if (s.block, s.step) == (f["block"], f["step"]))
    return index, next(d for d in decisions_at(forced, f["position"]) if d.index == index)


def _verdict(forced: Trace, decision) -> str:
    """What the verifier (or the fallback) did with the forced draft, in the inspector's words."""
    test = acceptance_test(forced, decision, token_quoter(forced))
    if test is not None:
        return f"Verifier: {test}."
    if decision.record.outcome:
        return "The router skipped verification at this step; the diffusion rule committed the forced draft."
    return "The router skipped verification at this step, and the position stayed masked."


def _first_difference(a: list[int], b: list[int]) -> int | None:
    shared = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return shared if shared is not None or len(a) == len(b) else min(len(a), len(b))


def what_if_html(original: Trace, forced: Trace, run: str) -> str:
    """The forced run beside the original: the verdict on the forced draft, the text, the cost."""
    f = forced.forced
    show = token_quoter(forced)
    index, decision = _forced_decision(forced)
    position = f["position"]
    head = (
        f'<div class="insp-head"><span><b>What if</b> · position {position}, step {index}: '
        f"{html.escape(show(f['token']))} in place of {html.escape(show(f['drafted']))}</span>"
        f'<button type="button" class="insp-close" aria-label="Close the {run} inspector">×</button></div>'
    )
    verdict = _verdict(forced, decision)
    accepted = decision.record.outcome == ACCEPTED
    differs = _first_difference(original.output_ids, forced.output_ids)
    if differs is None:
        text = "The text is the original run's, token for token."
    else:
        def tail(trace: Trace) -> str:
            return html.escape(display_token("".join(trace.output_tokens[differs : differs + SHOWN_TOKENS])))

        text = (
            f"The text differs from token {differs} on: <q>{tail(forced)}</q> where the original wrote "
            f"<q>{tail(original)}</q>."
        )
    nfe, before = forced.summary.nfe, original.summary.nfe
    delta = nfe - before
    than = f"{delta} more than" if delta > 0 else f"{-delta} fewer than" if delta < 0 else "as many as"
    cost = (
        f"{nfe} forwards ({than} the original's {before}); "
        f"{forced.summary.rejections} rejection{'' if forced.summary.rejections == 1 else 's'} "
        f"(original: {original.summary.rejections})."
    )
    kind = "whatif-accepted" if accepted else "whatif-corrected"
    return (
        f'<div class="inspector whatif {kind}" data-run="{run}" data-step="{index}" data-position="{position}">'
        f"{head}<p class=\"insp-test\"><b>{html.escape(verdict)}</b></p>"
        f"<p>{text}</p><p><b>Cost:</b> {cost}</p>"
        '<p class="insp-note">A forced run is not a decode of the model: it carries no exactness claim. '
        f'<button type="button" class="whatif-back" data-step="{index}" data-position="{position}">'
        "◀ Back to the original step</button></p></div>"
    )
