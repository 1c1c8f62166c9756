"""S2D2's verifier: is a verification worth a forward, and which drafts does it accept?

Over the candidates of one step (the current sub-block's masks) it **routes**
(the policy reads a :class:`~s2d2.policies.RouteContext` built from the draft),
and, when the policy says verify, runs one **verifier forward** over the first
masked span (its block-size-1 distributions) and **accepts or resamples**
(:mod:`s2d2.acceptance`); a ratio threshold may accept later drafts too. A
verification that may finish its window also carries a **lookahead** (the
family says what it can carry), settled once the step's commits say whether
the run goes on. The diffusion fallback is the decoder's, shared with the
baselines; the trace's fields are the recorder's, read from the decision table
this part returns.
"""

from __future__ import annotations

import math

import torch

from . import trace as tr
from .acceptance import SpanVerdict, draft_ratios, residual_energy, residual_mass, verify_drafts
from .blocks import BlockState, Carry, Commits, Draft, StepDecision, Verification, first_masked_span
from .config import DecodeConfig
from .decisions import top_k_columns, top_pairs
from .models.base import BlockDiffusionModel, KVSession, Lookahead, Verified
from .policies import Policy, RouteContext, acceptance_estimate, expected_accepted_length
from .recorder import Recorder
from .sampling import logits_to_probs


