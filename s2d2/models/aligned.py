"""Position-aligned block-diffusion models (SDAR, LLaDA2): logit ``i`` predicts token ``i``.

Every forward goes through :meth:`BlockDiffusionModel._forward`: a stock
causal-LM class with an explicit additive 4D mask, explicit position ids and a
``DynamicCache``.
"""

from __future__ import annotations

import torch

from .. import masks
from .base import BlockDiffusionModel


class PositionAlignedModel(BlockDiffusionModel):
    """Adapter for families whose logit at position ``i`` predicts token ``i``.

    The verifier is the "2L" construction: the drafted block followed by mask
    tokens at the same positions, each mask seeing only the drafts before it.
    """

    def draft_forward(self, session, block, commit, commit_causal, causal_prefix):
        return self._draft_rows(session, block, commit, commit_causal, causal_prefix, keep_logits=block.shape[0])

    def verify_span(self, session, block, span_start, span_length):
        prefix_length = span_start + span_length - 1
        queries = torch.full((span_length,), self.mask_token_id, dtype=block.dtype, device=block.device)
        ids = torch.cat([block[:prefix_length], queries])
        offsets = torch.arange(prefix_length + span_length, device=self.device)
        offsets[prefix_length:] = span_start + torch.arange(span_length, device=self.device)
        allowed = masks.verifier_mask(prefix_length, span_start, span_length, self.device)
        return self._forward(
            session, "verify", ids, session.stored + offsets, allowed, keep_kv=0, keep_logits=span_length
        )
