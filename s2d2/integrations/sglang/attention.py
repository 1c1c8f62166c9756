"""The forwards S2D2 needs that SGLang's attention backends do not offer.

SGLang runs a dLLM block as one fixed canvas per request, bidirectional inside the
block (SDAR's layers are ``ENCODER_ONLY``). S2D2 also needs

- a **causal** forward, which stores committed blocks the way the model's own
  autoregressive mode reads them (``cache_ver``): SGLang's own kernels do it once
  every layer's ``attn_type`` says ``DECODER`` (:func:`causal_layers`);
- the **verifier** forward of a position-aligned model (docs/ALGORITHM.md, "Verify"):
  ``[drafted block | B masks]`` with the "2L" mask, so that mask row ``k`` is the
  block-size-1 distribution at block position ``k`` given the drafts before it;
- drafts whose committed prefix attends causally (``draft_ver``).

The last two need a mask per request that no backend takes, so they run through
:class:`MaskedAttention`: it reads the cached prefix from SGLang's KV pool, adds
the forward's own keys and values, and runs one masked scaled-dot-product
attention over the whole batch (prefixes padded to the longest). A canvas
forward stores its keys and values where SGLang would (the last one of a block
is what SGLang keeps); the verifier's extra rows are never stored.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.nn.functional import scaled_dot_product_attention

from ... import masks


@contextmanager
def causal_layers(model: torch.nn.Module) -> Iterator[None]:
    """Every bidirectional ``RadixAttention`` of ``model`` attends causally inside the block, then is restored."""
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    layers = [m for m in model.modules() if isinstance(m, RadixAttention) and m.attn_type == AttentionType.ENCODER_ONLY]
    for layer in layers:
        layer.attn_type = AttentionType.DECODER
    try:
        yield
    finally:
        for layer in layers:
            layer.attn_type = AttentionType.ENCODER_ONLY


def verifier_allowed(block_size: int, device) -> torch.Tensor:
    """The "2L" mask over ``[drafted block | one mask per block position]`` (:func:`s2d2.masks.verifier_mask`)."""
    return masks.verifier_mask(block_size, 0, block_size, device)


def draft_allowed(causal_prefix: torch.Tensor, block_size: int) -> torch.Tensor:
    """Per request ``(bs, B, B)``: rows before its ``causal_prefix`` see the block causally, the rest all of it
    (:func:`s2d2.masks.draft_mask` for a whole batch, each request with its own committed prefix)."""
    rows = torch.arange(block_size, device=causal_prefix.device)
    causal = rows[None, :] <= rows[:, None]
    committed = rows[None, :, None] < causal_prefix[:, None, None]
    return torch.where(committed, causal[None], True)


class MaskedAttention:
    """An attention backend for one forward whose in-forward mask is given: ``allowed`` is ``(R, R)`` for
    every request or ``(bs, R, R)`` per request, over each request's ``R`` rows of this forward; the keys and
    values of each request's first ``saved_rows`` rows are stored in the KV pool at SGLang's slots (all of a
    canvas forward; the drafted half of a verifier forward, whose rows are causal). Every other attribute is
    the wrapped backend's, so SGLang's planning calls reach the real backend."""

    def __init__(self, backend, allowed: torch.Tensor, prefix_lens: torch.Tensor, max_prefix: int, saved_rows: int):
        self._backend = backend
        self.allowed = allowed
        self.prefix_lens = prefix_lens
        self.max_prefix = max_prefix
        self.saved_rows = saved_rows

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache: bool = True, **kwargs):
        bs = forward_batch.batch_size
        heads, kv_heads, dim = layer.tp_q_head_num, layer.tp_k_head_num, layer.qk_head_dim
        query = q.reshape(bs, -1, heads, dim).transpose(1, 2)
        rows = query.shape[2]
        new_k = k.reshape(bs, rows, kv_heads, dim)
        new_v = v.reshape(bs, rows, kv_heads, layer.v_head_dim)
        pool = self._backend.token_to_kv_pool
        if self.saved_rows:
            from sglang.srt.mem_cache.memory_pool import KVWriteLoc

            def leading(t: torch.Tensor) -> torch.Tensor:
                return t.reshape(bs, rows, -1)[:, : self.saved_rows].reshape(-1, *t.shape[1:])

            pool.set_kv_buffer(layer, KVWriteLoc(leading(forward_batch.out_cache_loc), None), leading(k), leading(v))
        slots = self._backend.req_to_token_pool.req_to_token[forward_batch.req_pool_indices, : self.max_prefix]
        cached_k = pool.get_key_buffer(layer.layer_id)[slots].to(new_k.dtype)
        cached_v = pool.get_value_buffer(layer.layer_id)[slots].to(new_v.dtype)
        keys = torch.cat([cached_k, new_k], dim=1).transpose(1, 2)
        values = torch.cat([cached_v, new_v], dim=1).transpose(1, 2)
        cached = torch.arange(self.max_prefix, device=q.device)[None, :] < self.prefix_lens[:, None]
        allowed = self.allowed if self.allowed.dim() == 3 else self.allowed.expand(bs, rows, rows)
        mask = torch.cat([cached[:, None, :].expand(bs, rows, self.max_prefix), allowed], dim=2)
        out = scaled_dot_product_attention(
            query, keys, values, attn_mask=mask[:, None], scale=layer.scaling, enable_gqa=heads != kv_heads
        )
        return out.transpose(1, 2).reshape(bs * rows, heads * layer.v_head_dim)


def widened_batch(forward_batch, input_ids: torch.Tensor, positions: torch.Tensor):
    """A shallow copy of ``forward_batch`` with ``rows`` tokens per request instead of the block: the verifier
    forward's ``[drafted block | masks]``. Only :class:`MaskedAttention` reads its attention inputs."""
    bs = forward_batch.batch_size
    rows = input_ids.shape[0] // bs
    wide = copy.copy(forward_batch)
    wide.input_ids, wide.positions = input_ids, positions
    wide.extend_num_tokens = input_ids.shape[0]
    wide.extend_seq_lens = torch.full_like(forward_batch.extend_seq_lens, rows)
    wide.extend_seq_lens_cpu = [rows] * bs
    wide.seq_lens = forward_batch.extend_prefix_lens + rows
    wide.seq_lens_cpu = None if forward_batch.seq_lens_cpu is None else forward_batch.seq_lens_cpu + rows // 2
    wide.out_cache_loc = forward_batch.out_cache_loc.reshape(bs, -1).repeat(1, 2).reshape(-1)
    tokens = input_ids.shape[0]
    wide.global_num_token_non_padded_cpu = tokens
    if forward_batch.global_num_token_non_padded is not None:
        wide.global_num_token_non_padded = torch.full_like(forward_batch.global_num_token_non_padded, tokens)
    if forward_batch.num_token_non_padded is not None:
        wide.num_token_non_padded = torch.full_like(forward_batch.num_token_non_padded, tokens)
    return wide