class Verifier:
    """Route → verify span → accept or resample, for one run: it shares the run's session, random generator
    (one draw order) and recorder, and the policy's state lives as long as the run."""

    def __init__(
        self,
        model: BlockDiffusionModel,
        config: DecodeConfig,
        session: KVSession,
        policy: Policy,
        generator: torch.Generator,
        recorder: Recorder,
        incremental: bool,
    ):
        self.model = model
        self.config = config
        self.session = session
        self.policy = policy
        self.generator = generator
        self.recorder = recorder
        self.incremental = incremental  # keep the KV of an accepted causal prefix (see Decoder)

    def propose(
        self, block: BlockState, draft: Draft, edits: list[tr.EditRecord], candidates: list[bool], window_end: int
    ) -> StepDecision:
        """What S2D2 commits before the diffusion fallback: the route, and, if it verifies, the verification's
        commits; with ``always_check_high_confidence``, also every candidate drafted above τ."""
        span = first_masked_span(candidates)
        context = self._route_context(draft, block, candidates, span)
        route = self.policy.decide(context)
        verification = None
        commits: Commits = {}
        if route.verify and span is not None:
            carry = context.all_accepted >= self.config.lookahead_threshold
            view = block.with_drafts(draft, edits)
            verification = self._verify(block, view, draft, candidates, span, window_end, carry)
            commits = dict(verification.commits)
        if self.config.verify.always_check_high_confidence:
            commits.update(self._confident(draft, candidates, commits))
        return StepDecision(commits, route=route, verification=verification)

    def observe(self, decision: StepDecision) -> None:
        """Tell the policy what its route earned: the step's commits, over the forwards it spent (a draft and a
        verification, less the forward a used lookahead saves: the next draft, or Fast-dLLM's commit)."""
        spent = 1 + (decision.verification is not None) - (decision.carry is not None)
        self.policy.observe(decision.route, len(decision.commits), spent)

    def settle_carry(self, carry: Carry, used: bool) -> torch.Tensor | None:
        """Mark a carried lookahead once the step's commits say whether the run goes on past it: used (its
        rows, if any, are the next draft; returned), or discarded when a stop token ends the run here."""
        self.recorder.mark_lookahead(carry.forward, tr.LOOKAHEAD_USED if used else tr.LOOKAHEAD_DISCARDED)
        return carry.rows if used else None

    def _confident(self, draft: Draft, candidates: list[bool], commits: Commits) -> Commits:
        threshold = self.config.threshold
        return {
            i: (draft.tokens_host[i], tr.CONFIDENT)
            for i, c in enumerate(candidates)
            if c and i not in commits and draft.confidence_host[i] > threshold
        }

    def _route_context(
        self, draft: Draft, block: BlockState, candidates: list[bool], span: tuple[int, int] | None
    ) -> RouteContext:
        """What the policy reads: the span, block progress, ``E[K]``, ``Π α_i``, ``n_high`` and the entropy
        the policy asks for, in one transfer to the host."""
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
        entropy = self.policy.context_entropy(draft.probs, rows, candidates)
        if entropy is not None:
            stats.append(entropy)
        values = torch.stack(stats).tolist()
        n_high = sum(1 for i, c in enumerate(candidates) if c and draft.confidence_host[i] > cfg.threshold)
        mean_entropy = values[2] if len(values) > 2 else 0.0
        return RouteContext(span_start, span_length, width, progress, values[0], n_high, mean_entropy, values[1])

    def _lookahead_plan(self, block: BlockState, span: tuple[int, int], window_end: int) -> Lookahead | None:
        """What the verification should carry for the case that it accepts everything to ``window_end``
        (the family says what it can: :meth:`~s2d2.models.base.BlockDiffusionModel.lookahead_plan`)."""
        cfg, size = self.config, len(block.masked)
        if not cfg.lookahead or sum(span) != window_end:
            return None
        next_active = window_end < size and block.active[window_end]
        return self.model.lookahead_plan(window_end, size, block.last, next_active, cfg.draft_ver, cfg.cache_ver)

    def _verify(
        self,
        block: BlockState,
        view: torch.Tensor,
        draft: Draft,
        candidates: list[bool],
        span: tuple[int, int],
        window_end: int,
        carry_lookahead: bool,
    ) -> Verification:
        """One verifier forward over the span (and as far as the ratio threshold looks), then accept or
        resample; keeps the KV that is already a commit's (incremental KV, a used lookahead)."""
        v = self.config.verify
        start, length = span
        reach = length
        if v.ratio_threshold is not None and v.threshold_all_spans:
            reach = max(i for i, c in enumerate(candidates) if c) - start + 1
        plan = self._lookahead_plan(block, span, window_end) if reach == length and carry_lookahead else None
        verified = self.model.verify(self.session, view, start, reach, keep_prefix=self.incremental, lookahead=plan)
        q = logits_to_probs(verified.logits, self.config.sampling)
        verdict, rows, residual_top = self._judge(draft, q[:reach], start, length)
        accepted, correction = torch.stack([verdict.accepted, verdict.correction]).tolist()
        commits = self._commits(draft, candidates, start, length, accepted, correction, rows)
        used = plan is not None and accepted == length
        self.model.settle(self.session, verified, verified.rows_to_keep(start + accepted, used, plan, self.incremental))
        carry = self._carry(plan, used, verified, block)
        return Verification(start, length, accepted, commits, rows, residual_top, carry)

    def _judge(
        self, draft: Draft, q: torch.Tensor, start: int, length: int
    ) -> tuple[SpanVerdict, list[list[float]], list | None]:
        """Accept or resample the span's drafts against ``q`` (the verified rows: the span's, then any the ratio
        threshold looks at past it), and the decision table of every verified row with the residual's top-k."""
        v = self.config.verify
        reach = q.shape[0]
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
        table, residual_top = self._decision_table(torch.stack(columns).T.double(), q, verdict.residual)
        return verdict, table, residual_top

    def _commits(
        self, draft: Draft, candidates: list[bool], start: int, length: int, accepted: int, correction: int, rows
    ) -> Commits:
        """The accepted prefix; at the first rejection the residual sample (or, without resampling, the
        family's choice); then the drafts whose acceptance probability reaches the ratio threshold."""
        v = self.config.verify
        commits: Commits = {start + k: (draft.tokens_host[start + k], tr.ACCEPTED) for k in range(accepted)}
        if accepted < length:
            rejected = start + accepted
            if v.allow_resample:
                commits[rejected] = (correction, tr.RESAMPLED)
            elif (kept := self.model.rejected_commit(draft.tokens_host[rejected])) is not None:
                commits[rejected] = kept
        if v.ratio_threshold is not None:
            for k, row in enumerate(rows):
                i = start + k
                if candidates[i] and i not in commits and row[4] >= v.ratio_threshold:
                    commits[i] = (draft.tokens_host[i], tr.RATIO)
        return commits

    def _carry(self, plan: Lookahead | None, used: bool, verified: Verified, block: BlockState) -> Carry | None:
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
