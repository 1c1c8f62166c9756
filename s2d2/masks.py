"""Attention masks for block diffusion, built as boolean "may attend" matrices.

Every forward of the engine passes an explicit additive float mask of shape
``(1, 1, queries, cached + queries)`` to a stock transformers model: ``0`` where a
query may attend, ``finfo.min`` where it may not. A boolean mask would be read
with the opposite meaning by some attention backends, and ``attention_mask=None``
means *causal* in stock classes, so the engine never relies on either.

The functions here build the in-forward part of each mask as a boolean matrix
(``True`` = attend); :func:`additive_mask` prepends the always-visible cache
columns and converts. Keeping them boolean makes them easy to test and to show.
"""

from __future__ import annotations

from functools import lru_cache

import torch

# The in-forward part of a mask depends only on a few integers, and a decode
# asks for the same few shapes again and again: build each once. Callers must
# not modify the tensors these return.
cached = lru_cache(maxsize=512)


@cached
def causal(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Row ``i`` sees columns ``j <= i``."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


@cached
def block_causal(n: int, block_length: int, offset: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """Row ``i`` sees every column whose block is not after row ``i``'s block.

    ``offset`` is the absolute position of the first row, so that blocks stay
    aligned to multiples of ``block_length`` from the start of the sequence,
    which is how block-diffusion models are trained.
    """
    block = (torch.arange(n, device=device) + offset) // block_length
    return block[None, :] <= block[:, None]


@cached
def draft_mask(
    commit_length: int,
    block_length: int,
    commit_causal: bool,
    causal_prefix: int = 0,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Mask for a draft forward over ``[finished block | current block]``.

    The finished block (``commit_length`` tokens, possibly zero) is the fused
    commit (docs/ALGORITHM.md, "Accounting"): its rows see each other causally when the cache is
    kept AR-like (``commit_causal``, the ``cache_ver`` option) and
    bidirectionally otherwise; it never sees the current block. The current
    block sees the whole finished block and itself bidirectionally, except that
    its first ``causal_prefix`` rows (the ``draft_ver`` option: the committed
    prefix of the block) only see current-block columns up to themselves.
    """
    n = commit_length + block_length
    allowed = torch.zeros(n, n, dtype=torch.bool, device=device)
    if commit_length:
        allowed[:commit_length, :commit_length] = causal(commit_length, device) if commit_causal else True
    allowed[commit_length:, :commit_length] = True
    allowed[commit_length:, commit_length:] = True
    if causal_prefix:
        rows = slice(commit_length, commit_length + causal_prefix)
        allowed[rows, commit_length:] = causal(block_length, device)[:causal_prefix]
    return allowed


def verifier_mask(
    prefix_length: int, span_start: int, span_length: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The "2L" verifier mask of a position-aligned model (docs/ALGORITHM.md, "Verify").

    Input is ``[block[:prefix_length] with drafts filled | span_length mask tokens]``
    with ``prefix_length = span_start + span_length - 1`` at most. First-half rows
    are causal. Second-half row ``k`` stands for block position ``span_start + k``:
    it sees the first half up to (not including) that position and itself, so its
    logits are the block-size-1 (autoregressive) distribution at that position.
    """
    n = prefix_length + span_length
    allowed = torch.zeros(n, n, dtype=torch.bool, device=device)
    allowed[:prefix_length, :prefix_length] = causal(prefix_length, device)
    visible = span_start + torch.arange(span_length, device=device)
    first_half = torch.arange(prefix_length, device=device)
    allowed[prefix_length:, :prefix_length] = first_half[None, :] < visible[:, None]
    idx = prefix_length + torch.arange(span_length, device=device)
    allowed[idx, idx] = True
    return allowed


def lookahead_verifier_mask(
    commit_length: int,
    prefix_length: int,
    span_start: int,
    span_length: int,
    lookahead_length: int,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The verifier mask with a lookahead (docs/ALGORITHM.md, "Lookahead").

    Input: ``[commit rows | verifier first half | verifier masks | lookahead masks]``.
    The verifier part is :func:`verifier_mask`, blind to everything else. The
    optional ``commit_length`` rows store a finished block as the commit does
    without ``cache_ver`` (bidirectionally); the lookahead rows are the next
    draft's masks and see the finished tokens (the commit rows if there are any,
    else the verifier's causal first half, which then *is* the commit) and each
    other, never the verifier's masks. So their logits are the next draft's.
    """
    verifier = prefix_length + span_length
    n = commit_length + verifier + lookahead_length
    allowed = torch.zeros(n, n, dtype=torch.bool, device=device)
    allowed[:commit_length, :commit_length] = True
    body = slice(commit_length, commit_length + verifier)
    allowed[body, body] = verifier_mask(prefix_length, span_start, span_length, device)
    rows = slice(commit_length + verifier, n)
    finished = slice(0, commit_length) if commit_length else slice(commit_length, commit_length + prefix_length)
    allowed[rows, finished] = True
    allowed[rows, rows] = True
    return allowed


def training_mask(length: int, block_length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """SDAR's training mask over ``[noisy copy | clean copy]`` of one sequence.

    A noisy row sees its own noisy block bidirectionally and the clean copy of
    every earlier block; a clean row sees the clean copy block-causally. One
    forward thus trains every block's denoising in parallel, each conditioned on
    the clean past exactly as at decoding time.
    """
    block = torch.arange(length, device=device) // block_length
    same_block = block[:, None] == block[None, :]
    earlier = block[None, :] < block[:, None]
    allowed = torch.zeros(2 * length, 2 * length, dtype=torch.bool, device=device)
    allowed[:length, :length] = same_block
    allowed[:length, length:] = earlier
    allowed[length:, length:] = block[None, :] <= block[:, None]
    return allowed


def additive_mask(allowed: torch.Tensor, stored: int, dtype: torch.dtype) -> torch.Tensor:
    """Prepend ``stored`` always-visible cache columns and convert to an additive 4D mask."""
    rows, n = allowed.shape
    mask = torch.zeros(rows, stored + n, dtype=dtype, device=allowed.device)
    mask[:, stored:].masked_fill_(allowed.logical_not(), torch.finfo(dtype).min)
    return mask[None, None]
