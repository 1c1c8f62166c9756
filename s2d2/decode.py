"""The decode loop: AR, the diffusion baselines and S2D2 as one loop over blocks.

A block starts as mask tokens, and each step reads top to bottom: **draft**
(a forward, or the rows a used lookahead carried) → **edits** (LLaDA2's
rewrites of committed tokens) → **route and verify** (S2D2 only: is a
verification worth a forward, then accept or resample the first masked span,
:mod:`s2d2.verifier`) → **commit** (the diffusion rule fills in up to the
step's minimum; the baselines commit with it alone) → **record**. AR is the
same loop at block size 1 (docs/ALGORITHM.md).

The parts live beside the loop: the block state and each step's results in
:mod:`s2d2.blocks`, the diffusion commit rules in :mod:`s2d2.rules`, the
verifier and its routing policies in :mod:`s2d2.verifier` and
:mod:`s2d2.policies`, and the trajectory in :mod:`s2d2.recorder`, which every
forward and step decision is reported to. A family's conventions are hooks on
its adapter. Decisions are made on the host over at most ``B`` positions after
one transfer per step; everything over the vocabulary stays in tensor ops on
the device.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch

from . import trace as tr
from .blocks import BlockState, Draft, StepDecision
from .config import DecodeConfig
from .forcing import ForcedDraft
from .models.base import BlockCache, BlockDiffusionModel, ForwardRecorder, KVSession
from .policies import make_policy
from .recorder import Recorder
from .rewind import Rewind
from .rules import RULES
from .sampling import logits_to_probs, sample
from .verifier import Verifier


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
        forced: ForcedDraft | None = None,
        rewind: Rewind | None = None,
    ):
        self.model = model
        self.forced = forced  # a what-if run's one forced draft (s2d2.forcing)
        self.forced_record: dict | None = None
        self.rewind = rewind  # a rewound run's switch of settings (s2d2.rewind), checked by generate
        self.switched_from: tuple[int, DecodeConfig] | None = None  # (steps before, settings before) the switch
        self.official = model.official if config.accounting == "official" else None
        # Where the run's forwards go: the model's own session, or one row of a batch (s2d2.batch).
        self.new_session = with_official_block_cache(
            new_session or model.new_session, self.official, config, batched=new_session is not None
        )
        # Fast-dLLM v2's official code appends the token its last commit forward predicts, at the budget.
        self.token_past_budget = bool(self.official and self.official.appends_next_token)
        self.should_stop = should_stop
        self.on_progress = on_progress
        self.device = model.device
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.config = config  # the rule, router and verifier follow it when the run starts (_use)
        self.session: KVSession | None = None
        warn_untrained_block_length(model, config)
        self.stops = set(model.stop_token_ids)
        # Where stops are looked for: after every step, or only in complete blocks (then a finished block's
        # own check finds them). Chosen once here, so the loop never asks which family it drives.
        at_block_end = model.stop_at_block_end or bool(self.official and self.official.stop_at_block_end)
        self._stop_mid_block = _never_stops if at_block_end else BlockState.stop_end
        self.incremental = incremental_kv(model, config)
        self._next_draft: torch.Tensor | None = None  # a used lookahead's rows: the next step's draft logits
        self.recorder = Recorder()

    # -- bookkeeping -------------------------------------------------------

    def _begin(self, block: BlockState, step: int) -> None:
        """Forwards from here on belong to ``step`` of ``block`` (and a rewind's settings apply from there)."""
        if self.should_stop and self.should_stop():
            raise DecodeCancelled("decoding was cancelled")
        if self.rewind is not None and self.switched_from is None and self.rewind.applies(block.index, step):
            self.switched_from = (len(self.recorder.steps), self.config)
            self._use(self.rewind.config)
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
        session = self.session = self.new_session(self.recorder.forward)
        self._use(cfg)

        start_time = time.perf_counter()
        prefilled = prompt_length // B * B
        if prefilled:
            self.model.prefill(session, ids[:prefilled], causal=cfg.cache_ver, block_length=B)
        generated: list[int] = []
        pending: torch.Tensor | None = None
        stop_reason = "max_new_tokens"
        blocks = range(prefilled, total, B)
        for block_index, start in enumerate(blocks):
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
        if self.token_past_budget and stop_reason == "max_new_tokens" and total >= prompt_length:
            generated.append(self._next_block_token(session, prompt_ids, len(blocks), prefilled + len(blocks) * B))
        wall = time.perf_counter() - start_time
        if cap is not None:
            generated = generated[:cap]
        trace = self.recorder.trace(self.model, self.config, prompt_ids, prompt_text, generated, stop_reason, wall)
        if self.rewind is not None:
            trace = self.rewind.mark(trace, self.switched_from)
        return trace if self.forced is None else self.forced.mark(trace, self.forced_record)

    def _use(self, config: DecodeConfig) -> None:
        """Decode with ``config`` from here: its commit rule and, for S2D2, a fresh router and verifier on the
        run's session (a rewind's new settings start without router state built under the old ones)."""
        self.config = config
        self.rule = RULES[config.commit_rule]
        self.policy = make_policy(config.verify) if config.verifies else None
        self.verifier = None
        if self.policy is not None:
            self.verifier = Verifier(self.model, config, self.session, self.policy, self.generator, self.recorder,
                                     self.incremental)  # fmt: skip

    def _store_block(self, session: KVSession, block: BlockState, step: int, stopped: bool):
        """Store a finished block's KV; returns what of it rides on the next draft as its commit.

        ``official`` spends a commit forward where the family's official code does, with the causal rows its
        code keeps (:meth:`~s2d2.models.base.BlockDiffusionModel.official_commit_causal_rows`). ``fused``
        stores nothing that nothing will read (the last block, a stopped one, a block already stored by
        incremental KV or a lookahead) and rides the rest on the next block's first draft, unless the family
        needs it stored now (:meth:`~s2d2.models.base.BlockDiffusionModel.defer_commit`).
        """
        official, causal_rows = self.official, 0
        if official is not None:
            needed = official.stores(stopped, block.last)
            causal_rows = self.model.official_commit_causal_rows(block.causal_rows)
        else:
            cached = session.cached_in_block
            needed = not (block.last or stopped) and cached < len(block.host)
            pending = self.model.defer_commit(block.tokens[cached:]) if needed else None
            if pending is not None:
                return pending
        if needed:
            self._begin(block, step)
            self.model.commit_forward(session, block.tokens, self.config.cache_ver, causal_rows)
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

    def _next_block_token(self, session: KVSession, prompt_ids: list[int], index: int, start: int) -> int:
        """The token the last commit forward predicts for the block after the budget, recorded as that block's
        carried commit (so every output token keeps one commit record)."""
        B = self.config.block_length
        block = BlockState.starting(index, start, prompt_ids, start + B, self.model.mask_token_id, B, self.device)
        self._commit_carried(block, self.model.carried_row(session))
        return block.host[0]

    def _commit_carried(self, block: BlockState, row: torch.Tensor) -> None:
        """Commit block position 0 from the row that predicts it (Fast-dLLM v2), before any draft."""
        self._begin(block, 0)
        probs = logits_to_probs(row[None], self.config.sampling)
        token = sample(probs, self.generator, self.config.sampling.greedy)
        token_id, p = torch.stack([token[0].double(), probs[0, token[0]].double()]).tolist()  # one host sync
        block.commit({0: (int(token_id), tr.CARRIED)})
        self.recorder.record_carried(block, int(token_id), p)

    def _step(self, session: KVSession, block: BlockState, step: int, window_step: int, candidates: list[bool],
              pending, window_end: int) -> int:  # fmt: skip
        """One step over ``candidates`` (``window_end``: where the current sub-block ends): draft → edits →
        route and verify → commit → record. Returns the edit count."""
        self._begin(block, step)
        cfg = self.config
        draft = self._draft(session, block, pending)
        if self.forced is not None and self.forced.applies(block, step):
            draft, drafted = self.forced.apply(draft, block)
            self.forced_record = self.forced.record(drafted)
        edits = block.edits(draft, cfg.edit_threshold) if cfg.edit_threshold is not None else []
        k_min = min(cfg.schedule()[min(window_step, cfg.steps - 1)], sum(candidates))
        verifier = self.verifier
        if verifier is None:
            decision = StepDecision({})
        else:
            decision = verifier.propose(block, draft, edits, candidates, window_end)
        fill = tr.FALLBACK if decision.verification is not None else tr.THRESHOLD
        decision.commits = self.rule.fill(draft, candidates, decision.commits, k_min, fill, cfg)
        decision.edits, decision.rule = edits, self.rule.record(cfg, k_min)
        if verifier is not None:
            verifier.observe(decision)
        block.commit(decision.commits, edits)
        if decision.carry is not None:
            self._next_draft = verifier.settle_carry(decision.carry, used=self._goes_on(block))
        self.recorder.record_step(block, step, draft, candidates, decision)
        return len(edits)

    def _draft(self, session: KVSession, block: BlockState, pending) -> Draft:
        """The step's draft: the rows a used lookahead carried, or a draft forward (fused with ``pending``,
        the finished block's commit); under ``draft_ver`` the committed prefix attends causally."""
        cfg = self.config
        causal_prefix = 0
        if cfg.draft_ver:
            causal_prefix = block.masked.index(True) if any(block.masked) else len(block.masked)
            block.causal_rows = causal_prefix
        if self._next_draft is not None:
            logits, self._next_draft = self._next_draft, None
        else:
            logits = self.model.draft_forward(session, block.tokens, pending, cfg.cache_ver, causal_prefix,
                                              store_prefix=self.incremental)  # fmt: skip
        return Draft.from_logits(logits, cfg.sampling, self.generator, cfg.trace_top_k)

    def _goes_on(self, block: BlockState) -> bool:
        """Whether the run goes on past this step: no stop token ends it here."""
        ends = block.stop_end(self.stops) if not any(block.masked) else self._stop_mid_block(block, self.stops)
        return ends is None


def incremental_kv(model: BlockDiffusionModel, config: DecodeConfig) -> bool:
    """Incremental causal KV: under cache_ver + draft_ver a committed prefix attends causally, so its KV is
    already what the block's commit will store. Editing could rewrite it, and the official accounting counts
    the commit forward, so neither may use it."""
    return bool(
        config.cache_ver
        and config.draft_ver
        and config.accounting == "fused"
        and config.edit_threshold is None
        and model.supports_incremental_kv
    )


def with_official_block_cache(new_session, official, config: DecodeConfig, batched: bool):
    """``new_session``, opening each session with Fast-dLLM v2's official block cache when the run uses it
    (``use_block_cache`` under official accounting). The cache rewrites KV rows in place, which a batched
    row's cache cannot do, so a batch refuses it."""
    if not (official and official.block_cache and config.use_block_cache):
        return new_session
    if batched:
        raise ValueError("the official block cache decodes one sequence at a time; set use_block_cache off to batch")

    def opened(record: ForwardRecorder) -> KVSession:
        session = new_session(record)
        session.block_cache = BlockCache()
        return session

    return opened


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
    forced: ForcedDraft | None = None,
    rewind: Rewind | None = None,
) -> tr.Trace:
    """Decode ``prompt`` (text, wrapped in the chat template, or token ids) with ``config``; ``forced`` puts
    one token of your choosing into one step's draft (a what-if run, :mod:`s2d2.forcing`); ``rewind`` goes
    on with other settings from one step (:mod:`s2d2.rewind`)."""
    if rewind is not None:
        rewind.check(config)
    decoder = Decoder(model, config, should_stop, on_progress, forced=forced, rewind=rewind)
    return decoder.run(*encode_prompt(model, prompt))
