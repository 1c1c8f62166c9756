"""Logits to probabilities and token sampling, without host syncs.

Drafter and verifier distributions go through the same :func:`logits_to_probs`
so that ``p`` and ``q`` are always comparable. At temperature 0 decoding is
greedy (argmax), but the *probabilities* used for confidences and acceptance
ratios stay the plain softmax, as in the paper's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .fields import check_declared, setting


@dataclass(frozen=True)
class SamplingConfig:
    """How tokens are drawn from a distribution. ``temperature == 0`` is greedy."""

    temperature: float = setting(
        0.0, "Temperature", "0 = greedy drafts (argmax)", minimum=0.0, maximum=10.0, step=0.05, group="sampling"
    )
    top_k: int = setting(0, "Top-k", "keep the k most likely tokens (0 = off)", minimum=0, group="sampling")
    top_p: float = setting(
        1.0,
        "Top-p",
        "keep the smallest set of tokens reaching this mass",
        minimum=1e-6,
        maximum=1.0,
        step=0.05,
        group="sampling",
    )

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def logits_to_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Rows of logits ``(n, V)`` to rows of probabilities, float32."""
    logits = logits.float()
    if sampling.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens strictly more likely already reach top_p.
        drop_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs >= sampling.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator, greedy: bool) -> torch.Tensor:
    """One token per row. Sampling uses the exponential-race trick: no host sync."""
    if greedy:
        return probs.argmax(dim=-1)
    race = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / race).argmax(dim=-1)


def uniform(n: int, generator: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """``n`` draws from U[0, 1) on ``device`` from the session's generator."""
    return torch.rand(n, generator=generator, device=device)


def normalized_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of each row divided by ``log V``: 0 is certain, 1 uniform."""
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(dim=-1)
    return entropy / math.log(probs.shape[-1])
