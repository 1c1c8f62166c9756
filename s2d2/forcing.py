"""What-if decoding: a run with one draft forced, to watch what the verifier does with a token of your choosing.

The decoder draws every draft, and every uniform of the acceptance test, from the run's own generator in a
fixed order, so a run decoded again with the same configuration and seed repeats the original step for
step. :class:`ForcedDraft` replaces one drafted token at one step of that replay, after the draft was drawn
(the generator's sequence is untouched): everything before the step is the original run, and from the step
on, the verifier, the fallback and every later step answer the forced token. The trace records what was
forced, and its exactness says that the run is not a decode of the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .blocks import BlockState, Draft


@dataclass(frozen=True)
class ForcedDraft:
    """Propose ``token`` at generated ``position`` in step ``step`` of block ``block`` (the trace's numbering)."""

    block: int
    step: int
    position: int
    token: int

    def applies(self, block: BlockState, step: int) -> bool:
        return (block.index, step) == (self.block, self.step)

    def apply(self, draft: Draft, block: BlockState) -> tuple[Draft, int]:
        """The draft with the forced token in place (its ``p`` the drafter's probability of it), and the token
        the drafter itself had proposed there."""
        row, vocab_size = self.position - block.offset, draft.probs.shape[-1]
        if not 0 <= row < len(block.masked) or not block.masked[row]:
            raise ValueError(f"position {self.position} is not masked at step {self.step} of block {self.block}")
        if not 0 <= self.token < vocab_size:
            raise ValueError(f"token {self.token} is outside the model's vocabulary [0, {vocab_size})")
        tokens, confidence = draft.tokens.clone(), draft.confidence.clone()
        tokens[row] = self.token
        confidence[row] = draft.probs[row, self.token]
        tokens_host, confidence_host = list(draft.tokens_host), list(draft.confidence_host)
        tokens_host[row], confidence_host[row] = self.token, float(confidence[row])  # one value, once per run
        forced = dataclasses.replace(
            draft, tokens=tokens, confidence=confidence, tokens_host=tokens_host, confidence_host=confidence_host
        )
        return forced, draft.tokens_host[row]

    def mark(self, trace, record: dict | None):
        """A what-if run's trace: what was forced, and no claim to be a decode of the model."""
        if record is None:
            raise ValueError(f"the run never reached step {self.step} of block {self.block}, where the draft was forced")
        trace.forced = record
        reason = f"a forced draft: token {self.token} at position {self.position} (block {self.block}, step {self.step})"
        trace.exactness = {"exact": False, "reasons": [reason]}
        return trace

    def record(self, drafted: int) -> dict:
        """What the trace keeps: the forcing and the token the drafter had proposed there."""
        return {**dataclasses.asdict(self), "drafted": drafted}
