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

Under ``accounting="official"`` with ``use_block_cache`` (on by default, as in
the official script) drafts go through the official block cache
(:class:`~s2d2.models.base.BlockCache`): the block's first draft is a
whole-block forward whose KV is kept; every later draft feeds only its
sub-block, which attends to the stored prefix and to that block KV with its
own rows replaced, and writes its rows back. As there, the sub-block's first
position takes its own row's logits (its right shift starts inside the
sub-block), and the other rows it sees are stale: what an earlier draft
wrote, masks included.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

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
        commit_stop_block=False,
        stop_at_block_end=False,
        budget="floor_blocks",
        draft_ver_rows_in_commit=False,
        block_cache=True,
        appends_next_token=True,
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
        if session.block_cache is not None:
            return self._block_cached_draft(session, block, causal_prefix)
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

    def _block_cached_draft(self, session, block, causal_prefix):
        """A draft through the official block cache: the block's first draft fills it, later ones patch a sub-block."""
        cached = session.block_cache
        if cached.block_start != session.block_start:
            rows = self._forward(
                session, "draft", block, self._positions(session, block.shape[0]),
                masks.draft_mask(0, block.shape[0], False, causal_prefix, self.device), keep_kv=None,
                keep_logits=block.shape[0],
            )  # fmt: skip
            cached.block_start = session.block_start
            cached.layers = [
                (layer.keys[:, :, -block.shape[0] :], layer.values[:, :, -block.shape[0] :])
                for layer in session.cache.layers
            ]
            session.cache.crop(-block.shape[0])
            first = session.next_row if session.next_row is not None else torch.zeros_like(rows[0])
            return torch.cat([first[None], rows[:-1]])
        start, end = session.window
        rows, written = self._sub_block_forward(session, block[start:end], start, end, cached.layers)
        cached.layers = written
        logits = rows.new_zeros(block.shape[0], rows.shape[-1])
        logits[start:end] = torch.cat([rows[:1], rows[:-1]])  # the official shift, inside the fed sub-block
        return logits

    def _sub_block_forward(self, session, ids, start, end, layers):
        """Feed one sub-block after ``[stored prefix | block KV without the sub-block's rows]``, every row visible.

        Returns its logits and the block KV with the sub-block's rows replaced by the new ones. Attention does
        not depend on the order of the keys, so the replaced rows may sit at the end instead of in place.
        """
        width = ids.shape[0]
        context = DynamicCache(config=self.model.config)
        for i, (stored, (keys, values)) in enumerate(zip(session.cache.layers, layers)):
            others_k = torch.cat([keys[:, :, :start], keys[:, :, end:]], dim=2)
            others_v = torch.cat([values[:, :, :start], values[:, :, end:]], dim=2)
            if stored.get_seq_length():
                others_k, others_v = torch.cat([stored.keys, others_k], 2), torch.cat([stored.values, others_v], 2)
            context.update(others_k, others_v, i)
        visible = context.get_seq_length() + width
        mask = torch.zeros(1, 1, width, visible, dtype=self.dtype, device=self.device)
        positions = session.stored + start + torch.arange(width, device=self.device)

        def call() -> torch.Tensor:
            out = self.model(
                input_ids=ids[None], attention_mask=mask, position_ids=positions[None], cache=context,
                use_cache=True, logits_to_keep=width,
            )  # fmt: skip
            return out.logits[0]

        rows = self.timed_call(session, "draft", width, call)
        written = []
        for (keys, values), layer in zip(layers, context.layers):
            keys, values = keys.clone(), values.clone()
            keys[:, :, start:end], values[:, :, start:end] = layer.keys[:, :, -width:], layer.values[:, :, -width:]
            written.append((keys, values))
        return rows, written
