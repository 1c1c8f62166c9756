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
from dataclasses import dataclass
from typing import Callable

import torch

from . import trace as tr
from .acceptance import verify_drafts
from .config import DecodeConfig
from .models.base import BlockDiffusionModel, KVSession
from .policies import RouteContext, acceptance_estimate, expected_accepted_length, make_policy, normalized_entropy
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
            tail = prompt_ids[start:]
            block_host = tail + [self.model.mask_token_id] * (B - len(tail))
            masked = [start + i >= prompt_length and start + i < total for i in range(B)]
            pending, end = self._decode_block(session, block_index, start, block_host, masked, pending, prompt_length, stops)
            generated.extend(block_host[max(0, prompt_length - start) : (end if end is not None else B)])
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
        seen = sorted({p.token for s in self.steps for p in s.positions} | {p.committed for s in self.steps for p in s.committed} | set(generated))
        token_text = dict(zip(map(str, seen), self.model.token_strings(seen)))
        return tr.Trace(
            method=cfg.method,
            config=cfg.to_dict(),
            model=self.model.name,
            prompt=prompt_text,
            prompt_ids=list(prompt_ids),
            output_ids=generated,
            output_tokens=self.model.token_strings(generated),
            text=self.model.tokenizer.decode(text_ids, skip_special_tokens=True),
            stop_reason=stop_reason,
            forwards=self.forwards,
            steps=self.steps,
            summary=summary,
            token_text=token_text,
        )

    def _decode_block(self, session, block_index, start, block_host, masked, pending, prompt_length, stops):
        """Decode one block in place. Returns ``(block to commit next, stop end or None)``.

        ``block_host`` and ``masked`` are updated in place; the returned end is
        the block position just after a committed stop token, if one ended
        generation.
        """
        cfg = self.config
        schedule = cfg.schedule()
        width = cfg.sub_block_length
        block = torch.tensor(block_host, dtype=torch.long, device=self.device)
        step = 0
        for window_start in range(0, len(masked), width):
            window_end = window_start + width
            window_step = 0
            while any(masked[window_start:window_end]):
                if self.should_stop and self.should_stop():
                    raise DecodeCancelled("decoding was cancelled")
                self._where = (block_index, step)
                self._step_forwards = []
                causal_rows = None
                if cfg.draft_ver:
                    first = masked.index(True)
                    causal_rows = torch.arange(len(masked), device=self.device) < first
                logits = self.model.draft_forward(session, block, pending, cfg.cache_ver, causal_rows)
                pending = None
                draft = self._draft(logits)
                # Only the current sub-block is decoded; later ones stay masked context.
                active = [m and window_start <= i < window_end for i, m in enumerate(masked)]
                k_min = min(schedule[min(window_step, len(schedule) - 1)], sum(active))
                positions = {
                    i: tr.PositionRecord(i + start - prompt_length, draft.tokens_host[i], draft.confidence_host[i])
                    for i, m in enumerate(active)
                    if m
                }
                record = tr.StepRecord(block_index, step, start - prompt_length, self._step_forwards, [])
                if self.policy is None:
                    committed = self._commit_by_rule(draft, active, k_min, positions, tr.THRESHOLD)
                else:
                    committed = self._s2d2_step(session, block, draft, active, width, k_min, positions, record)
                for i, token in committed.items():
                    block_host[i] = token
                    masked[i] = False
                if committed:
                    index = torch.tensor(list(committed), device=self.device)
                    block[index] = torch.tensor(list(committed.values()), device=self.device)
                record.positions = list(positions.values())
                self.steps.append(record)
                step += 1
                window_step += 1
                end = self._stop_end(block_host, masked, start, prompt_length, stops)
                if end is not None:
                    return None, end
        if not cfg.fuse_commit:
            self._where = (block_index, step)
            self._step_forwards = []
            self.model.commit_forward(session, block, cfg.cache_ver)
            return None, None
        return block, None

    @staticmethod
    def _stop_end(block_host, masked, start, prompt_length, stops) -> int | None:
        """Block position after the first committed stop token whose prefix is all committed."""
        for i in range(max(0, prompt_length - start), len(block_host)):
            if masked[i]:
                return None
            if block_host[i] in stops:
                return i + 1
        return None

    def _draft(self, logits: torch.Tensor) -> Draft:
        probs = logits_to_probs(logits, self.config.sampling)
        tokens = sample(probs, self.generator, self.config.sampling.greedy)
        confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
        return Draft(probs, tokens, confidence, tokens.tolist(), confidence.tolist())

    def _commit_by_rule(self, draft: Draft, masked: list[bool], k: int, positions: dict, outcome: str) -> dict[int, int]:
        """Commit drafts with the diffusion rule; returns ``{block position: token}``."""
        candidates = [i for i, m in enumerate(masked) if m]
        chosen = rule_commits(draft.confidence_host, candidates, k, self.config.commit_rule, self.config.threshold)
        for i in chosen:
            positions[i].outcome = outcome
            positions[i].committed = draft.tokens_host[i]
        return {i: draft.tokens_host[i] for i in chosen}

    # -- S2D2 --------------------------------------------------------------

    def _route_context(self, draft: Draft, masked: list[bool], width: int, span_start: int, span_length: int) -> RouteContext:
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

    def _s2d2_step(self, session: KVSession, block, draft: Draft, masked, width, k_min, positions, record) -> dict[int, int]:
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

    def _verify(self, session, block, draft: Draft, span_start: int, span_length: int, positions, record) -> dict[int, int]:
        """One verifier forward over the span; commits the accepted prefix and one correction."""
        cfg = self.config
        rows = slice(span_start, span_start + span_length)
        drafted = block.clone()
        drafted[rows] = draft.tokens[rows]
        q = logits_to_probs(self.model.verify_span(session, drafted, span_start, span_length), cfg.sampling)
        verdict = verify_drafts(draft.tokens[rows], draft.probs[rows], q, self.generator, cfg.verify.acceptance)
        q_draft = q.gather(-1, draft.tokens[rows, None]).squeeze(-1)
        per_position = torch.stack([q_draft, verdict.ratio, verdict.energy, verdict.residual_mass]).T.tolist()
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
