"""Autoregressive references that share no code with the engine.

Each is the stock transformers network (``Qwen3ForCausalLM`` for SDAR,
``Qwen2ForCausalLM`` for Fast-dLLM v2, ``Glm4MoeForCausalLM`` for LLaDA2.x,
whose weights the engine converts onto that class), called in a plain loop
that recomputes the whole sequence for every token: no KV cache, no engine
masks, no engine sampling. Autoregressive decoding of a block-diffusion model
is block size 1, where the block-causal mask is the causal one:

- a position-aligned family (SDAR, LLaDA2) predicts position ``i`` from a mask
  token placed there, which sees every earlier token and itself;
- a right-shifted family (Fast-dLLM v2) predicts position ``i`` from row
  ``i − 1``, the ordinary causal language model.

So when the engine and a reference agree, they agree by two independent routes.
"""

from __future__ import annotations

import torch


def causal_additive_mask(length: int, dtype: torch.dtype) -> torch.Tensor:
    """``(1, 1, length, length)``: 0 where a row may attend (columns up to its own), the dtype's minimum elsewhere."""
    hidden = torch.ones(length, length, dtype=torch.bool).triu(diagonal=1)
    return torch.zeros(length, length, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)[None, None]


@torch.no_grad()
def next_token_logits(network, sequences: torch.Tensor, mask_token_id: int | None) -> torch.Tensor:
    """Float32 logits ``(rows, V)`` of the token after each row of ``sequences`` ``(rows, length)``.

    ``mask_token_id`` is the mask token of a position-aligned family; ``None`` reads a right-shifted one.
    """
    if mask_token_id is not None:
        sequences = torch.cat([sequences, torch.full((len(sequences), 1), mask_token_id)], dim=1)
    rows, length = sequences.shape
    mask = causal_additive_mask(length, network.dtype).expand(rows, -1, -1, -1)
    positions = torch.arange(length).expand(rows, -1)
    logits = network(input_ids=sequences, attention_mask=mask, position_ids=positions).logits
    return logits[:, -1].float()


def greedy_reference(
    network, prompt: list[int], new_tokens: int, mask_token_id: int | None
) -> tuple[list[int], list[float]]:
    """``new_tokens`` greedy tokens after ``prompt``, each from a full recompute, and the
    top-1 minus top-2 logit margin at each of them (a near-tie is a small margin)."""
    tokens, margins = [], []
    for _ in range(new_tokens):
        logits = next_token_logits(network, torch.tensor([prompt + tokens]), mask_token_id)[0]
        top = logits.topk(2).values
        tokens.append(int(logits.argmax()))
        margins.append(float(top[0] - top[1]))
    return tokens, margins


def sampling_probabilities(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Rows of probabilities at ``temperature`` restricted to the nucleus: the most likely tokens,
    taken in order while the mass before them is under ``top_p``, renormalised."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    ordered, order = probs.sort(dim=-1, descending=True)
    kept_in_order = ordered.cumsum(dim=-1) - ordered < top_p
    kept = torch.zeros_like(kept_in_order).scatter(-1, order, kept_in_order)
    nucleus = probs * kept
    return nucleus / nucleus.sum(dim=-1, keepdim=True)
