"""Helpers shared by the engine and model-family tests."""

from __future__ import annotations

import math
import random

import torch

from s2d2.config import DecodeConfig, VerifyConfig
from s2d2.trace import OUTCOMES, Trace


def random_prompts(model, n: int, seed: int) -> list[list[int]]:
    """Random prompts of ordinary tokens, lengths that are rarely a block multiple."""
    rng = random.Random(seed)
    special = set(model.tokenizer.all_special_ids)
    vocab = [i for i in range(len(model.tokenizer)) if i not in special]
    return [[rng.choice(vocab) for _ in range(rng.randint(3, 21))] for _ in range(n)]


def exact_greedy_s2d2(block_length: int, sub_block_length: int | None = None, max_new_tokens: int = 24) -> DecodeConfig:
    """S2D2 that must reproduce AR greedy decoding: always verify, greedy acceptance, causal cache."""
    return DecodeConfig(
        method="s2d2",
        block_length=block_length,
        sub_block_length=sub_block_length,
        cache_ver=True,
        max_new_tokens=max_new_tokens,
        verify=VerifyConfig(policy="always", acceptance="greedy"),
    )


class CountingForward:
    """Wraps the network's forward to count real model calls."""

    def __init__(self, model):
        self.model, self.calls = model, 0
        self.inner = model.model.forward

    def __enter__(self):
        def counted(*args, **kwargs):
            self.calls += 1
            return self.inner(*args, **kwargs)

        self.model.model.forward = counted
        return self

    def __exit__(self, *exc):
        self.model.model.forward = self.inner


def assert_each_token_committed_once(trace: Trace) -> None:
    """Every generated position is committed exactly once, with the token the output holds."""
    commits = {}
    for step in trace.steps:
        for p in step.committed:
            assert p.outcome in OUTCOMES
            assert p.position not in commits, f"position {p.position} committed twice"
            commits[p.position] = p.committed
    generated = len(trace.output_ids)
    assert [commits[i] for i in range(generated)] == trace.output_ids
    assert trace.summary.generated_tokens == generated
    assert sum(trace.summary.committed_by_outcome.values()) == generated


def chi_square(counts: torch.Tensor, p: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic and its degrees of freedom, cells expecting fewer than 5 pooled into one."""
    counts, p = counts.reshape(-1), p.reshape(-1)
    expected = p * counts.sum()
    small = expected < 5
    observed, expected = counts[~small], expected[~small]
    if small.any():
        observed = torch.cat([observed, counts[small].sum()[None]])
        expected = torch.cat([expected, (p[small].sum() * counts.sum())[None]])
    return float(((observed - expected) ** 2 / expected).sum()), len(observed) - 1


def chi_square_bound(dof: int, false_failure: float = 1e-3) -> float:
    """The chi-square quantile that sampling noise alone exceeds with probability ``false_failure``.

    For ``k`` degrees of freedom, P(χ² > x) = Q(k/2, x/2), the regularised upper
    incomplete gamma function (``torch.special.gammaincc``), which falls from 1
    to 0 as ``x`` grows; bisection in float64 finds where it equals ``false_failure``.
    """
    k = torch.tensor(dof / 2, dtype=torch.float64)
    low, high = 0.0, dof + 40 * math.sqrt(2 * dof) + 100
    for _ in range(200):
        middle = (low + high) / 2
        if float(torch.special.gammaincc(k, torch.tensor(middle / 2, dtype=torch.float64))) > false_failure:
            low = middle
        else:
            high = middle
    return high


def decode_each(model, prompt: str, configs: dict[str, DecodeConfig]) -> dict[str, Trace]:
    """Each configuration's run of ``prompt``, decoded once (the dashboard's :func:`components.runner.run_all`
    without its warm-ups and timed rounds, for tests that read tokens and steps, not clocks)."""
    from s2d2.decode import generate

    return {name: generate(model, prompt, config) for name, config in configs.items()}
