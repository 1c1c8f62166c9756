"""The step machinery and the decoders: AR, static, dynamic and S2D2.

All four methods are one loop. A block starts as mask tokens; each step runs a
*draft forward* (fused with the commit of the previous block, spec section 6),
then commits tokens either with the diffusion rule (static count or confidence
threshold) or, for S2D2, by verifying the first masked span with the same model
at block size 1 and accepting or resampling (spec section 3). AR is the same
loop at block size 1, so it costs one forward per token.

Decisions are made on the host over at most ``B`` positions after one transfer
per step; everything over the vocabulary stays in tensor ops on the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import trace as tr
from .acceptance import verify_drafts
from .config import DecodeConfig
from .models.base import BlockDiffusionModel, KVSession
from .policies import (
    RouteContext,
    acceptance_estimate,
    expected_accepted_length,
    make_policy,
    normalized_entropy,
)
from .sampling import logits_to_probs, sample


class DecodeCancelled(Exception):
    """Raised when the caller's ``should_stop`` asks a running decode to end."""


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


def rule_commits(confidence: list[float], candidates: list[int], k: int, rule: str, threshold: float) -> list[int]:
    """Positions the diffusion rule commits among ``candidates``.

    ``static`` takes the ``k`` most confident; ``dynamic`` takes every
    candidate whose confidence exceeds ``threshold`` if there are at least ``k``
    of them, else the ``k`` most confident (SDAR's ``low_confidence_dynamic``).
    """
    if rule == "dynamic":
        confident = [i for i in candidates if confidence[i] > threshold]
        if len(confident) >= k:
            return confident
    return sorted(candidates, key=lambda i: -confidence[i])[:k]


@dataclass
class BlockState:
    """The block being decoded: tokens on the device, their host mirror, what is still masked.

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

    @classmethod
    def starting(cls, index, start, prompt_ids, total, mask_id, size, device) -> BlockState:
        tail = prompt_ids[start:]
        host = tail + [mask_id] * (size - len(tail))
        active = [start + i < total for i in range(size)]
        masked = [start + i >= len(prompt_ids) and a for i, a in enumerate(active)]
        return cls(
            index, start - len(prompt_ids), host, masked, active, torch.tensor(host, dtype=torch.long, device=device)
        )

    @property
    def first_generated(self) -> int:
        return max(0, -self.offset)

    def set(self, tokens: dict[int, int]) -> None:
        """Write tokens at block positions (commits or edits) on host and device alike."""
        if not tokens:
            return
        for i, token in tokens.items():
            self.host[i] = token
            self.masked[i] = False
        index = torch.tensor(list(tokens), device=self.tokens.device)
        self.tokens[index] = torch.tensor(list(tokens.values()), device=self.tokens.device)


@dataclass
class Draft:
    """One draft forward's proposals for a block, on the device and mirrored on the host."""

    probs: torch.Tensor
    tokens: torch.Tensor
    confidence: torch.Tensor
    tokens_host: list[int]
    confidence_host: list[float]


