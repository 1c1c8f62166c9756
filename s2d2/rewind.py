"""Rewind: a run decoded again up to one step, and on from there with other settings.

A run decoded again with its own configuration and seed repeats itself step for step (the decoder draws
every draft and every uniform of the acceptance test from the run's generator in a fixed order; the same
fact :mod:`s2d2.forcing` rests on). :class:`Rewind` lets that replay run to step ``step`` of block
``block`` and switches the decoder to ``config`` there: from that step on the commit rule, the router
and the acceptance test are the new ones, so a learner sees what τ, another router or the stochastic test
would have done with the very same prefix.

Only settings a decoder can change between two steps may differ: the method among the block-diffusion
ones, the commit rule's thresholds, the verifier's settings and lookahead. The block layout, the KV
handling, the sampling and the budget shape every step already taken, so they must stay the run's own.
The new router starts fresh at the switch (its state was built under the old settings). The trace says
what was rewound; it is exact only when both settings are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .config import DecodeConfig

# What a decoder may change between two steps of a run.
REWINDABLE = frozenset(
    {"method", "threshold", "eb_threshold", "s2d2_rule", "steps", "verify", "lookahead", "lookahead_threshold"}
)


def changed_settings(before: DecodeConfig, after: DecodeConfig) -> dict[str, tuple]:
    """``{field: (before, after)}`` of every setting that differs, the verifier's flattened as ``verify.x``."""
    changed = {}
    for field in dataclasses.fields(DecodeConfig):
        old, new = getattr(before, field.name), getattr(after, field.name)
        if field.name == "verify":
            changed.update(
                (f"verify.{f.name}", (getattr(old, f.name), getattr(new, f.name)))
                for f in dataclasses.fields(old)
                if getattr(old, f.name) != getattr(new, f.name)
            )
        elif old != new:
            changed[field.name] = (old, new)
    return changed


@dataclass(frozen=True)
class Rewind:
    """Decode with ``config`` from step ``step`` of block ``block`` on (the trace's numbering)."""

    block: int
    step: int
    config: DecodeConfig

    def check(self, original: DecodeConfig) -> None:
        """Refuse a switch the decoder cannot make mid-run, naming the setting."""
        if self.block < 0 or self.step < 0:
            raise ValueError(f"no step {self.step} of block {self.block} to rewind to")
        if "ar" in (original.method, self.config.method):
            raise ValueError("AR decodes one token per block: there is no step inside a block to rewind to")
        fixed = sorted(name for name in changed_settings(original, self.config) if name.split(".")[0] not in REWINDABLE)
        if fixed:
            raise ValueError(
                f"{', '.join(fixed)} cannot change mid-run (they shape every step already taken); "
                f"a rewind may change only {', '.join(sorted(REWINDABLE))}"
            )

    def applies(self, block_index: int, step: int) -> bool:
        return (block_index, step) == (self.block, self.step)

    def mark(self, trace, switched: tuple[int, DecodeConfig] | None):
        """The rewound run's trace: where it switched, what changed, and exactness only when both settings
        are exact (``switched``: how many steps were decoded with which original settings; ``None``: the run
        never got to the switch)."""
        if switched is None:
            raise ValueError(f"the run ended before step {self.step} of block {self.block}, where it would rewind")
        steps_before, original = switched
        changes = changed_settings(original, self.config)
        trace.rewound = {
            "block": self.block,
            "step": self.step,
            "changed": {name: {"before": old, "after": new} for name, (old, new) in changes.items()},
        }
        before = original.exactness()
        if steps_before and trace.exactness.get("exact") and not before.exact:
            reasons = "; ".join(before.reasons)
            trace.exactness = {"exact": False, "reasons": [f"before the rewind, the original settings: {reasons}"]}
        return trace
