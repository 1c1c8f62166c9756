"""The step machinery and the decoders: AR, the diffusion baselines and S2D2.

All methods are one loop. A block starts as mask tokens; each step runs a
*draft forward*, then commits tokens either with the diffusion rule (static
count, confidence threshold or entropy budget) or, for S2D2, in the paper's
order: **route** (is verification worth a forward?) → **verify span** (one
forward gives the block-size-1 distributions of the first masked span) →
**accept or resample** → **fallback** (the diffusion rule, if too few tokens
were committed). AR is the same loop at block size 1 (docs/ALGORITHM.md).

The parts live beside the loop: the block state and each step's results in
:mod:`s2d2.blocks`, the diffusion commit rules in :mod:`s2d2.rules`, the
routing policies (each declaring what it needs) in :mod:`s2d2.policies`, and
the trajectory in :mod:`s2d2.recorder`, which every forward and step is
reported to (:meth:`Decoder._record_step` builds a step's record). Decisions
are made on the host over at most ``B`` positions after one transfer per step;
everything over the vocabulary stays in tensor ops on the device.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import torch

from . import trace as tr
from .acceptance import draft_ratios, residual_energy, residual_mass, verify_drafts
from .blocks import BlockState, Carry, Commits, Draft, StepDecision, Verification, first_masked_span
from .config import DecodeConfig
from .decisions import top_k_columns, top_pairs
from .models.base import BlockCache, BlockDiffusionModel, ForwardRecorder, KVSession, Lookahead
from .policies import (
    RouteContext,
    acceptance_estimate,
    expected_accepted_length,
    make_policy,
    normalized_entropy,
)
from .recorder import Recorder
from .rules import RULES
from .sampling import logits_to_probs, sample


class DecodeCancelled(Exception):
    """Raised when the caller's ``should_stop`` asks a running decode to end."""


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
        new_session: Callable[[ForwardRecorder], KVSession] | None = None,
    ):
        self.model = model
        # Where the run's forwards go: the model's own session, or one row of a batch (s2d2.batch).
        self.new_session = new_session or model.new_session
        self.config = config
        self.should_stop = should_stop
        self.on_progress = on_progress
        self.device = model.device
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.policy = make_policy(config.verify) if config.method == "s2d2" else None
        warn_untrained_block_length(model, config)
        self.official = model.official if config.accounting == "official" else None
        # Fast-dLLM v2's official block cache (config.use_block_cache): it rewrites KV rows in place, which a
        # batched row's cache cannot do.
        self.block_cache = bool(self.official and self.official.block_cache and config.use_block_cache)
        if self.block_cache and new_session is not None:
            raise ValueError(
                "the official block cache decodes one sequence at a time; set use_block_cache off to batch"
            )
        self.stops = set(model.stop_token_ids)
        # Where stops are looked for: after every step, or only in complete blocks (then a finished block's
        # own check finds them). Chosen once here, so the loop never asks which family it drives.
        at_block_end = model.stop_at_block_end or bool(self.official and self.official.stop_at_block_end)
        self._stop_mid_block = _never_stops if at_block_end else BlockState.stop_end
        # Incremental causal KV: under cache_ver + draft_ver a committed prefix attends causally, so its KV is
        # already what the block's commit will store. Editing could rewrite it, and the official accounting
        # counts the commit forward, so neither may use it.
        self.incremental = (
            config.cache_ver
            and config.draft_ver
            and config.accounting == "fused"
            and config.edit_threshold is None
            and model.supports_incremental_kv
        )
        self._next_draft: torch.Tensor | None = None  # a used lookahead's rows: the next step's draft logits
        self.recorder = Recorder()

    # -- bookkeeping -------------------------------------------------------

    def _begin(self, block: BlockState, step: int) -> None:
        """Forwards from here on belong to ``step`` of ``block``."""
        if self.should_stop and self.should_stop():
            raise DecodeCancelled("decoding was cancelled")
        self.recorder.begin(block.index, step)

    def _budget(self, prompt_length: int) -> tuple[int, int | None]:
        """``(positions to decode up to, cap on the output length)``.

        Fused accounting decodes exactly the budget. The official codes decode
        whole blocks: SDAR keeps them, LLaDA2 cuts the output to the budget,
        Fast-dLLM v2 decodes ``max_new_tokens // B`` blocks after the prefill.
        """
        B, new = self.config.block_length, self.config.max_new_tokens
        if self.official is None:
            return prompt_length + new, new
        return self.official.positions(prompt_length, B, new)

    # -- the loop ----------------------------------------------------------

    def run(self, prompt_ids: list[int], prompt_text: str = "") -> tr.Trace:
        """Decode after ``prompt_ids`` and return the full trace."""
        check_prompt(self.model, self.config, prompt_ids)
        cfg, B = self.config, self.config.block_length
        prompt_length = len(prompt_ids)
        total, cap = self._budget(prompt_length)
        ids = torch.tensor(prompt_ids, dtype=torch.long, device=self.device)
        session = self.new_session(self.recorder.forward)
        session.block_cache = BlockCache() if self.block_cache else None

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
            block.last = start + B >= total
            session.block_start = start
            end, step = self._decode_block(session, block, pending)
            generated.extend(block.host[block.first_generated : (end if end is not None else B)])
            if self.on_progress:
                self.on_progress(min(len(generated), cfg.max_new_tokens), cfg.max_new_tokens)
            pending = self._store_block(session, block, step, stopped=end is not None)
            if end is not None:
                stop_reason = "stop_token"
                break
            start += B
            block_index += 1
        if self._appends_next_token(stop_reason, total, prompt_length):  # the next block's carried token
            block = BlockState.starting(
                block_index, start, prompt_ids, start + B, self.model.mask_token_id, B, self.device
            )
            self._commit_carried(block, self.model.carried_row(session))
            generated.append(block.host[0])
        wall = time.perf_counter() - start_time
        if cap is not None:
            generated = generated[:cap]
        return self.recorder.trace(self.model, cfg, prompt_ids, prompt_text, generated, stop_reason, wall)

    def _store_block(self, session: KVSession, block: BlockState, step: int, stopped: bool):
        """Store a finished block's KV; returns what of it rides on the next draft as its commit.

        ``official`` spends a commit forward exactly where the family's
        official code does. ``fused`` stores nothing that nothing will read (the
        last block, a stopped one, a block already stored by incremental KV or
        a lookahead) and rides the rest on the next block's first draft, unless
        the family needs it stored now (:meth:`~s2d2.models.base.BlockDiffusionModel.defer_commit`).
        """
        cfg, official, last = self.config, self.official, block.last
        if official is not None:
            needed = official.stores(stopped, last)
        else:
            cached = session.cached_in_block
            needed = not (last or stopped) and cached < len(block.host)
            pending = self.model.defer_commit(block.tokens[cached:]) if needed else None
            if pending is not None:
                return pending
        if needed:
            keep_rows = official is not None and official.draft_ver_rows_in_commit and cfg.draft_ver
            self._begin(block, step)
            self.model.commit_forward(session, block.tokens, cfg.cache_ver, block.causal_rows if keep_rows else 0)
        return None

    def _decode_block(self, session: KVSession, block: BlockState, pending) -> tuple[int | None, int]:
        """Decode one block in place; returns (block position just after a stop token or None, next step).

        A family may commit position 0 before any draft (its carried row);
        sub-blocks are then decoded left to right; with an edit threshold, up
        to ``max_post_steps`` editing-only passes follow.
        """
        cfg, stops = self.config, self.stops
        width, size = cfg.sub_block_length, len(block.masked)
        step = 0
        carried = self.model.carried_row(session) if block.masked[0] else None
        if carried is not None:
            self._commit_carried(block, carried)
            step = 1
            end = self._stop_mid_block(block, stops)
            if end is not None:  # the carried token ends the run before any forward, as in the official code
                return end, step
        for window_start in range(0, size, width):
            window = range(window_start, window_start + width)
            session.window = (window.start, window.stop)
            window_step = 0
            while any(block.masked[i] for i in window):
                candidates = [m and i in window for i, m in enumerate(block.masked)]
                self._step(session, block, step, window_step, candidates, pending, window.stop)
                pending = None
                step, window_step = step + 1, window_step + 1
                end = self._stop_mid_block(block, stops)
                if end is not None:
                    return end, step
        for _ in range(cfg.max_post_steps if cfg.edit_threshold is not None else 0):
            edits = self._step(session, block, step, 0, [False] * size, pending, size)
            pending = None
            step += 1
            end = self._stop_mid_block(block, stops)
            if end is not None:
                return end, step
            if not edits:
                break
        return block.stop_end(stops), step

    def _appends_next_token(self, stop_reason: str, total: int, prompt_length: int) -> bool:
        """Whether the official code appends the token the last commit forward predicts (Fast-dLLM v2): the run
        reached the budget without a stop, and a forward stored every position before that token."""
        official = self.official
        return (
            bool(official and official.appends_next_token and stop_reason == "max_new_tokens")
            and total >= prompt_length
        )

    def _commit_carried(self, block: BlockState, row: torch.Tensor) -> None:
        """Commit block position 0 from the row that predicts it (Fast-dLLM v2), before any draft."""
        self._begin(block, 0)
        probs = logits_to_probs(row[None], self.config.sampling)
        token = sample(probs, self.generator, self.config.sampling.greedy)
        token_id, p = torch.stack([token[0].double(), probs[0, token[0]].double()]).tolist()  # one host sync
        token_id = int(token_id)
        block.write({0: token_id})
        block.decoded += 1
        position = tr.PositionRecord(block.offset, token_id, p, outcome=tr.CARRIED, committed=token_id)
        self.recorder.step(tr.StepRecord(block.index, 0, block.offset, [], [position]))

    def _step(
        self,
        session: KVSession,
        block: BlockState,
        step: int,
        window_step: int,
        candidates: list[bool],
        pending,
        window_end: int,
    ) -> int:
        """One draft (a forward, or a used lookahead) and what it commits among ``candidates``;
        returns the edit count. ``window_end`` is where the current sub-block ends."""
        cfg = self.config
        self._begin(block, step)
        causal_prefix = 0
        if cfg.draft_ver:
            causal_prefix = block.masked.index(True) if any(block.masked) else len(block.masked)
            block.causal_rows = causal_prefix
        if self._next_draft is not None:
            logits, self._next_draft = self._next_draft, None
        else:
            logits = self.model.draft_forward(session, block.tokens, pending, cfg.cache_ver, causal_prefix,
                                              store_prefix=self.incremental)  # fmt: skip
        draft = self._draft(logits)
        edits = self._edits(draft, block) if cfg.edit_threshold is not None else []
        block.write({e.position - block.offset: e.new for e in edits})
        n_candidates = sum(candidates)
        k_min = min(cfg.schedule()[min(window_step, cfg.steps - 1)], n_candidates)
        if self.policy is not None:
            decision = self._s2d2_step(session, block, draft, candidates, k_min, window_end)
        else:
            decision = StepDecision(self._fallback(draft, candidates, {}, k_min, tr.THRESHOLD))
        decision.edits = edits
        decision.rule = self._rule_record(k_min)
        block.write({i: token for i, (token, _) in decision.commits.items()})
        block.decoded += len(decision.commits)
        if decision.verification is not None and decision.verification.carry is not None:
            self._settle_carry(decision.verification.carry, block)
        self._record_step(block, step, draft, candidates, decision)
        return len(edits)

    def _settle_carry(self, carry: Carry, block: BlockState) -> None:
        """Mark a carried lookahead once, now that the step's commits are known: used when the run goes on
        past this step (its rows become the next draft, or its commit saves the block's commit forward),
        discarded when a stop token ends the run here."""
        complete = not any(block.masked)
        ends = block.stop_end(self.stops) if complete else self._stop_mid_block(block, self.stops)
        used = ends is None
        self.recorder.mark_lookahead(carry.forward, tr.LOOKAHEAD_USED if used else tr.LOOKAHEAD_DISCARDED)
        if used and carry.rows is not None:
            self._next_draft = carry.rows

    def _record_step(
        self, block: BlockState, step: int, draft: Draft, candidates: list[bool], decision: StepDecision
    ) -> None:
        """The one place a step's record is written: drafts, verifier view, outcomes, route, edits."""
        verification = decision.verification
        positions = []
        for i, candidate in enumerate(candidates):
            if not candidate:
                continue
            pos = tr.PositionRecord(i + block.offset, draft.tokens_host[i], draft.confidence_host[i])
            if draft.top_host is not None:
                pos.p_top = top_pairs(draft.top_host[i])
            if verification is not None and i in verification.stats:
                pos.q, pos.ratio, pos.energy, pos.residual_mass = verification.stats[i]
                for name, value in verification.detail.get(i, {}).items():
                    setattr(pos, name, value)
            if i in decision.commits:
                pos.committed, pos.outcome = decision.commits[i]
            positions.append(pos)
        self.recorder.step(
            tr.StepRecord(
                block.index,
                step,
                block.offset,
                self.recorder.step_forwards,
                positions,
                route=decision.route,
                accepted=None if verification is None else verification.accepted,
                edits=decision.edits,
                rule=decision.rule,
            )
        )

    def _rule_record(self, k_min: int) -> dict:
        """The diffusion rule as it stood at this step, so a commit can be read against its threshold."""
        cfg = self.config
        rule = {"rule": cfg.commit_rule, "minimum": k_min}
        if cfg.commit_rule == "dynamic":
            rule["threshold"] = cfg.threshold
        elif cfg.commit_rule == "entropy_bounded":
            rule["budget"] = cfg.eb_threshold
        return rule

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

    def _draft(self, logits: torch.Tensor) -> Draft:
        probs = logits_to_probs(logits, self.config.sampling)
        tokens = sample(probs, self.generator, self.config.sampling.greedy)
        confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
        k = self.config.trace_top_k
        columns = [tokens.double()[:, None], confidence.double()[:, None]]
        if k:
            columns.append(top_k_columns(probs, k))
        host = torch.cat(columns, dim=1).tolist()  # the draft's one transfer to the host
        top = [row[2:] for row in host] if k else None  # made into pairs only for the positions recorded
        return Draft(probs, tokens, confidence, [int(row[0]) for row in host], [row[1] for row in host], top)

    def _fallback(self, draft: Draft, candidates: list[bool], commits: Commits, k: int, outcome: str) -> Commits:
        """The diffusion rule on the candidates not committed yet, until ``k`` tokens are committed in all."""
        cfg = self.config
        left = [i for i, c in enumerate(candidates) if c and i not in commits]
        need = k - len(commits)
        if need <= 0 or not left:
            return commits
        chosen = RULES[cfg.commit_rule](draft, left, need, cfg)
        return {**commits, **{i: (draft.tokens_host[i], outcome) for i in chosen}}

    # -- S2D2: route → verify span → accept or resample → fallback ----------

    def _s2d2_step(
        self, session: KVSession, block: BlockState, draft: Draft, candidates: list[bool], k_min: int, window_end: int
    ) -> StepDecision:
        """One S2D2 step over the ``candidates`` (the current sub-block's masks)."""
        v = self.config.verify
        span = first_masked_span(candidates)
        context = self._route_context(draft, block, candidates, span)
        route = self.policy.decide(context)
        verification = None
        commits: Commits = {}
        if route.verify and span is not None:
            carry = context.all_accepted >= self.config.lookahead_threshold
            verification = self._verify_span(session, block, draft, candidates, span, window_end, carry)
            commits = dict(verification.commits)
        if v.always_check_high_confidence:
            threshold = self.config.threshold
            commits.update(
                {
                    i: (draft.tokens_host[i], tr.CONFIDENT)
                    for i, c in enumerate(candidates)
                    if c and i not in commits and draft.confidence_host[i] > threshold
                }
            )
        commits = self._fallback(draft, candidates, commits, k_min, tr.FALLBACK if verification else tr.THRESHOLD)
        # A draft, a verification, less the forward a used lookahead saves (the next draft, or Fast-dLLM's commit).
        spent = 1 + (verification is not None) - bool(verification and verification.carry)
        self.policy.observe(route, len(commits), spent)
        return StepDecision(commits, route=route, verification=verification)

    def _route_context(
        self, draft: Draft, block: BlockState, candidates: list[bool], span: tuple[int, int] | None
    ) -> RouteContext:
        cfg = self.config
        width = cfg.sub_block_length
        filled = self.model.filled_for_routing(block.decoded, width - sum(candidates))
        progress = min(1.0, filled / width)
        if span is None:
            return RouteContext(0, 0, width, progress, 0.0, 0, 0.0)
        span_start, span_length = span
        rows = slice(span_start, span_start + span_length)
        alpha = acceptance_estimate(draft.probs[rows], draft.confidence[rows], cfg.verify)
        stats = [expected_accepted_length(alpha), alpha.clamp(0, 1).prod()]
        if self.policy.needs_entropy:
            if cfg.verify.ucb_entropy_source == "masked":
                index = torch.tensor([i for i, c in enumerate(candidates) if c], device=self.device)
                stats.append(normalized_entropy(draft.probs.index_select(0, index)).mean())
            else:
                stats.append(normalized_entropy(draft.probs[rows]).mean())
        values = torch.stack(stats).tolist()
        n_high = sum(1 for i, c in enumerate(candidates) if c and draft.confidence_host[i] > cfg.threshold)
        return RouteContext(
            span_start=span_start,
            span_length=span_length,
            block_length=width,
            block_progress=progress,
            expected_accepted=values[0],
            n_high=n_high,
            mean_entropy=values[2] if len(values) > 2 else 0.0,
            all_accepted=values[1],
        )

    def _lookahead_plan(self, block: BlockState, span: tuple[int, int], window_end: int) -> Lookahead | None:
        """What the verification should carry for the case that it accepts everything to ``window_end``
        (the family says what it can: :meth:`~s2d2.models.base.BlockDiffusionModel.lookahead_plan`)."""
        cfg, size = self.config, len(block.masked)
        if not cfg.lookahead or sum(span) != window_end:
            return None
        next_active = window_end < size and block.active[window_end]
        return self.model.lookahead_plan(window_end, size, block.last, next_active, cfg.draft_ver, cfg.cache_ver)

    def _verify_span(
        self,
        session: KVSession,
        block: BlockState,
        draft: Draft,
        candidates: list[bool],
        span: tuple[int, int],
        window_end: int,
        carry_lookahead: bool,
    ) -> Verification:
        """One verifier forward over the span, then accept or resample.

        Commits the accepted prefix and, at the first rejection, the residual
        sample (or, without resampling, the family's official choice); a ratio
        threshold adds later drafts of the span (or of every masked candidate)
        whose acceptance probability reaches it. Then keeps the KV that is
        already a commit's (incremental KV, a used lookahead) and holds a used
        lookahead's draft for the next step.
        """
        v = self.config.verify
        start, length = span
        reach = length
        if v.ratio_threshold is not None and v.threshold_all_spans:
            reach = max(i for i, c in enumerate(candidates) if c) - start + 1
        drafted = torch.where(block.masked_on_device, draft.tokens, block.tokens)
        plan = self._lookahead_plan(block, span, window_end) if reach == length and carry_lookahead else None
        verified = self.model.verify(session, drafted, start, reach, keep_prefix=self.incremental, lookahead=plan)
        q = logits_to_probs(verified.logits, self.config.sampling)
        rows = slice(start, start + length)
        verdict = verify_drafts(
            draft.tokens[rows], draft.probs[rows], q[:length], self.generator, v.acceptance, v.ratio_tempering
        )
        columns = [verdict.q_draft, verdict.ratio, verdict.energy, verdict.residual_mass, verdict.accept_probability]
        if reach > length:  # the ratio threshold looks past the span
            extra = slice(start + length, start + reach)
            p, q_rest = draft.probs[extra], q[length:]
            p_x, q_x, ratio, probability = draft_ratios(draft.tokens[extra], p, q_rest, v.ratio_tempering)
            more = [q_x, ratio, residual_energy(p_x, q_x), residual_mass(p, q_rest), probability]
            columns = [torch.cat([a, b]) for a, b in zip(columns, more)]
        draws = verdict.uniform if verdict.uniform is not None else torch.full_like(verdict.ratio, math.nan)
        columns.append(torch.cat([draws, draws.new_full((reach - length,), math.nan)]))
        table, residual_top = self._decision_table(torch.stack(columns).T.double(), q[:reach], verdict.residual)
        accepted, correction = torch.stack([verdict.accepted, verdict.correction]).tolist()
        commits: Commits = {start + k: (draft.tokens_host[start + k], tr.ACCEPTED) for k in range(accepted)}
        if accepted < length:
            rejected = start + accepted
            if v.allow_resample:
                commits[rejected] = (correction, tr.RESAMPLED)
            elif (kept := self.model.rejected_commit(draft.tokens_host[rejected])) is not None:
                commits[rejected] = kept
        if v.ratio_threshold is not None:
            for k in range(reach):
                i = start + k
                if candidates[i] and i not in commits and table[k][4] >= v.ratio_threshold:
                    commits[i] = (draft.tokens_host[i], tr.RATIO)
        stats = {start + k: tuple(row[:4]) for k, row in enumerate(table) if candidates[start + k]}
        detail = {
            start + k: {"accept_probability": row[4]}
            | ({} if math.isnan(row[5]) else {"u": row[5]})
            | ({"q_top": top_pairs(row[6:])} if len(row) > 6 else {})
            for k, row in enumerate(table)
            if candidates[start + k]
        }
        if residual_top is not None and accepted < length:
            detail[start + accepted]["residual_top"] = residual_top
        used = plan is not None and accepted == length
        self.model.settle(session, verified, verified.rows_to_keep(start + accepted, used, plan, self.incremental))
        return Verification(start, accepted, commits, stats, detail, carry=self._carry(plan, used, verified, block))

    def _carry(self, plan: Lookahead | None, used: bool, verified, block: BlockState) -> Carry | None:
        """What an accepted-through lookahead hands to the next step; a lookahead rejected inside its span
        is marked discarded here, where that is decided."""
        if plan is None:
            return None
        forward = self.recorder.last_forward()
        if not used:
            self.recorder.mark_lookahead(forward, tr.LOOKAHEAD_DISCARDED)
            return None
        rows = verified.lookahead if plan.count else None
        if rows is not None and plan.start < len(block.masked):  # the next sub-block: rows before it not drafted
            rows = torch.cat([rows.new_zeros(plan.start, rows.shape[-1]), rows])
        return Carry(forward, rows)

    def _decision_table(
        self, table: torch.Tensor, q: torch.Tensor, residual: torch.Tensor
    ) -> tuple[list[list[float]], list | None]:
        """The verification's per-row numbers with the top-k of ``q`` beside them, and the residual's top-k,
        in one transfer to the host: rows ``(q(x), q/p, energy, residual mass, acceptance probability, u, q top-k)``."""
        top_k = self.config.trace_top_k
        if not top_k:
            return table.tolist(), None
        rows = torch.cat([table, top_k_columns(q, top_k)], dim=1)
        residual_row = top_k_columns(residual[None], top_k)
        residual_row = torch.cat([residual_row.new_full((1, table.shape[1]), math.nan), residual_row], dim=1)
        host = torch.cat([rows, residual_row]).tolist()
        return host[:-1], top_pairs(host[-1][table.shape[1] :])


