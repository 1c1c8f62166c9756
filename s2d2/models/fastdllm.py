"""Fast-dLLM v2 (Efficient-Large-Model/Fast_dLLM_v2_*): Qwen2.5 weights, right-shifted logits.

The checkpoints say ``model_type: "Fast_dLLM_Qwen"`` and ship their own modeling
code, but the network and its parameter names are stock Qwen2 (q/k/v biases,
no o_proj bias), so a ``Qwen2Config`` built from the same fields loads them
into ``Qwen2ForCausalLM``, with no ``trust_remote_code``. ``bd_size`` (32) is
the block size the model was trained with.

Fast-dLLM v2 keeps the autoregressive convention: the logit at position ``i``
predicts token ``i + 1``. The decoders want logits aligned with block
positions, so this adapter shifts them:

- block position ``i >= 1`` is predicted by row ``i - 1`` of the block's own
  forward (the official code's ``cat([logits[:, :1], logits[:, :-1]])``);
- block position 0 cannot be predicted from inside the block. Its row comes
  from the forward that stored the tokens just before the block (the prefill's
  last row, or the last row of the finished block in the fused commit / the
  commit forward) and is kept in ``session.carry``. Under ``cache_ver`` that
  forward is causal, so the carried row is exactly the autoregressive
  distribution of the block's first token.

The official code always takes that first token greedily from the commit
forward, outside the diffusion steps. Here it is drafted and committed (or
verified) from the carried row like any other position; as the carried row
*is* the AR distribution, S2D2 always accepts it, and with greedy sampling the
result is the same token the official code appends.

The verifier is a plain causal forward over the block prefix with the drafts
filled in: its shifted rows are the AR distributions of the span (the span's
first position, when it is block position 0, is again the carried row).
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from .. import masks
from .base import (
    BlockDiffusionModel,
    KVSession,
    from_pretrained_stock,
    mask_token_id,
    stop_token_ids,
)
from .sdar import REMOTE_ONLY_FIELDS

FAST_DLLM_MASK_TOKEN_ID = 151665
NEXT_ROW = "next_token_logits"


def qwen2_config_from_fast_dllm(config: dict) -> Qwen2Config:
    """The stock ``Qwen2Config`` equivalent of a Fast-dLLM v2 ``config.json``
    (``bd_size`` and other extra fields stay as attributes)."""
    fields = {k: v for k, v in config.items() if k not in REMOTE_ONLY_FIELDS}
    qwen2 = Qwen2Config(**fields)
    qwen2._attn_implementation = "sdpa"
    return qwen2


class FastDLLMModel(BlockDiffusionModel):
    """Adapter for Fast-dLLM v2: hides the right shift behind block-aligned logits."""

    family = "fast_dllm_v2"

    @staticmethod
    def matches(config: dict) -> bool:
        architectures = " ".join(config.get("architectures") or [])
        return config.get("model_type") == "Fast_dLLM_Qwen" or "Fast_dLLM" in architectures

    @classmethod
    def load(cls, source: str, config: dict, tokenizer, device, dtype, name: str, **load_kwargs) -> FastDLLMModel:
        model = from_pretrained_stock(
            Qwen2ForCausalLM, source, qwen2_config_from_fast_dllm(config), device, dtype, **load_kwargs
        )
        mask = mask_token_id(config, tokenizer, default=FAST_DLLM_MASK_TOKEN_ID)
        adapter = cls(model, tokenizer, mask, stop_token_ids(config, tokenizer), name)
        adapter.trained_block_lengths = (int(config.get("bd_size", 32)),)
        return adapter

    @staticmethod
    def _carried_row(session: KVSession, like: torch.Tensor) -> torch.Tensor:
        """The row predicting block position 0. Without a prefill, the first
        block starts with a prompt token whose row nobody reads: a flat one will do."""
        row = session.carry.get(NEXT_ROW)
        return torch.zeros_like(like) if row is None else row

    def prefill(self, session, ids, causal, block_length):
        session.carry[NEXT_ROW] = super().prefill(session, ids, causal, block_length)

    def draft_forward(self, session, block, commit, commit_causal, causal_prefix):
        # With a commit, one more row: the finished block's last, which predicts this block's first token.
        has_commit = commit is not None
        rows = self._draft_rows(
            session, block, commit, commit_causal, causal_prefix, keep_logits=block.shape[0] + has_commit
        )
        if has_commit:
            session.carry[NEXT_ROW], rows = rows[0], rows[1:]
        return torch.cat([self._carried_row(session, rows[0])[None], rows[:-1]])

    def verify_span(self, session, block, span_start, span_length):
        # Row j of a causal forward over the drafted prefix predicts block position j + 1;
        # block position 0 is the carried row, so a span of just that position needs no forward.
        span_end = span_start + span_length
        first_predicted = max(span_start, 1)
        parts = [session.carry[NEXT_ROW][None]] if span_start == 0 else []
        if span_end > first_predicted:
            prefix = span_end - 1
            allowed = masks.causal(prefix, self.device)
            positions = self._positions(session, prefix)
            parts.append(
                self._forward(
                    session,
                    "verify",
                    block[:prefix],
                    positions,
                    allowed,
                    keep_kv=0,
                    keep_logits=span_end - first_predicted,
                )
            )
        return torch.cat(parts)

    def commit_forward(self, session, block, causal):
        session.carry[NEXT_ROW] = super().commit_forward(session, block, causal)
