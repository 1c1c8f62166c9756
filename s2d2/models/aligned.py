"""Position-aligned block-diffusion models (SDAR, LLaDA2): logit ``i`` predicts token ``i``.

Every forward goes through a stock causal-LM class with an explicit additive 4D
mask, explicit position ids and a ``DynamicCache``. "Run without storing KV" is
"run, then crop what this forward appended".
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .. import masks
from .base import BlockDiffusionModel, ForwardRecorder, KVSession


class PositionAlignedModel(BlockDiffusionModel):
    """Adapter for families whose logit at position ``i`` predicts token ``i``.

    The verifier is the "2L" construction: the drafted block followed by mask
    tokens at the same positions, each mask seeing only the drafts before it.
    """

    def new_session(self, record: ForwardRecorder) -> KVSession:
        return KVSession(cache=DynamicCache(config=self.model.config), record=record)

    def _forward(
        self,
        session: KVSession,
        kind: str,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        keep_kv: int,
        keep_logits: int,
    ) -> torch.Tensor:
        """One model call; keeps the KV of the first ``keep_kv`` inputs only."""
        mask = masks.additive_mask(allowed, session.stored, self.dtype)

        def call() -> torch.Tensor:
            out = self.model(
                input_ids=ids[None],
                attention_mask=mask,
                position_ids=positions[None],
                cache=session.cache,
                use_cache=True,
                logits_to_keep=keep_logits,
            )
            return out.logits[0]

        logits = self.timed_call(session, kind, ids.shape[0], call)
        dropped = ids.shape[0] - keep_kv
        if dropped:
            session.cache.crop(-dropped)
        session.stored += keep_kv
        return logits

    def _positions(self, session: KVSession, n: int) -> torch.Tensor:
        return session.stored + torch.arange(n, device=self.device)

    def prefill(self, session: KVSession, ids: torch.Tensor, causal: bool, block_length: int) -> None:
        n = ids.shape[0]
        if causal:
            allowed = masks.causal(n, self.device)
        else:
            allowed = masks.block_causal(n, block_length, session.stored, self.device)
        self._forward(session, "prefill", ids, self._positions(session, n), allowed, keep_kv=n, keep_logits=1)

    def draft_forward(self, session, block, commit, commit_causal, causal_rows):
        commit_length = 0 if commit is None else commit.shape[0]
        ids = block if commit is None else torch.cat([commit, block])
        allowed = masks.draft_mask(commit_length, block.shape[0], commit_causal, causal_rows, self.device)
        positions = self._positions(session, ids.shape[0])
        return self._forward(session, "draft", ids, positions, allowed, keep_kv=commit_length, keep_logits=block.shape[0])

    def verify_span(self, session, block, span_start, span_length):
        prefix_length = span_start + span_length - 1
        queries = torch.full((span_length,), self.mask_token_id, dtype=block.dtype, device=block.device)
        ids = torch.cat([block[:prefix_length], queries])
        offsets = torch.arange(prefix_length + span_length, device=self.device)
        offsets[prefix_length:] = span_start + torch.arange(span_length, device=self.device)
        allowed = masks.verifier_mask(prefix_length, span_start, span_length, self.device)
        return self._forward(session, "verify", ids, session.stored + offsets, allowed, keep_kv=0, keep_logits=span_length)

    def commit_forward(self, session, block, causal):
        n = block.shape[0]
        allowed = masks.causal(n, self.device) if causal else torch.ones(n, n, dtype=torch.bool, device=self.device)
        self._forward(session, "commit", block, self._positions(session, n), allowed, keep_kv=n, keep_logits=1)