def _never_stops(block: BlockState, stops) -> None:
    """The stop rule of families that look for stop tokens only in complete blocks."""
    return None


def warn_untrained_block_length(model: BlockDiffusionModel, config: DecodeConfig) -> None:
    """Say so when a block-diffusion method decodes at a block length the checkpoint was never trained at.

    It still runs (the paper's Figure 3 sweeps B on purpose), but a model asked to fill blocks of a size
    it never saw drafts worse than its training suggests, and a user reading the speed should know.
    """
    trained = model.trained_block_lengths
    if config.method != "ar" and trained and config.block_length not in trained:
        warnings.warn(
            f"{model.name} was trained with block lengths {', '.join(map(str, trained))}; decoding at block "
            f"length {config.block_length} is outside them, so its drafts may be worse than its training suggests",
            stacklevel=3,
        )


def check_prompt(model: BlockDiffusionModel, config: DecodeConfig, prompt_ids: list[int]) -> None:
    """Refuse an empty prompt, or one that leaves no room for the whole blocks ``config`` would decode."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    B = config.block_length
    needed = -(-(len(prompt_ids) + config.max_new_tokens) // B) * B
    if needed > model.max_positions:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) plus max new tokens ({config.max_new_tokens}) "
            f"needs {needed} positions; this model has {model.max_positions}"
        )


def encode_prompt(model: BlockDiffusionModel, prompt: str | list[int]) -> tuple[list[int], str]:
    """``(prompt ids, prompt text)``: text is wrapped in the chat template; token ids are taken as they are."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        return model.chat_prompt(prompt), prompt
    return list(prompt), ""


def generate(
    model: BlockDiffusionModel,
    prompt: str | list[int],
    config: DecodeConfig,
    should_stop: Callable[[], bool] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> tr.Trace:
    """Decode ``prompt`` (text, wrapped in the chat template, or token ids) with ``config``."""
    return Decoder(model, config, should_stop, on_progress).run(*encode_prompt(model, prompt))
