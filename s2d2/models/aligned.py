"""Position-aligned block-diffusion models (SDAR, LLaDA2): logit ``i`` predicts token ``i``.

Every forward goes through :meth:`BlockDiffusionModel._forward`: a stock
causal-LM class with an explicit additive 4D mask, explicit position ids and a
``DynamicCache``.
"""

from __future__ import annotations

import torch

from .. import masks
from .base import BlockDiffusionModel, Lookahead, Verified


class PositionAlignedModel(BlockDiffusionModel):
    """Adapter for families whose logit at position ``i`` predicts token ``i``.

    The verifier is the "2L" construction: the drafted block followed by mask
    tokens at the same positions, each mask seeing only the drafts before it.
    With incremental causal KV the block's stored prefix is not fed again: it
    is in the cache, which every row sees.
    """

    supports_incremental_kv = True

    def draft_forward(self, session, block, commit, commit_causal, causal_prefix, store_prefix=False):
        cached = session.cached_in_block
        rows = self._draft_rows(session, block, commit, commit_causal, causal_prefix, store_prefix)
        if not cached:
            return rows
        return torch.cat([rows.new_zeros(cached, rows.shape[-1]), rows])

    def verify(self, session, block, span_start, span_length, keep_prefix=False, lookahead: Lookahead | None = None):
        cached = session.cached_in_block
        span_end = span_start + span_length
        # The last span position's row is seen by no verifier mask; it is fed only when its KV may be kept.
        first_end = span_end if (keep_prefix or lookahead is not None) else span_end - 1
        prefix_length = first_end - cached
        commit_length = block.shape[0] if lookahead is not None and lookahead.commit == "rows" else 0
        extra = 0 if lookahead is None else lookahead.count
        queries = torch.full((span_length,), self.mask_token_id, dtype=block.dtype, device=block.device)
        parts = [block] if commit_length else []
        parts += [block[cached:first_end], queries]
        offsets = [torch.arange(commit_length, device=self.device) - cached]
        offsets += [
            torch.arange(prefix_length, device=self.device),
            span_start - cached + torch.arange(span_length, device=self.device),
        ]
        if extra:
            parts.append(torch.full((extra,), self.mask_token_id, dtype=block.dtype, device=block.device))
            offsets.append(lookahead.start - cached + torch.arange(extra, device=self.device))
        ids = torch.cat(parts)
        allowed = masks.lookahead_verifier_mask(
            commit_length, prefix_length, span_start - cached, span_length, extra, self.device
        )
        logits = self._forward(
            session, "verify", ids, session.stored + torch.cat(offsets), allowed, keep_kv=None,
            keep_logits=span_length + extra,
        )  # fmt: skip
        return Verified(
            logits=logits[:span_length],
            lookahead=logits[span_length:] if extra else None,
            cached=cached,
            prefix_rows=prefix_length,
            commit_rows=commit_length,
            appended=ids.shape[0],
        )
