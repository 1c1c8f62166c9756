"""Exact autoregressive log-likelihoods from a block-diffusion model, one forward per request.

Run at block size 1 a block-diffusion model *is* an autoregressive model: the
distribution of token ``i`` is the model's prediction at position ``i`` given
exactly the tokens before it. That is the distribution S2D2's verifier computes
for a span of drafts, so scoring a continuation is one :meth:`verify_span` over
``context + continuation`` with the continuation as the span:

- a position-aligned family (SDAR, LLaDA2) answers with the "2L" verifier: the
  sequence causally, then one mask token per continuation position that sees
  the tokens before it (:func:`s2d2.masks.verifier_mask`);
- Fast-dLLM v2 (right-shifted logits) answers with a plain causal forward.

Reusing the verifier keeps one definition of "the AR distribution" in the
engine: the log-likelihoods lm-eval reports are the ``q`` that S2D2 accepts
drafts against. The context must hold at least one token (a right-shifted model
cannot predict the first position from nothing); lm-eval's empty contexts get
the prefix token before they arrive here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .models import BlockDiffusionModel


@dataclass
class Scored:
    """The AR log-probability of one continuation and what computing it cost."""

    logprob: float
    greedy: bool
    token_logprobs: list[float]
    nfe: int
    wall_seconds: float


def ar_logprobs(model: BlockDiffusionModel, context_ids: list[int], continuation_ids: list[int]) -> Scored:
    """``log p(continuation | context)`` in block-size-1 mode, from a single forward.

    ``greedy`` says whether every continuation token is the argmax of its AR
    distribution (lm-eval's ``is_greedy``).
    """
    if not context_ids:
        raise ValueError("the context is empty: scoring needs at least one conditioning token")
    if not continuation_ids:
        raise ValueError("the continuation is empty: there is nothing to score")
    length = len(context_ids) + len(continuation_ids)
    if length > model.max_positions:
        raise ValueError(
            f"context plus continuation ({length} tokens) exceed the model's {model.max_positions} positions"
        )
    forwards: list[str] = []
    session = model.new_session(lambda kind, tokens, seconds: forwards.append(kind))
    ids = torch.tensor(context_ids + continuation_ids, dtype=torch.long, device=model.device)
    target = ids[len(context_ids) :]
    start = time.perf_counter()
    with torch.inference_mode():
        logits = model.verify_span(session, ids, len(context_ids), len(continuation_ids))
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        picked = logprobs.gather(-1, target[:, None])[:, 0]
        greedy = bool((logprobs.argmax(dim=-1) == target).all())
    token_logprobs = picked.tolist()
    return Scored(sum(token_logprobs), greedy, token_logprobs, len(forwards), time.perf_counter() - start)
