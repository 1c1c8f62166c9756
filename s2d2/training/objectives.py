"""Training objectives of the Fast-dLLM v2 and LLaDA2.x families (``python -m s2d2.training.train --family ...``).

Both start from the batch SDAR's objective uses (:func:`s2d2.training.train.encode_batch`:
answer tokens, padded with EOS to whole blocks) and run a ``[noisy | clean]``
pair of copies through one forward, as SDAR does, but each family corrupts the
noisy copy and reads its targets the way that family decodes:

- **Fast-dLLM v2** keeps an autoregressive model's convention: the logit at
  position ``i`` predicts token ``i + 1`` (the token shift), so a masked token
  is predicted from the row *before* it. Each sequence appears twice, with a
  block-wise random mask and its complement, so every answer token is a target
  exactly once per pair. Attention is bidirectional inside a block and causal
  across blocks (a noisy block sees the clean copy of earlier blocks only).
  At decoding time a block's first token comes from the last row of the
  forward that stored the previous block (the adapter's ``next_row``), so that
  row is trained on the clean copy, never inside the noisy block. The clean
  copy is attended causally in some batches (as S2D2 stores it with
  ``cache_ver``, and as AR decoding does; those batches also carry the plain
  next-token loss on the clean copy) and block-causally in the others (as the
  official decoder stores it).
- **LLaDA2.x** is position-aligned (logit ``i`` predicts token ``i``) and uses
  the same complementary block-wise masks, plus token-to-token editing: some
  *visible* answer tokens of the noisy copy are replaced by random vocabulary
  tokens, and the loss asks every visible answer position for its original
  token. The corrupted ones teach repair; the untouched ones teach keeping a
  right token, without which a model that has only ever seen wrong visible
  tokens would "edit" every correct one.

Alternative considered for the editing corruption: the model's own drafts as
corruptions (closer to decoding-time errors, but a second forward per step);
LLaDA2.1's released recipe corrupts with random vocabulary tokens, and so do we.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import masks

IGNORE = -100
NOISE_FLOOR = 1e-3  # the smallest per-block masking rate: no block is left entirely unmasked by its draw


@dataclass
class FamilyBatch:
    """One training batch of a block-diffusion family over ``[noisy | clean]`` copies.

    ``ids`` and ``targets`` are ``(2N, 2L)``: rows ``0..N-1`` are the first view
    of each sequence and rows ``N..2N-1`` the complementary one. ``targets`` is
    :data:`IGNORE` where no loss is taken. ``masked`` (``(2N, L)``) marks the
    noisy copy's mask tokens, ``corrupted`` its edited (randomly replaced)
    visible tokens, and ``allowed`` is the ``(2L, 2L)`` attention mask (True =
    attend) shared by every row. ``copies`` is 1 for a plain causal batch.
    """

    ids: torch.Tensor
    targets: torch.Tensor
    masked: torch.Tensor
    corrupted: torch.Tensor
    allowed: torch.Tensor
    copies: int = 2


def complementary_masks(answer: torch.Tensor, block_length: int, gen: torch.Generator) -> torch.Tensor:
    """A block-wise random mask of the answer tokens and its complement, stacked as ``(2N, L)``.

    Each block draws its own masking rate ``t`` in ``[NOISE_FLOOR, 1)``, then each
    answer token of the block is masked with probability ``t``; the second view
    masks exactly the answer tokens the first left visible, so across the pair
    every answer token is masked once and only once.
    """
    rows, length = answer.shape
    rate = NOISE_FLOOR + (1 - NOISE_FLOOR) * torch.rand(rows, length // block_length, generator=gen)
    first = (torch.rand(rows, length, generator=gen) < rate.repeat_interleave(block_length, dim=1)) & answer
    return torch.cat([first, answer & ~first])


def fast_dllm_attention(length: int, block_length: int, causal_context: bool) -> torch.Tensor:
    """Fast-dLLM v2's training mask over ``[noisy | clean]``, with the clean copy causal or block-causal.

    Noisy rows see their own noisy block bidirectionally and the clean copy of
    earlier blocks (never their own block's clean tokens, which would give the
    answer away). Clean rows see the clean copy block-causally, as the official
    decoder stores finished blocks, or causally (``causal_context``), as S2D2's
    ``cache_ver`` and AR decoding store them.
    """
    allowed = masks.training_mask(length, block_length).clone()
    if causal_context:
        allowed[length:, length:] = masks.causal(length)
    return allowed


def fast_dllm_batch(
    clean: torch.Tensor,
    answer: torch.Tensor,
    block_length: int,
    mask_id: int,
    gen: torch.Generator,
    causal_context: bool,
) -> FamilyBatch:
    """Fast-dLLM v2's block-diffusion batch: complementary masks, targets shifted by one.

    Noisy row ``i`` is the target of token ``i + 1`` when that token is masked
    and lies in the same block (block position ≥ 1). The clean copy of the first
    view carries next-token targets on every answer token when it is attended
    causally, and otherwise only on block position 0 (each block's last clean
    row has seen nothing after itself, so the target leaks nothing), which is
    the row the decoder commits each block's first token from.
    """
    rows, length = clean.shape
    masked = complementary_masks(answer, block_length, gen)
    both = torch.cat([clean, clean])
    noisy = torch.where(masked, torch.full_like(both, mask_id), both)
    shifted = torch.full_like(both, IGNORE)
    starts_block = torch.arange(length) % block_length == 0
    inside = masked[:, 1:] & ~starts_block[1:]
    shifted[:, :-1] = torch.where(inside, both[:, 1:], IGNORE)
    context = torch.full_like(both, IGNORE)
    wanted = answer[:, 1:] if causal_context else answer[:, 1:] & starts_block[1:]
    context[:rows, :-1] = torch.where(wanted, clean[:, 1:], IGNORE)
    return FamilyBatch(
        ids=torch.cat([noisy, both], dim=1),
        targets=torch.cat([shifted, context], dim=1),
        masked=masked,
        corrupted=torch.zeros_like(masked),
        allowed=fast_dllm_attention(length, block_length, causal_context),
    )


def llada2_batch(
    clean: torch.Tensor,
    answer: torch.Tensor,
    block_length: int,
    mask_id: int,
    gen: torch.Generator,
    edit_rate: float,
    replacements: torch.Tensor,
) -> FamilyBatch:
    """LLaDA2.x's block-diffusion batch with token-to-token editing corruption.

    Visible answer tokens of each noisy view are replaced, each with
    probability ``edit_rate``, by a random token of ``replacements`` (sorted
    ids of the ordinary vocabulary, never a special token) other than the original. Targets are
    position-aligned: every answer position of the noisy copy (masked,
    corrupted or kept) is asked for its original token; the clean copy only
    serves as context, as in SDAR's objective.
    """
    length = clean.shape[1]
    masked = complementary_masks(answer, block_length, gen)
    both = torch.cat([clean, clean])
    visible = torch.cat([answer, answer]) & ~masked
    corrupted = visible & (torch.rand(both.shape, generator=gen) < edit_rate)
    # A random offset in 1..n-1 from the original's index in ``replacements`` never lands on the original;
    # originals outside the list (EOS padding) take any replacement.
    n = replacements.numel()
    index = torch.searchsorted(replacements, both).clamp(max=n - 1)
    offset = torch.randint(1, n, both.shape, generator=gen)
    found = replacements[index] == both
    swapped = torch.where(found, replacements[(index + offset) % n], replacements[offset])
    noisy = torch.where(masked, torch.full_like(both, mask_id), torch.where(corrupted, swapped, both))
    targets = torch.where(torch.cat([answer, answer]), both, IGNORE)
    return FamilyBatch(
        ids=torch.cat([noisy, both], dim=1),
        targets=torch.cat([targets, torch.full_like(both, IGNORE)], dim=1),
        masked=masked,
        corrupted=corrupted,
        allowed=masks.training_mask(length, block_length),
    )


def causal_lm_batch(clean: torch.Tensor, answer: torch.Tensor) -> FamilyBatch:
    """Plain next-token prediction on the answer tokens (Fast-dLLM v2's stage 1, the AR model it adapts).

    One copy only: ``ids`` is ``clean``, row ``i`` is the target of answer token ``i + 1``.
    """
    length = clean.shape[1]
    targets = torch.full_like(clean, IGNORE)
    targets[:, :-1] = torch.where(answer[:, 1:], clean[:, 1:], IGNORE)
    none = torch.zeros_like(answer)
    return FamilyBatch(ids=clean, targets=targets, masked=none, corrupted=none, allowed=masks.causal(length), copies=1)


def family_loss(model, batch: FamilyBatch, device) -> torch.Tensor:
    """Mean cross-entropy over the batch's targets, through the stock model with the batch's attention mask.

    Positions repeat per copy (both copies of a sequence sit at the same absolute positions).
    """
    ids, targets = batch.ids.to(device), batch.targets.to(device)
    attention = masks.additive_mask(batch.allowed.to(device), 0, next(model.parameters()).dtype)
    positions = torch.arange(ids.shape[1] // batch.copies, device=device).repeat(batch.copies)
    positions = positions[None].expand(ids.shape[0], -1)
    hidden = model.model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=False)
    picked = targets != IGNORE
    states = hidden.last_hidden_state[picked]
    if states.shape[0] == 0:
        return hidden.last_hidden_state.sum() * 0.0
    return F.cross_entropy(model.lm_head(states).float(), targets[picked])
