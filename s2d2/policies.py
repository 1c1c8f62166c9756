"""When is verification worth a forward? Acceptance estimators and routing policies.

A verification costs one extra forward and commits the accepted prefix of the
span plus one token. The estimators guess, from the *drafter's* distribution
alone, how likely each drafted token is to be accepted (``α_i``); the expected
number of accepted tokens is ``E[K] = Σ_k Π_{i≤k} α_i`` (docs/ALGORITHM.md, "Route").
Policies turn that, and the state they keep across steps, into verify or skip.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .sampling import normalized_entropy

SCORE_TYPES = ("static", "dynamic")


def _top2_margin(probs: torch.Tensor) -> torch.Tensor:
    top2 = probs.topk(2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


def _renyi_2(probs: torch.Tensor, confidence: torch.Tensor, verify) -> torch.Tensor:
    """exp(-H_2) = Σ p²: the chance two independent draws agree."""
    return probs.square().sum(dim=-1).clamp(0, 1)


# Estimator name → ``(span rows of p, drafted tokens' probabilities, VerifyConfig) -> α_i``. The names are the
# official code's, except ``hard_margin`` (its ``hard_margin_threshold``) and ``soft_confidence``
# (``soft_confidence_power``); each reads its own parameter from the VerifyConfig.
ESTIMATOR_FUNCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, object], torch.Tensor]] = {
    "soft_entropy_negexp": lambda probs, confidence, v: torch.exp(-v.entropy_temperature * normalized_entropy(probs)),
    "hard_margin": lambda probs, confidence, v: (_top2_margin(probs) > v.margin).float(),
    "soft_confidence": lambda probs, confidence, v: confidence.clamp(0, 1) ** v.confidence_power,
    "hard_entropy_threshold": lambda probs, confidence, v: (normalized_entropy(probs) < v.entropy_threshold).float(),
    "soft_clipped_linear_margin": lambda probs, confidence, v: (v.margin_coef * _top2_margin(probs)).clamp(0, 1),
    "soft_renyi_2_entropy": _renyi_2,
}
ESTIMATORS = tuple(ESTIMATOR_FUNCTIONS)


def acceptance_estimate(probs: torch.Tensor, confidence: torch.Tensor, verify) -> torch.Tensor:
    """Per-position acceptance estimates ``α_i`` of the span's drafts.

    ``probs`` are the drafter's rows for the span, ``confidence`` the
    probability of each drafted token, ``verify`` the :class:`VerifyConfig`.
    """
    try:
        estimate = ESTIMATOR_FUNCTIONS[verify.estimator]
    except KeyError:
        raise ValueError(
            f"unknown acceptance estimator {verify.estimator!r}; choose one of {', '.join(ESTIMATORS)}"
        ) from None
    return estimate(probs, confidence, verify)


def _masked_rows(probs: torch.Tensor, span: slice, candidates: list[bool]) -> torch.Tensor:
    index = torch.tensor([i for i, c in enumerate(candidates) if c], device=probs.device)
    return probs.index_select(0, index)


# Where the UCB context's entropy is read: source name → ``(draft probs, span rows, candidates) -> rows``.
ENTROPY_SOURCES: dict[str, Callable[[torch.Tensor, slice, list[bool]], torch.Tensor]] = {
    "span": lambda probs, span, candidates: probs[span],
    "masked": _masked_rows,
}
UCB_ENTROPY_SOURCES = tuple(ENTROPY_SOURCES)


def expected_accepted_length(alpha: torch.Tensor, span: torch.Tensor | None = None) -> torch.Tensor:
    """``E[K] = Σ_k Π_{i≤k} α_i`` along the last dimension: each draft is accepted only if all before it were.
    With ``span`` (a batch's rows, each over its own span) positions outside it count for nothing."""
    alpha = alpha.clamp(0, 1)
    if span is None:
        return alpha.cumprod(dim=-1).sum(dim=-1)
    return (torch.where(span, alpha, torch.ones_like(alpha)).cumprod(dim=-1) * span).sum(dim=-1)


# The routers' decision rules. Each takes one request's numbers (the engine's policies below) or a batch's
# tensors, one element per request (SGLang's plugin), so a rule is written once for both.


def _where(condition, if_true, if_false):
    """``torch.where`` over a batch's tensors; a plain conditional for one request's numbers."""
    if isinstance(condition, torch.Tensor):
        return torch.where(condition, if_true, if_false)
    return if_true if condition else if_false


def route_score(expected_accepted, n_high, span_length, verify):
    """``s = E[K] - c`` (static) or ``s = E[K] - c · n_high`` (dynamic); ``-inf`` for an empty span.

    ``n_high`` is what the diffusion rule would commit for free this step,
    so the dynamic score asks whether verification beats it.
    """
    penalty = verify.c * (n_high if verify.score == "dynamic" else 1)
    return _where(span_length > 0, expected_accepted - penalty, -math.inf)


def score_verifies(score, verify):
    """The score router's rule: verify iff ``s ≥ τ_score``."""
    return score >= verify.tau_score


def span_verifies(span_length, verify):
    """The minimum-span router's rule: verify iff the span has at least ``τ_span`` positions."""
    return span_length >= verify.tau_span


def hysteresis_switch(on, score, verify):
    """The hysteresis state after a score: ON stays ON while ``s ≥ τ_off``; OFF turns ON when ``s > τ_on``."""
    return _where(on, score >= verify.tau_off, score > verify.tau_on)


@dataclass
class RouteRecord:
    """A routing decision and every input it was made from (recorded in the trace's steps)."""

    policy: str
    verify: bool
    span_start: int
    span_length: int
    expected_accepted: float | None = None
    score: float | None = None
    n_high: int | None = None
    thresholds: dict = field(default_factory=dict)
    state: str | None = None
    detail: dict = field(default_factory=dict)


@dataclass
class RouteContext:
    """What a policy may look at when a step's span is known.

    ``span_length`` is 0 in LLaDA2's editing-only steps, where nothing is
    masked: the score is then ``-inf`` (hysteresis turns OFF), as in the
    official code. ``block_progress`` is the share of the (sub-)block decoded
    in this block so far (tokens committed here over its length, the official
    definition); ``mean_entropy`` is the UCB context's entropy; ``all_accepted``
    decides whether a verification carries a lookahead.
    """

    span_start: int
    span_length: int
    block_length: int
    block_progress: float
    expected_accepted: float
    n_high: int
    mean_entropy: float
    all_accepted: float = 0.0  # Π α_i: the estimate that every draft of the span is accepted


class Policy(ABC):
    """Decides verify or skip; ``observe`` hears what the decision earned.

    A policy that reads ``RouteContext.mean_entropy`` says where from in
    :meth:`context_entropy`: it costs an entropy over the vocabulary, so it is
    computed only for policies that ask (the verifier never asks which policy runs).
    """

    name = ""

    def __init__(self, verify):
        self.verify = verify

    def context_entropy(self, probs: torch.Tensor, span: slice, candidates: list[bool]) -> torch.Tensor | None:
        """The mean normalised entropy the policy reads, of the draft rows it chooses; ``None``: it reads none."""
        return None

    @abstractmethod
    def decide(self, ctx: RouteContext) -> RouteRecord:
        """Verify or skip this step's span, with the inputs recorded."""

    def observe(self, route: RouteRecord, committed: int, forwards: int) -> None:  # noqa: B027 - no-op unless it learns
        """Feedback after the step: tokens committed, forwards spent; only learning policies use it."""

    @classmethod
    def always_verifies(cls, verify) -> bool:
        """Whether these settings verify every non-empty span, whatever the drafts
        (a condition of exactness: a skipped step commits unverified drafts)."""
        return False

    def _record(self, ctx: RouteContext, verify: bool, **extra) -> RouteRecord:
        if "score" in extra and not math.isfinite(extra["score"]):
            extra["score"] = None  # an empty span's -inf; JSON has no infinity
        return RouteRecord(
            policy=self.name,
            verify=verify,
            span_start=ctx.span_start,
            span_length=ctx.span_length,
            expected_accepted=ctx.expected_accepted,
            n_high=ctx.n_high,
            **extra,
        )

    def score(self, ctx: RouteContext) -> float:
        """The step's score (:func:`route_score`)."""
        return route_score(ctx.expected_accepted, ctx.n_high, ctx.span_length, self.verify)


def score_never_below(verify) -> float:
    """A lower bound of the score over every non-empty span: ``E[K] ≥ 0``, and
    ``n_high`` may be anything from 0 up (``-inf`` when the dynamic penalty can grow)."""
    if verify.score == "dynamic":
        return 0.0 if verify.c <= 0 else -math.inf
    return -verify.c


class AlwaysVerify(Policy):
    name = "always"

    @classmethod
    def always_verifies(cls, verify) -> bool:
        return True

    def decide(self, ctx):
        return self._record(ctx, True)


class MinimumSpanPolicy(Policy):
    """Verify iff the span is long enough to be worth a forward."""

    name = "min_span"

    @classmethod
    def always_verifies(cls, verify) -> bool:
        return verify.tau_span <= 1

    def decide(self, ctx):
        verify = span_verifies(ctx.span_length, self.verify)
        return self._record(ctx, verify, thresholds={"tau_span": self.verify.tau_span})


class ScoreThresholdPolicy(Policy):
    """Verify iff the score reaches ``τ_score``."""

    name = "score"

    @classmethod
    def always_verifies(cls, verify) -> bool:
        return score_never_below(verify) >= verify.tau_score

    def decide(self, ctx):
        s = self.score(ctx)
        return self._record(
            ctx, score_verifies(s, self.verify), score=s, thresholds={"tau_score": self.verify.tau_score}
        )


class HysteresisPolicy(Policy):
    """An ON/OFF switch with two thresholds, kept across steps and blocks.

    It starts OFF, turns ON when ``s > τ_on`` and OFF again when ``s < τ_off``;
    ``τ_on > τ_off`` keeps it from flickering on noisy scores. The OFF→ON test
    is strict, as in the official experiments (the paper writes ``≥``); the
    difference shows with the hard estimators, whose E[K] is an integer.
    """

    name = "hysteresis"

    @classmethod
    def always_verifies(cls, verify) -> bool:
        return score_never_below(verify) > verify.tau_on  # ON at the first step, and never below τ_off < τ_on

    def __init__(self, verify):
        super().__init__(verify)
        self.on = False

    def decide(self, ctx):
        s = self.score(ctx)
        before = self.on
        self.on = hysteresis_switch(before, s, self.verify)
        return self._record(
            ctx,
            self.on,
            score=s,
            thresholds={"tau_on": self.verify.tau_on, "tau_off": self.verify.tau_off},
            state="on" if self.on else "off",
            detail={"state_before": "on" if before else "off"},
        )


class UCBPolicy(Policy):
    """A contextual two-armed UCB bandit: skip (arm 0) or verify (arm 1).

    The context is a bucket of (span length, block progress, mean normalised
    entropy), each cut into equal bins. The reward of a step is the tokens it
    committed per forward it spent (a verification spends two, one when its
    lookahead saves the next forward), so the bandit learns where verification
    pays for itself.
    """

    name = "ucb"

    def __init__(self, verify):
        super().__init__(verify)
        span_bins, progress_bins, entropy_bins = verify.ucb_bins
        buckets = span_bins * progress_bins * entropy_bins
        self.counts = [[0] * buckets for _ in range(2)]
        self.rewards = [[0.0] * buckets for _ in range(2)]
        self.t = 0

    def context_entropy(self, probs, span, candidates):
        """Of the span's drafts, or of every masked candidate's (``ucb_entropy_source``)."""
        return normalized_entropy(ENTROPY_SOURCES[self.verify.ucb_entropy_source](probs, span, candidates)).mean()

    @staticmethod
    def _bin(value: float, low: float, high: float, bins: int) -> int:
        ratio = (min(max(value, low), high) - low) / (high - low) if high > low else 0.0
        return min(int(ratio * bins), bins - 1)

    def bucket(self, ctx: RouteContext) -> int:
        span_bins, progress_bins, entropy_bins = self.verify.ucb_bins
        span = self._bin(max(1, ctx.span_length), 1, ctx.block_length, span_bins)
        progress = self._bin(ctx.block_progress, 0.0, 1.0, progress_bins)
        entropy = self._bin(ctx.mean_entropy, 0.0, 1.0, entropy_bins)
        return (span * progress_bins + progress) * entropy_bins + entropy

    def upper_bound(self, arm: int, bucket: int) -> float:
        n = self.counts[arm][bucket]
        if n == 0:
            return math.inf
        bonus = self.verify.ucb_beta * math.sqrt(math.log(self.t) / n) if self.t > 1 else 0.0
        return self.rewards[arm][bucket] / n + bonus

    def decide(self, ctx):
        self.t += 1
        bucket = self.bucket(ctx)
        skip, verify = self.upper_bound(0, bucket), self.upper_bound(1, bucket)
        return self._record(
            ctx,
            verify >= skip,
            detail={
                "bucket": bucket,
                "ucb_skip": skip,
                "ucb_verify": verify,
                "t": self.t,
                "block_progress": ctx.block_progress,
                "mean_entropy": ctx.mean_entropy,
            },
        )

    def observe(self, route, committed, forwards):
        arm = int(route.verify)
        bucket = route.detail["bucket"]
        self.counts[arm][bucket] += 1
        self.rewards[arm][bucket] += committed / forwards


POLICY_CLASSES = {
    cls.name: cls for cls in (AlwaysVerify, MinimumSpanPolicy, ScoreThresholdPolicy, HysteresisPolicy, UCBPolicy)
}
POLICIES = tuple(POLICY_CLASSES)


def always_verifies(verify) -> bool:
    """Whether ``verify``'s router verifies every non-empty span (see :meth:`Policy.always_verifies`)."""
    return POLICY_CLASSES[verify.policy].always_verifies(verify)


def make_policy(verify) -> Policy:
    """A fresh policy (fresh state) for one generation."""
    try:
        return POLICY_CLASSES[verify.policy](verify)
    except KeyError:
        raise ValueError(f"unknown policy {verify.policy!r}; choose one of {', '.join(POLICIES)}") from None
