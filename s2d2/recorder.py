"""The trajectory of one decode as it is written: forwards, steps, and the trace they make.

The decoder's loop reports each forward and each step's decisions here and
nowhere else; the recorder assembles each step's record from them (drafts,
the verifier's decision table, outcomes, route, edits, the rule) and at the
end the :class:`~s2d2.trace.Trace`. While a
decode runs, another thread (the dashboard's stream) may ask for a
:meth:`Recorder.snapshot`: the records only grow, and a lock keeps a snapshot
from seeing a step half-appended or a forward's lookahead mark half-changed.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from . import trace as tr
from .blocks import BlockState, Draft, StepDecision, Verification
from .decisions import top_pairs

# One DEBUG line per forward, for watching a server decode (the dashboard's ``S2D2_LOG_LEVEL=DEBUG``): it is
# how a test sees that Cancel really stopped the model, not just the page's stream.
FORWARD_LOG = logging.getLogger("s2d2.forwards")


class Recorder:
    """Forwards and steps of one run, in order; the trace and snapshots of them."""

    def __init__(self):
        self.forwards: list[tr.ForwardRecord] = []
        self.steps: list[tr.StepRecord] = []
        self.step_forwards: list[int] = []  # the forwards of the step being decided
        self._where = (-1, 0)
        self._lock = threading.Lock()

    def begin(self, block: int, step: int) -> None:
        """Forwards from here on belong to ``step`` of ``block``."""
        self._where = (block, step)
        self.step_forwards = []

    def forward(self, kind: str, tokens: int, seconds: float) -> None:
        with self._lock:
            index = len(self.forwards)
            self.forwards.append(tr.ForwardRecord(index, kind, tokens, seconds, *self._where))
        self.step_forwards.append(index)
        if FORWARD_LOG.isEnabledFor(logging.DEBUG):
            FORWARD_LOG.debug("forward %d %s %d tokens %.4fs", index, kind, tokens, seconds)

    def step(self, record: tr.StepRecord) -> None:
        with self._lock:
            self.steps.append(record)

    def record_step(
        self, block: BlockState, step: int, draft: Draft, candidates: list[bool], decision: StepDecision
    ) -> None:
        """The one place a step's record is written: drafts, verifier view, outcomes, route, edits, rule."""
        verification = decision.verification
        positions = []
        for i, candidate in enumerate(candidates):
            if not candidate:
                continue
            pos = tr.PositionRecord(i + block.offset, draft.tokens_host[i], draft.confidence_host[i])
            if draft.top_host is not None:
                pos.p_top = top_pairs(draft.top_host[i])
            if verification is not None:
                _verified_fields(pos, verification, i)
            if i in decision.commits:
                pos.committed, pos.outcome = decision.commits[i]
            positions.append(pos)
        accepted = None if verification is None else verification.accepted
        record = tr.StepRecord(block.index, step, block.offset, self.step_forwards, positions, decision.route,
                               accepted, decision.edits, decision.rule)  # fmt: skip
        self.step(record)

    def record_carried(self, block: BlockState, token: int, probability: float) -> None:
        """The record of a block's position 0 committed from the row before it (no draft, no forward)."""
        position = tr.PositionRecord(block.offset, token, probability, outcome=tr.CARRIED, committed=token)
        self.step(tr.StepRecord(block.index, 0, block.offset, [], [position]))

    def mark_lookahead(self, forward: int, state: str) -> None:
        """Whether the lookahead ``forward`` carried was used or discarded, said once where it is decided."""
        with self._lock:
            self.forwards[forward].lookahead = state

    def last_forward(self) -> int:
        return len(self.forwards) - 1

    def trace(self, model, config, prompt_ids, prompt_text, generated, stop_reason, wall) -> tr.Trace:
        """The finished run's trace: the records, the summary, and the text of every token they name."""
        stops = set(model.stop_token_ids)
        seen = sorted(
            {p.token for s in self.steps for p in s.positions}
            | {p.committed for s in self.steps for p in s.committed}
            | {
                t
                for s in self.steps
                for p in s.positions
                for top in (p.p_top, p.q_top, p.residual_top)
                for t, _ in top or ()
            }
            | set(generated)
        )
        token_text = dict(zip(map(str, seen), model.token_strings(seen)))
        return tr.Trace(
            method=config.method,
            config=config.to_dict(),
            model=model.name,
            prompt=prompt_text,
            prompt_ids=list(prompt_ids),
            output_ids=generated,
            output_tokens=[token_text[str(t)] for t in generated],
            text=model.tokenizer.decode([t for t in generated if t not in stops], skip_special_tokens=True),
            stop_reason=stop_reason,
            forwards=self.forwards,
            steps=self.steps,
            summary=tr.summarize(self.forwards, self.steps, len(generated), wall),
            token_text=token_text,
            exactness=config.exactness().to_dict(),
        )

    def snapshot(self, model, config, prompt: str, started: float) -> tr.Trace:
        """What the run has committed so far, as a trace the views can draw (callable from any thread).

        Gaps are shown by position (``…``): a committed token may be the mask token id itself.
        """
        with self._lock:
            steps, forwards = list(self.steps), [tr.ForwardRecord(**vars(f)) for f in self.forwards]
        committed = {p.position: p.committed for s in steps for p in s.committed if p.position >= 0}
        length = max(committed, default=-1) + 1
        ids = [committed.get(i, model.mask_token_id) for i in range(length)]
        seen = sorted({*ids, *(p.token for s in steps for p in s.positions)})
        token_text = dict(zip(map(str, seen), model.token_strings(seen)))
        return tr.Trace(
            method=config.method,
            config=config.to_dict(),
            model="",
            prompt=prompt,
            prompt_ids=[],
            output_ids=ids,
            output_tokens=[token_text[str(committed[i])] if i in committed else "…" for i in range(length)],
            text="",
            stop_reason="running",
            forwards=forwards,
            steps=steps,
            summary=tr.summarize(forwards, steps, length, time.perf_counter() - started),
            token_text=token_text,
            exactness=config.exactness().to_dict(),
        )


def _verified_fields(pos: tr.PositionRecord, verification: Verification, i: int) -> None:
    """The verifier's view of block position ``i``, from its row of the decision table (if it was verified)."""
    k = i - verification.start
    if not 0 <= k < len(verification.rows):
        return
    row = verification.rows[k]
    pos.q, pos.ratio, pos.energy, pos.residual_mass, pos.accept_probability = row[:5]
    if not math.isnan(row[5]):
        pos.u = row[5]
    if len(row) > 6:
        pos.q_top = top_pairs(row[6:])
    if k == verification.accepted < verification.length:
        pos.residual_top = verification.residual_top
