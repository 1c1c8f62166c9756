"""The state a decode carries through one block, and what each step hands on.

A block's tokens and what is still masked (:class:`BlockState`), one draft
forward's proposals (:class:`Draft`), one verifier forward's verdict
(:class:`Verification`) and everything a step decided (:class:`StepDecision`):
plain data the decoder's loop (:mod:`s2d2.decode`) passes between its parts, so
each part can be read, and tested, without the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import trace as tr
from .decisions import top_k_columns
from .sampling import SamplingConfig, logits_to_probs, sample

Commits = dict[int, tuple[int, str]]  # block position -> (token, outcome)


def first_masked_span(masked: list[bool]) -> tuple[int, int] | None:
    """``(start, length)`` of the first contiguous run of masked positions, if any.

    Everything before it in the block is committed, so its first position is
    conditioned exactly: that is what makes verification left to right sound.
    """
    try:
        start = masked.index(True)
    except ValueError:
        return None
    end = start
    while end < len(masked) and masked[end]:
        end += 1
    return start, end - start


@dataclass
class BlockState:
    """The block being decoded: tokens on the device, their host mirror, what is still masked.

    What is masked is state (``masked``, mirrored on the device as
    ``masked_on_device``), never read back from the tokens: a model may commit
    its own mask token id, which is then an ordinary committed token.
    ``offset`` is the output position of block position 0 (negative while the
    block still holds the prompt's tail); ``active`` marks positions inside the
    generation budget (the last block may be cut by ``max_new_tokens``).
    """

    index: int
    offset: int
    host: list[int]
    masked: list[bool]
    active: list[bool]
    tokens: torch.Tensor
    masked_on_device: torch.Tensor
    last: bool = False  # the budget ends in this block
    decoded: int = 0  # tokens committed in this block so far
    causal_rows: int = 0  # rows the last draft_ver draft made causal

    @classmethod
    def starting(cls, index, start, prompt_ids, total, mask_id, size, device) -> BlockState:
        tail = prompt_ids[start:]
        host = tail + [mask_id] * (size - len(tail))
        active = [start + i < total for i in range(size)]
        masked = [start + i >= len(prompt_ids) and a for i, a in enumerate(active)]
        tokens = torch.tensor(host, dtype=torch.long, device=device)
        return cls(index, start - len(prompt_ids), host, masked, active, tokens, torch.tensor(masked, device=device))

    @property
    def first_generated(self) -> int:
        return max(0, -self.offset)

    def commit(self, commits: Commits, edits: list[tr.EditRecord] = ()) -> None:
        """The one place tokens enter the block: a step's edits rewrite committed tokens, its commits fill masks."""
        rewritten = {e.position - self.offset: e.new for e in edits}
        self._write({**rewritten, **{i: token for i, (token, _) in commits.items()}})
        self.decoded += len(commits)

    def with_drafts(self, draft: Draft, edits: list[tr.EditRecord]) -> torch.Tensor:
        """The block as a verifier reads it before the step commits: the draft at every masked position, the
        committed tokens elsewhere, as this step's edits leave them."""
        view = torch.where(self.masked_on_device, draft.tokens, self.tokens)
        if edits:
            index = torch.tensor([e.position - self.offset for e in edits], device=view.device)
            view[index] = torch.tensor([e.new for e in edits], device=view.device)
        return view

    def edits(self, draft: Draft, threshold: float) -> list[tr.EditRecord]:
        """Committed answer tokens the new draft replaces (LLaDA2's editing, τ_edit).

        A committed position is rewritten, not re-masked, when the draft now
        prefers another token with confidence above the edit threshold.
        """
        return [
            tr.EditRecord(i + self.offset, self.host[i], draft.tokens_host[i], draft.confidence_host[i])
            for i in range(self.first_generated, len(self.host))
            if not self.masked[i]
            and self.active[i]
            and draft.tokens_host[i] != self.host[i]
            and draft.confidence_host[i] > threshold
        ]

    def _write(self, tokens: dict[int, int]) -> None:
        """Write tokens at block positions on host and device alike."""
        if not tokens:
            return
        for i, token in tokens.items():
            self.host[i] = token
            self.masked[i] = False
        index = torch.tensor(list(tokens), device=self.tokens.device)
        self.tokens[index] = torch.tensor(list(tokens.values()), device=self.tokens.device)
        self.masked_on_device[index] = False

    def stop_end(self, stops) -> int | None:
        """Block position after the first committed stop token whose prefix is all committed."""
        for i in range(self.first_generated, len(self.host)):
            if self.masked[i]:
                return None
            if self.host[i] in stops:
                return i + 1
        return None


@dataclass
class Draft:
    """One draft forward's proposals for a block, on the device and mirrored on the host."""

    probs: torch.Tensor
    tokens: torch.Tensor
    confidence: torch.Tensor
    tokens_host: list[int]
    confidence_host: list[float]
    top_host: list[list] | None = None  # per row, the drafter's top-k ids then probabilities (``trace_top_k``)

    @classmethod
    def from_logits(
        cls, logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator, top_k: int
    ) -> Draft:
        """Draw the drafts of one forward's rows, with one transfer to the host (and the top-k when recorded)."""
        probs = logits_to_probs(logits, sampling)
        tokens = sample(probs, generator, sampling.greedy)
        confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
        columns = [tokens.double()[:, None], confidence.double()[:, None]]
        if top_k:
            columns.append(top_k_columns(probs, top_k))
        host = torch.cat(columns, dim=1).tolist()  # the draft's one transfer to the host
        top = [row[2:] for row in host] if top_k else None  # made into pairs only for the positions recorded
        return cls(probs, tokens, confidence, [int(row[0]) for row in host], [row[1] for row in host], top)


@dataclass
class Carry:
    """What a verification carried past its span for the next step (a lookahead it accepted through).

    ``rows`` are the next draft's logits, aligned with the block they draft
    (``None`` when only the finished block's commit was carried); ``forward``
    is the verifier forward's index in the trace, which the decoder marks used
    or discarded once the step's commits say whether the run goes on.
    """

    forward: int
    rows: torch.Tensor | None


@dataclass
class Verification:
    """What one verifier forward decided over the span ``start, length`` (block positions).

    ``commits`` holds the accepted prefix, the correction and any
    ratio-threshold accepts. ``rows`` is the decision table, one row per
    verified position from ``start`` on (the span, then any positions the ratio
    threshold looked past it): ``(q(x), q/p, energy, residual mass, acceptance
    probability, u, q's top-k...)``; ``residual_top`` the top-k of the residual
    at the first rejection (when recorded). The recorder turns them into the
    trace's position fields.
    """

    start: int
    length: int
    accepted: int
    commits: Commits
    rows: list[list[float]]
    residual_top: list | None = None
    carry: Carry | None = None  # it accepted everything a lookahead was carried for


@dataclass
class StepDecision:
    """Everything one step decided: the commits, and the route and verification behind them."""

    commits: Commits
    route: tr.RouteRecord | None = None
    verification: Verification | None = None
    edits: list[tr.EditRecord] = field(default_factory=list)
    rule: dict | None = None

    @property
    def carry(self) -> Carry | None:
        """The lookahead this step's verification carried past its span, if it accepted through it."""
        return None if self.verification is None else self.verification.carry
