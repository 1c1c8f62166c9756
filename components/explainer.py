"""The "How it works" panel: a short text and a diagram drawn here, in SVG."""

from __future__ import annotations

import html

from .palette import DRAFTED, OUTCOME_COLORS, display_token, pale

CELL, GAP = 58, 8


def _cells(x: float, y: float, tokens: list[tuple[str, str, str]]) -> str:
    """A row of token cells: (token as the tokenizer spells it, fill, caption under the cell).

    Tokens are drawn as a reader sees them (``▁6`` as `` 6``, the space kept).
    """
    parts = []
    for i, (text, fill, caption) in enumerate(tokens):
        cx = x + i * (CELL + GAP)
        parts.append(
            f'<rect x="{cx}" y="{y}" width="{CELL}" height="34" rx="6" fill="{fill}" stroke="#475569" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{cx + CELL / 2}" y="{y + 22}" text-anchor="middle" font-size="15" '
            f'font-family="ui-monospace,monospace" xml:space="preserve">{html.escape(display_token(text))}</text>'
        )
        if caption:
            parts.append(
                f'<text x="{cx + CELL / 2}" y="{y + 50}" text-anchor="middle" font-size="11" fill="#475569">{caption}</text>'
            )
    return "".join(parts)


def _label(x: float, y: float, title: str, note: str) -> str:
    return (
        f'<text x="{x}" y="{y}" font-size="15" font-weight="600" fill="#0f172a">{title}</text>'
        f'<text x="{x}" y="{y + 18}" font-size="12" fill="#475569">{note}</text>'
    )


def diagram_svg() -> str:
    """One S2D2 step on a block of six positions: draft, verify, accept or resample."""
    green, red, blue = OUTCOME_COLORS["accepted"], OUTCOME_COLORS["resampled"], OUTCOME_COLORS["threshold"]
    mask = "#f8fafc"
    x0 = 250
    rows = [
        _label(10, 40, "1 · block of masks", "committed prefix + [M]"),
        _cells(x0, 22, [("17", pale(blue, 0.5), ""), ("▁-", pale(blue, 0.5), "")] + [("[M]", mask, "")] * 4),
        _label(10, 120, "2 · draft (diffusion)", "one forward, all positions"),
        _cells(
            x0,
            102,
            [
                ("17", pale(blue, 0.5), ""),
                ("▁-", pale(blue, 0.5), ""),
                ("▁6", DRAFTED, "p=.92"),
                ("▁=", DRAFTED, "p=.97"),
                ("▁1", DRAFTED, "p=.81"),
                ("2", DRAFTED, "p=.40"),
            ],
        ),
        _label(10, 200, "3 · verify (AR, B = 1)", "one forward: [drafts | masks]"),
        _cells(
            x0,
            182,
            [
                ("17", pale(blue, 0.5), ""),
                ("▁-", pale(blue, 0.5), ""),
                ("▁6", DRAFTED, "q=.95"),
                ("▁=", DRAFTED, "q=.99"),
                ("▁1", DRAFTED, "q=.90"),
                ("2", DRAFTED, "q=.02"),
            ],
        ),
        _label(10, 280, "4 · accept or resample", "u < q/p, first rejection resampled"),
        _cells(
            x0,
            262,
            [
                ("17", pale(blue, 0.5), ""),
                ("▁-", pale(blue, 0.5), ""),
                ("▁6", pale(green, 0.5), "accept"),
                ("▁=", pale(green, 0.5), "accept"),
                ("▁1", pale(green, 0.5), "accept"),
                ("1", pale(red, 0.45), "(q−p)+"),
            ],
        ),
    ]
    arrows = "".join(
        f'<line x1="{x0 + 3 * (CELL + GAP)}" y1="{y}" x2="{x0 + 3 * (CELL + GAP)}" y2="{y + 22}" stroke="#94a3b8" stroke-width="2" marker-end="url(#arrow)"/>'
        for y in (60, 140, 220)
    )
    note = (
        f'<text x="{x0 + 6 * (CELL + GAP) + 6}" y="202" font-size="12" fill="#475569">q at each position sees only</text>'
        f'<text x="{x0 + 6 * (CELL + GAP) + 6}" y="218" font-size="12" fill="#475569">the drafts to its left</text>'
        f'<text x="{x0 + 6 * (CELL + GAP) + 6}" y="282" font-size="12" fill="#475569">4 tokens for 2 forwards;</text>'
        f'<text x="{x0 + 6 * (CELL + GAP) + 6}" y="298" font-size="12" fill="#475569">AR would need 4</text>'
    )
    width = x0 + 6 * (CELL + GAP) + 190
    return (
        f'<svg viewBox="0 0 {width} 330" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="One S2D2 step">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#94a3b8"/></marker></defs>' + "".join(rows) + arrows + note + "</svg>"
    )


HOW_IT_WORKS = """
<div class="how">
<p><b>A block-diffusion LM</b> writes text one block of B tokens at a time. A block starts as B
<code>[MASK]</code> tokens; each <b>draft forward</b> predicts every masked position at once, and a
confidence rule commits some of them (all above τ, or a fixed count). Fewer forwards than tokens:
that is the speed. But positions decided in the same forward do not see each other, so parallel
commits can disagree — a repeated name, an arithmetic step computed from a digit that was not there yet.</p>
<p><b>The key observation:</b> at block size 1 the same model <i>is</i> an autoregressive LM. So it can
check its own drafts. S2D2 feeds the drafted block followed by mask tokens at the same positions
(the "2L" input); each mask sees only the drafts to its left, so one <b>verify forward</b> gives the
autoregressive distribution <i>q</i> at every drafted position.</p>
<p><b>Acceptance</b> is speculative sampling: walk left to right, keep draft <i>x</i> with probability
min(1, q(x)/p(x)), and at the first rejection commit a token drawn from the residual (q − p)+. With
sampling, the committed tokens follow the autoregressive distribution exactly; in <i>greedy</i> mode the
output equals AR decoding token for token. Every verification commits at least one token.</p>
<p><b>Residual energy</b> reads the verifier as a correction of the drafter, q ∝ p·exp(−E): per drafted
token e = log p − log q. Large positive e means the drafter was overconfident and the draft is likely
rejected; the residual mass Σ(q − p)+ is exactly the rejection probability. The heatmaps show both.</p>
<p><b>The router</b> decides when a verification is worth its forward, from the drafter alone: an
estimate α of each draft's acceptance gives the expected accepted length E[K] = Σₖ Πᵢ≤ₖ αᵢ; policies
compare E[K] − c (or E[K] − c·n_high, what diffusion would commit for free) with thresholds, with
hysteresis, or learn it with a bandit.</p>
<p><b>Three families, one idea.</b> <i>SDAR</i> decodes each block as above. <i>Fast-dLLM v2</i> was made
from an autoregressive model, so the output at each position predicts the next token, and it opens a
32-token block in <b>sub-blocks</b> (light dotted lines in the trajectory): only the open sub-block is
drafted, and S2D2 verifies inside it. <i>LLaDA2.x</i> can also <b>edit</b>: when a later draft is more
sure than τ_edit that an already committed token should be another one, it rewrites it (ringed in the
trajectory). The verifier checks drafts before they are committed and never re-checks an edited token,
so in S2D2 runs edits are rare: they mend tokens committed without a check, or a sampled replacement.</p>
</div>
"""


def how_it_works_html() -> str:
    return f'<div class="how">{diagram_svg()}</div>' + HOW_IT_WORKS
