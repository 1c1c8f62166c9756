"""Fast-dLLM v2 (Efficient-Large-Model/Fast_dLLM_v2_*): Qwen2.5 weights, right-shifted logits.

The checkpoints say ``model_type: "Fast_dLLM_Qwen"`` and ship their own modeling
code, but the network and its parameter names are stock Qwen2 (q/k/v biases,
no o_proj bias), so a ``Qwen2Config`` built from the same fields loads them
into ``Qwen2ForCausalLM``, with no ``trust_remote_code``. ``bd_size`` (32) is
the block size the model was trained with.

Fast-dLLM v2 keeps the autoregressive convention: the logit at position ``i``
predicts token ``i + 1``. The decoders want logits aligned with block
positions, so this adapter shifts them: block position ``i >= 1`` is predicted
by row ``i - 1`` of the block's own forward (the official code's
``cat([logits[:, :1], logits[:, :-1]])``).

Block position 0 cannot be predicted from inside the block. As in the
official code, it comes from the last row of the forward that stored the
tokens before the block (the prefill, or the commit of the finished block),
kept in ``session.next_row``, and the decoder commits it *before* the block's
first draft (greedy: argmax; sampling: a sample of that row), so the first
draft already sees the real token at position 0 and drafts only B − 1 masks.
That is why this family's commit forward is never fused into the next draft.

The verifier is a plain causal forward over the block prefix with the drafts
filled in: its shifted rows are the AR distributions of the span.
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from .. import masks
from .base import BlockDiffusionModel, Lookahead, OfficialConventions, Verified
from .sdar import REMOTE_ONLY_FIELDS

FAST_DLLM_MASK_TOKEN_ID = 151665


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
    stock_class = Qwen2ForCausalLM
    stock_config = staticmethod(qwen2_config_from_fast_dllm)
    default_mask_token_id = FAST_DLLM_MASK_TOKEN_ID
    next_token_from_commit = True
    official = OfficialConventions(
        commit_stop_block=False, stop_at_block_end=False, budget="floor_blocks", draft_ver_rows_in_commit=False
    )

    @staticmethod
    def matches(config: dict) -> bool:
        architectures = " ".join(config.get("architectures") or [])
        return config.get("model_type") == "Fast_dLLM_Qwen" or "Fast_dLLM" in architectures

    @staticmethod
    def trained_block_lengths_of(config: dict) -> tuple[int, ...]:
        return (int(config.get("bd_size", 32)),)

    def carried_row(self, session):
        return session.next_row

    def defer_commit(self, tokens):
        return None  # the commit's last row predicts the next block's first token, needed before its draft

    def lookahead_plan(self, window_end, size, last_block, next_active, draft_ver, cache_ver):
        """Only the block's commit, under ``cache_ver``: the next block's first token is not known before
        the forward, so no next draft can ride on it, and a next sub-block would need that shift too."""
        if window_end < size or last_block or not cache_ver:
            return None
        return Lookahead(size, 0, "first_half")

    def rejected_commit(self, draft_token):
        return None  # the official code leaves a rejected position to the threshold rule

    def filled_for_routing(self, decoded_in_block, filled_in_window):
        return filled_in_window

    def prefill(self, session, ids, causal, block_length):
        session.next_row = super().prefill(session, ids, causal, block_length)
        return session.next_row

    def commit_forward(self, session, block, causal, causal_prefix=0):
        session.next_row = super().commit_forward(session, block, causal, causal_prefix)
        return session.next_row

    def draft_forward(self, session, block, commit, commit_causal, causal_prefix, store_prefix=False):
        # With a commit, one more row: the finished block's last, which predicts this block's first token.
        has_commit = commit is not None
        rows = self._draft_rows(session, block, commit, commit_causal, causal_prefix, False, extra_logits=has_commit)
        if has_commit:
            session.next_row, rows = rows[0], rows[1:]
        first = session.next_row if session.next_row is not None else torch.zeros_like(rows[0])
        return torch.cat([first[None], rows[:-1]])

    def verify(self, session, block, span_start, span_length, keep_prefix=False, lookahead: Lookahead | None = None):
        # Row j of a causal forward over the drafted prefix predicts block position j + 1; block position 0
        # is the stored next-token row. A lookahead (cache_ver, end of block) feeds the whole block: its
        # causal rows are then the block's commit, and the last one predicts the next block's first token.
        commit = lookahead is not None and lookahead.commit == "first_half"
        fed = span_start + span_length - (not commit)
        wanted = fed - max(span_start, 1) + 1
        rows = [session.next_row[None]] if span_start == 0 else []
        if wanted > 0:
            causal = masks.causal(fed, self.device)
            rows.append(
                self._forward(session, "verify", block[:fed], self._positions(session, fed), causal, None, wanted)
            )
        logits, next_row = torch.cat(rows), None
        if commit:
            logits, next_row = logits[:-1], logits[-1]
        return Verified(logits, None, 0, fed if commit else 0, 0, fed if wanted > 0 else 0, next_row)
