"""What if? The inspector's offers to decode the run again, and the new run set beside the original.

What-if drafts: the offer lists the drafter's other top-k candidates at a drafted S2D2 position. A pick decodes the run
again with that token forced into the step's draft (:class:`s2d2.forcing.ForcedDraft`; everything before
the step is the original run, token for token), and the panel says what the verifier did with it and
what it cost, in the words the inspector uses. The forced run is not a decode of the model, so the panel
makes no exactness claim for it: it states what happened.

Rewinds: from any step of a block-diffusion run, the learner picks another method, acceptance test, router
or τ, and the run is decoded again with the original settings up to that step and the new ones from there
(:class:`s2d2.rewind.Rewind`). The panel says what changed, where the text parts from the original, what it
cost, and whether the new run is still exact.
"""

from __future__ import annotations

import html

from s2d2.config import BY_NAME
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


def _text_beside(original: Trace, again: Trace) -> str:
    """Where the new run's text parts from the original's, and how each goes on from there."""
    differs = _first_difference(original.output_ids, again.output_ids)
    if differs is None:
        return "The text is the original run's, token for token."

    def tail(trace: Trace) -> str:
        """The run's text from the difference on; the stop token that ends a run is said, not spelled."""
        tokens = trace.output_tokens[differs : differs + SHOWN_TOKENS]
        ended = bool(tokens) and trace.stop_reason == "stop_token" and differs + len(tokens) == len(trace.output_tokens)
        text = html.escape(display_token("".join(tokens[:-1] if ended else tokens)))
        return text + (" <em>(end of text)</em>" if ended else "")

    return f"The text differs from token {differs} on: <q>{tail(again)}</q> where the original wrote <q>{tail(original)}</q>."


def _cost_beside(original: Trace, again: Trace) -> str:
    """The new run's forwards and rejections against the original's."""
    nfe, before = again.summary.nfe, original.summary.nfe
    delta = nfe - before
    than = f"{delta} more than" if delta > 0 else f"{-delta} fewer than" if delta < 0 else "as many as"
    rejections = again.summary.rejections
    return (
        f"{nfe} forwards ({than} the original's {before}); "
        f"{rejections} rejection{'' if rejections == 1 else 's'} (original: {original.summary.rejections})."
    )


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
    text, cost = _text_beside(original, forced), _cost_beside(original, forced)
    kind = "whatif-accepted" if accepted else "whatif-corrected"
    return (
        f'<div class="inspector whatif {kind}" data-run="{run}" data-step="{index}" data-position="{position}">'
        f'{head}<p class="insp-test"><b>{html.escape(verdict)}</b></p>'
        f"<p>{text}</p><p><b>Cost:</b> {cost}</p>"
        '<p class="insp-note">A forced run is not a decode of the model: it carries no exactness claim. '
        f'<button type="button" class="whatif-back" data-step="{index}" data-position="{position}">'
        "◀ Back to the original step</button></p></div>"
    )


# The settings a rewind offers, as the request names them (s2d2.rewind.REWINDABLE holds all it could change).
REWIND_FIELDS = ("method", "acceptance", "policy", "threshold")
CHANGE_LABELS = {"threshold": "τ", "verify.acceptance": "acceptance", "verify.policy": "router"}


def _select(name: str, label: str, choices, current) -> str:
    options = "".join(
        f'<option value="{c}"{" selected" if c == current else ""}>{html.escape(str(c))}</option>' for c in choices
    )
    return f'<label>{label} <select name="{name}">{options}</select></label>'


def rewind_offer(trace: Trace, run: str, index: int, position: int) -> str:
    """A form to decode the run again from step ``index`` with another method, acceptance, router or τ."""
    if trace.method == "ar":
        return ""
    verify = trace.config.get("verify", {})
    methods = [m for m in BY_NAME["method"].choices if m != "ar"]
    threshold = trace.config.get("threshold", BY_NAME["threshold"].default)
    fields = (
        _select("method", "method", methods, trace.method)
        + _select("acceptance", "acceptance (S2D2)", BY_NAME["acceptance"].choices, verify.get("acceptance"))
        + _select("policy", "router (S2D2)", BY_NAME["policy"].choices, verify.get("policy"))
        + f'<label>τ <input name="threshold" type="number" min="0" max="1" step="0.05" value="{threshold}"></label>'
    )
    return (
        f'<details class="rewind-offer" data-fields="{"|".join(REWIND_FIELDS)}"><summary>Rewind: decode again from step {index} with other settings</summary>'
        f'<div class="rewind-fields">{fields}</div>'
        f'<button type="button" class="rewind-go" data-run="{run}" data-step="{index}" data-position="{position}">'
        f"Decode from step {index}</button>"
        '<p class="insp-note">Steps before it are the original\'s, token for token; from it on, the new settings '
        "commit (a new router starts there).</p></details>"
    )


def _change_words(changed: dict) -> str:
    """``method s2d2 → dynamic, τ 0.9 → 0.3`` (``the same settings`` when nothing changed)."""
    words = [
        f"{CHANGE_LABELS.get(name, name)} {change['before']} → {change['after']}" for name, change in changed.items()
    ]
    return ", ".join(words) or "the same settings"


def rewind_html(original: Trace, rewound: Trace, run: str, position: int = 0) -> str:
    """The rewound run beside the original: what changed where, the text, the cost, and its exactness."""
    r = rewound.rewound
    index = next(i for i, s in enumerate(rewound.steps) if (s.block, s.step) == (r["block"], r["step"]))
    head = (
        f'<div class="insp-head"><span><b>Rewound</b> · from step {index}: {html.escape(_change_words(r["changed"]))}'
        f'</span><button type="button" class="insp-close" aria-label="Close the {run} inspector">×</button></div>'
    )
    exactness = rewound.exactness
    if exactness.get("exact"):
        exact = "Still exact: these settings write the model's own AR output."
    else:
        exact = "This run is not exact: " + "; ".join(exactness.get("reasons", [])) + "."
    verified = sum(s.accepted is not None for s in rewound.steps[index:])
    after = len(rewound.steps) - index
    return (
        f'<div class="inspector rewound" data-run="{run}" data-step="{index}" data-position="{position}">{head}'
        f"<p>{_text_beside(original, rewound)}</p><p><b>Cost:</b> {_cost_beside(original, rewound)} "
        f"From the switch on: {after} step{'' if after == 1 else 's'}, {verified} verified.</p>"
        f'<p class="insp-note">{html.escape(exact)} '
        f'<button type="button" class="whatif-back" data-step="{index}" data-position="{position}">'
        "◀ Back to the original step</button></p></div>"
    )
