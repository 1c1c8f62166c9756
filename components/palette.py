"""One colour and one label per way a token can be committed, shared by every view."""

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
)

AR = "ar"  # tokens of the autoregressive reference run

OUTCOME_COLORS = {
    THRESHOLD: "#3b82f6",
    ACCEPTED: "#16a34a",
    RESAMPLED: "#dc2626",
    FALLBACK: "#a855f7",
    CARRIED: "#0891b2",
    KEPT: "#ea580c",
    RATIO: "#ca8a04",
    CONFIDENT: "#0d9488",
    AR: "#64748b",
}
OUTCOME_LABELS = {
    THRESHOLD: "diffusion (confidence rule)",
    ACCEPTED: "drafted, accepted by the AR verifier",
    RESAMPLED: "rejected by the verifier, resampled",
    FALLBACK: "fallback commit after verification",
    CARRIED: "block's first token, carried from the previous forward",
    KEPT: "rejected by the verifier, kept as drafted",
    RATIO: "accepted by the ratio threshold after a rejection",
    CONFIDENT: "committed for high confidence outside the span",
    AR: "autoregressive step",
}
DRAFTED = "#e2e8f0"  # drafted this step but not committed
EDITED = "#f59e0b"  # a committed token rewritten by the editing pass (the text view's dashed outline too)
RUN_COLORS = {"AR": "#64748b", "Baseline": "#3b82f6", "S2D2": "#16a34a"}
LOOKAHEAD_COLORS = {LOOKAHEAD_USED: "#0ea5e9", LOOKAHEAD_DISCARDED: "#cbd5e1"}
KIND_COLORS = {"prefill": "#94a3b8", "draft": "#3b82f6", "verify": "#16a34a", "commit": "#f59e0b"}


def pale(hex_color: str, amount: float = 0.65) -> str:
    """``hex_color`` mixed with white: the same outcome, committed in an earlier step."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02x}" for c in mix)


def display_outcome(method: str, outcome: str) -> str:
    """AR commits every token by its one-token rule; show that as AR, not diffusion."""
    return AR if method == "ar" else outcome


# Word-start markers of SentencePiece (▁) and byte-level BPE (Ġ, Ċ) vocabularies:
# a reader sees the space or line break they stand for, never the marker.
MARKERS = {"▁": " ", "Ġ": " ", "Ċ": "\n"}


def display_token(text: str) -> str:
    """A token as a reader sees it: markers as spaces, special tokens as ``⟨name⟩`` (readable and narrow)."""
    if text.startswith("<|") and text.endswith("|>"):
        return f"⟨{text[2:-2]}⟩"
    for marker, plain in MARKERS.items():
        text = text.replace(marker, plain)
    return text


def token_quoter(trace):
    """``show(token id)`` → the token as the inspector quotes it, ‘like this’, in ``trace``'s vocabulary."""
    return lambda token: "‘" + display_token(trace.text_of(token)) + "’"