class Decoder:
    """Runs one generation with one configuration and records its trajectory.

    A decoder is single-use: it owns the KV session, the random generator and
    the router state of one run, so concurrent runs never share state.
    """

    def __init__(
        self,
        model: BlockDiffusionModel,
        config: DecodeConfig,
        should_stop: Callable[[], bool] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ):
        self.model = model
        self.config = config
        self.should_stop = should_stop
        self.on_progress = on_progress
        self.device = model.device
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.policy = make_policy(config.verify) if config.method == "s2d2" else None
        self.forwards: list[tr.ForwardRecord] = []
        self.steps: list[tr.StepRecord] = []
        self._where = (-1, 0)
        self._step_forwards: list[int] = []

    # -- bookkeeping -------------------------------------------------------

    def _record_forward(self, kind: str, tokens: int, seconds: float) -> None:
        index = len(self.forwards)
        self.forwards.append(tr.ForwardRecord(index, kind, tokens, seconds, *self._where))
        self._step_forwards.append(index)

    def _check_prompt(self, prompt_ids: list[int]) -> None:
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        B = self.config.block_length
        needed = -(-(len(prompt_ids) + self.config.max_new_tokens) // B) * B
        if needed > self.model.max_positions:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) plus max new tokens ({self.config.max_new_tokens}) "
                f"needs {needed} positions; this model has {self.model.max_positions}"
            )

    # -- the loop ----------------------------------------------------------

    def run(self, prompt_ids: list[int], prompt_text: str = "") -> tr.Trace:
        """Decode after ``prompt_ids`` and return the full trace."""
        self._check_prompt(prompt_ids)
        cfg, B = self.config, self.config.block_length
        prompt_length = len(prompt_ids)
        total = prompt_length + cfg.max_new_tokens
        stops = set(self.model.stop_token_ids)
        ids = torch.tensor(prompt_ids, dtype=torch.long, device=self.device)
        session = self.model.new_session(self._record_forward)

        start_time = time.perf_counter()
        prefilled = prompt_length // B * B
        if prefilled:
            self.model.prefill(session, ids[:prefilled], causal=cfg.cache_ver, block_length=B)
        generated: list[int] = []
        pending: torch.Tensor | None = None
        stop_reason = "max_new_tokens"
        start, block_index = prefilled, 0
        while start < total:
            block = BlockState.starting(block_index, start, prompt_ids, total, self.model.mask_token_id, B, self.device)
            pending, end = self._decode_block(session, block, pending, stops)
            generated.extend(block.host[block.first_generated : (end if end is not None else B)])
            if self.on_progress:
                self.on_progress(len(generated), cfg.max_new_tokens)
            if end is not None:
                stop_reason = "stop_token"
                break
            start += B
            block_index += 1
        wall = time.perf_counter() - start_time
        generated = generated[: cfg.max_new_tokens]
        summary = tr.summarize(self.forwards, self.steps, len(generated), wall)
        text_ids = [t for t in generated if t not in stops]
        seen = sorted(
            {p.token for s in self.steps for p in s.positions}
            | {p.committed for s in self.steps for p in s.committed}
            | set(generated)
        )
        token_text = dict(zip(map(str, seen), self.model.token_strings(seen)))
        return tr.Trace(
            method=cfg.method,
            config=cfg.to_dict(),
            model=self.model.name,
            prompt=prompt_text,
            prompt_ids=list(prompt_ids),
            output_ids=generated,
            output_tokens=[token_text[str(t)] for t in generated],
            text=self.model.tokenizer.decode(text_ids, skip_special_tokens=True),
            stop_reason=stop_reason,
            forwards=self.forwards,
            steps=self.steps,
            summary=summary,
            token_text=token_text,
        )

    def _decode_block(
        self, session: KVSession, block: BlockState, pending, stops
    ) -> tuple[torch.Tensor | None, int | None]:
        """Decode one block in place. Returns ``(block to commit next, stop end or None)``.

        Sub-blocks are decoded left to right; with an edit threshold, up to
        ``max_post_steps`` editing-only passes follow. The returned end is the
        block position just after a committed stop token, if one ended generation.
        """
        cfg = self.config
        width, size = cfg.sub_block_length, len(block.masked)
        step = 0
        for window_start in range(0, size, width):
            window = range(window_start, window_start + width)
            window_step = 0
            while any(block.masked[i] for i in window):
                active = [m and i in window for i, m in enumerate(block.masked)]
                self._step(session, block, step, window_step, active, pending)
                pending = None
                step, window_step = step + 1, window_step + 1
                end = self._stop_end(block, stops)
                if end is not None:
                    return None, end
        for _ in range(cfg.max_post_steps if cfg.edit_threshold is not None else 0):
            edits = self._step(session, block, step, 0, [False] * size, None)
            step += 1
            end = self._stop_end(block, stops)
            if end is not None:
                return None, end
            if not edits:
                break
        if not cfg.fuse_commit:
            self._where = (block.index, step)
            self._step_forwards = []
            self.model.commit_forward(session, block.tokens, cfg.cache_ver)
            return None, None
        return block.tokens, None

    def _step(
        self, session: KVSession, block: BlockState, step: int, window_step: int, active: list[bool], pending
    ) -> int:
        """One draft forward and what it commits in the ``active`` positions; returns the edit count."""
        cfg = self.config
        if self.should_stop and self.should_stop():
            raise DecodeCancelled("decoding was cancelled")
        self._where = (block.index, step)
        self._step_forwards = []
        causal_prefix = 0
        if cfg.draft_ver:
            causal_prefix = block.masked.index(True) if any(block.masked) else len(block.masked)
        draft = self._draft(self.model.draft_forward(session, block.tokens, pending, cfg.cache_ver, causal_prefix))
        record = tr.StepRecord(block.index, step, block.offset, self._step_forwards, [])
        if cfg.edit_threshold is not None:
            record.edits = self._edits(draft, block)
            block.set({e.position - block.offset: e.new for e in record.edits})
        positions = {
            i: tr.PositionRecord(i + block.offset, draft.tokens_host[i], draft.confidence_host[i])
            for i, m in enumerate(active)
            if m
        }
        if positions:
            k_min = min(cfg.schedule()[min(window_step, cfg.steps - 1)], len(positions))
            if self.policy is None:
                committed = self._commit_by_rule(draft, active, k_min, positions, tr.THRESHOLD)
            else:
                committed = self._s2d2_step(
                    session, block.tokens, draft, active, cfg.sub_block_length, k_min, positions, record
                )
            block.set(committed)
        record.positions = list(positions.values())
        self.steps.append(record)
        return len(record.edits)

    def _edits(self, draft: Draft, block: BlockState) -> list[tr.EditRecord]:
        """Committed answer tokens the new draft replaces (LLaDA2's editing, τ_edit).

        A committed position is rewritten, not re-masked, when the draft now
        prefers another token with confidence above the edit threshold.
        """
        return [
            tr.EditRecord(i + block.offset, block.host[i], draft.tokens_host[i], draft.confidence_host[i])
            for i in range(block.first_generated, len(block.host))
            if not block.masked[i]
            and block.active[i]
            and draft.tokens_host[i] != block.host[i]
            and draft.confidence_host[i] > self.config.edit_threshold
        ]

    @staticmethod
    def _stop_end(block: BlockState, stops) -> int | None:
        """Block position after the first committed stop token whose prefix is all committed."""
        for i in range(block.first_generated, len(block.host)):
            if block.masked[i]:
                return None
            if block.host[i] in stops:
                return i + 1
        return None

    def _draft(self, logits: torch.Tensor) -> Draft:
        probs = logits_to_probs(logits, self.config.sampling)
        tokens = sample(probs, self.generator, self.config.sampling.greedy)
        confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
        return Draft(probs, tokens, confidence, tokens.tolist(), confidence.tolist())

    def _commit_by_rule(
        self, draft: Draft, masked: list[bool], k: int, positions: dict, outcome: str
    ) -> dict[int, int]:
        """Commit drafts with the diffusion rule; returns ``{block position: token}``."""
        candidates = [i for i, m in enumerate(masked) if m]
        chosen = rule_commits(draft.confidence_host, candidates, k, self.config.commit_rule, self.config.threshold)
        for i in chosen:
            positions[i].outcome = outcome
            positions[i].committed = draft.tokens_host[i]
        return {i: draft.tokens_host[i] for i in chosen}

    # -- S2D2 --------------------------------------------------------------

    def _route_context(
        self, draft: Draft, masked: list[bool], width: int, span_start: int, span_length: int
    ) -> RouteContext:
        cfg = self.config
        rows = slice(span_start, span_start + span_length)
        alpha = acceptance_estimate(draft.probs[rows], draft.confidence[rows], cfg.verify)
        stats = [expected_accepted_length(alpha)]
        if cfg.verify.policy == "ucb":
            stats.append(normalized_entropy(draft.probs[rows]).mean())
        values = torch.stack(stats).tolist()
        n_high = sum(1 for i, m in enumerate(masked) if m and draft.confidence_host[i] > cfg.threshold)
        return RouteContext(
            span_start=span_start,
            span_length=span_length,
            block_length=width,
            block_progress=1.0 - sum(masked) / width,
            expected_accepted=values[0],
            n_high=n_high,
            mean_entropy=values[1] if len(values) > 1 else 0.0,
        )

    def _s2d2_step(
        self, session: KVSession, block, draft: Draft, masked, width, k_min, positions, record
    ) -> dict[int, int]:
        """Route, verify the first masked span, accept or resample, then fall back if needed.

        ``masked`` marks the positions this step may commit (the current
        sub-block's masks); ``width`` is the sub-block length.
        """
        span_start, span_length = first_masked_span(masked)
        route = self.policy.decide(self._route_context(draft, masked, width, span_start, span_length))
        record.route = route
        if not route.verify:
            committed = self._commit_by_rule(draft, masked, k_min, positions, tr.THRESHOLD)
        else:
            committed = self._verify(session, block, draft, span_start, span_length, positions, record)
            if len(committed) < k_min:
                remaining = [m and i not in committed for i, m in enumerate(masked)]
                committed.update(self._commit_by_rule(draft, remaining, k_min - len(committed), positions, tr.FALLBACK))
        self.policy.observe(route, len(committed))
        return committed

    def _verify(
        self, session, block, draft: Draft, span_start: int, span_length: int, positions, record
    ) -> dict[int, int]:
        """One verifier forward over the span; commits the accepted prefix and one correction."""
        cfg = self.config
        rows = slice(span_start, span_start + span_length)
        drafted = block.clone()
        drafted[rows] = draft.tokens[rows]
        q = logits_to_probs(self.model.verify_span(session, drafted, span_start, span_length), cfg.sampling)
        verdict = verify_drafts(draft.tokens[rows], draft.probs[rows], q, self.generator, cfg.verify.acceptance)
        per_position = torch.stack([verdict.q_draft, verdict.ratio, verdict.energy, verdict.residual_mass]).T.tolist()
        accepted, correction = torch.stack([verdict.accepted, verdict.correction]).tolist()
        committed: dict[int, int] = {}
        for offset, (q_x, ratio, energy, mass) in enumerate(per_position):
            i = span_start + offset
            pos = positions[i]
            pos.q, pos.ratio, pos.energy, pos.residual_mass = q_x, ratio, energy, mass
            if offset < accepted:
                pos.outcome, pos.committed = tr.ACCEPTED, pos.token
            elif offset == accepted:
                pos.outcome, pos.committed = tr.RESAMPLED, correction
            else:
                continue
            committed[i] = pos.committed
        record.accepted = accepted
        return committed


def generate(
    model: BlockDiffusionModel,
    prompt: str | list[int],
    config: DecodeConfig,
    should_stop: Callable[[], bool] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> tr.Trace:
    """Decode ``prompt`` (text, wrapped in the chat template, or token ids) with ``config``."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        prompt_ids, text = model.chat_prompt(prompt), prompt
    else:
        prompt_ids, text = list(prompt), ""
    return Decoder(model, config, should_stop, on_progress).run(prompt_ids, text)
