"""Acceptance maths, routing policies and settings validation: the spec as tests."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import chi_square, chi_square_bound

from s2d2.acceptance import residual_energy, residual_mass, verify_drafts
from s2d2.config import DecodeConfig, VerifyConfig, preset_config
from s2d2.policies import (
    HysteresisPolicy,
    RouteContext,
    ScoreThresholdPolicy,
    UCBPolicy,
    acceptance_estimate,
    expected_accepted_length,
    make_policy,
)
from s2d2.rules import entropy_bounded_commits
from s2d2.sampling import SamplingConfig, logits_to_probs, sample


def test_verify_drafts_preserves_target_and_accepts_with_product_of_ratios():
    """The decoder's own ``verify_drafts``, stochastic mode, drafts drawn from p.

    At every span position the walk reaches, the token committed there (the
    draft if accepted, else the residual sample of that row) follows that
    row's q; the accepted-prefix length follows the product of per-position
    acceptance probabilities, P(accept row i) = Σ_v min(p, q) = 1 − TV(p_i, q_i).
    Each is a Pearson chi-square under the quantile that sampling noise alone
    exceeds with probability 1e-3 / 4 (Bonferroni over the four statistics)
    over 50k draws: moving 0.02 of probability between two tokens of the
    least-reached position (about 19k draws reach it) adds about 50 to a
    statistic whose bound is 21.5 (4 dof). Each row of q has its own argmax, so
    a residual read from the wrong row shows.
    """
    p = torch.tensor([[0.5, 0.2, 0.1, 0.15, 0.05], [0.3, 0.3, 0.2, 0.1, 0.1], [0.7, 0.1, 0.1, 0.05, 0.05]])
    q = torch.tensor([[0.1, 0.35, 0.25, 0.05, 0.25], [0.15, 0.2, 0.3, 0.2, 0.15], [0.2, 0.1, 0.1, 0.55, 0.05]])
    n = 50_000
    gen = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n):
        drafts = sample(p, gen, greedy=False)
        verdict = verify_drafts(drafts, p, q, gen, "stochastic")
        rows.append(torch.cat([verdict.accepted[None], verdict.correction[None], drafts]))
    table = torch.stack(rows)
    accepted, correction, drafts = table[:, 0], table[:, 1], table[:, 2:]
    for k in range(3):
        reached = accepted >= k
        committed = torch.where(accepted[reached] > k, drafts[reached, k], correction[reached])
        chi2, dof = chi_square(torch.bincount(committed, minlength=5).float(), q[k])
        assert chi2 < chi_square_bound(dof, 1e-3 / 4), f"position {k}: chi-square {chi2:.1f} on {dof} dof"
    keep = 1 - residual_mass(p, q)  # per-position acceptance probability
    expected = torch.stack([1 - keep[0], keep[0] * (1 - keep[1]), keep[0] * keep[1] * (1 - keep[2]), keep.prod()])
    chi2, dof = chi_square(torch.bincount(accepted, minlength=4).float(), expected)
    assert chi2 < chi_square_bound(dof, 1e-3 / 4), f"accepted length: chi-square {chi2:.1f} on {dof} dof"


def test_greedy_acceptance_is_exact_argmax():
    p = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
    q = torch.tensor([[0.5, 0.4, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    drafts = torch.tensor([0, 1, 2])
    verdict = verify_drafts(drafts, p, q, torch.Generator().manual_seed(0), "greedy")
    assert verdict.accepted.item() == 1
    assert verdict.correction.item() == 0
    assert torch.allclose(verdict.energy, residual_energy(torch.tensor([0.6, 0.7, 0.8]), torch.tensor([0.5, 0.3, 0.8])))
    assert torch.allclose(verdict.ratio, torch.tensor([0.5 / 0.6, 0.3 / 0.7, 1.0]))


def test_residual_energy_and_mass():
    assert residual_energy(torch.tensor([0.5]), torch.tensor([0.25])).item() == pytest.approx(math.log(2))
    p = torch.tensor([[0.5, 0.5, 0.0]])
    q = torch.tensor([[0.25, 0.25, 0.5]])
    assert residual_mass(p, q).item() == pytest.approx(0.5)


def test_top_k_and_top_p_filter_the_distribution():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    top_k = logits_to_probs(logits, SamplingConfig(temperature=1.0, top_k=2))
    assert (top_k[0, 2:] == 0).all() and top_k.sum().item() == pytest.approx(1.0)
    top_p = logits_to_probs(logits, SamplingConfig(temperature=1.0, top_p=0.5))
    assert top_p[0, 0].item() == pytest.approx(1.0)
    greedy = logits_to_probs(logits, SamplingConfig())
    assert torch.allclose(greedy, torch.softmax(logits, -1))


def test_expected_accepted_length():
    alpha = torch.tensor([1.0, 0.5, 0.5])
    assert expected_accepted_length(alpha).item() == pytest.approx(1 + 0.5 + 0.25)
    assert expected_accepted_length(torch.zeros(4)).item() == 0


def test_estimators():
    probs = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.48, 0.02, 0.0]])
    confidence = probs.max(dim=-1).values
    entropy = acceptance_estimate(probs, confidence, VerifyConfig(estimator="soft_entropy_negexp"))
    assert entropy[0].item() == pytest.approx(1.0) and entropy[1].item() == pytest.approx(math.exp(-1))
    margin = acceptance_estimate(probs, confidence, VerifyConfig(estimator="hard_margin", margin=0.05))
    assert margin.tolist() == [1.0, 0.0, 0.0]
    power = acceptance_estimate(probs, confidence, VerifyConfig(estimator="soft_confidence", confidence_power=2))
    assert power.tolist() == pytest.approx([1.0, 0.0625, 0.25])
    hard_entropy = acceptance_estimate(probs, confidence, VerifyConfig(estimator="hard_entropy_threshold",
                                                                       entropy_threshold=0.6))  # fmt: skip
    assert hard_entropy.tolist() == [1.0, 0.0, 1.0]  # normalised entropies 0, 1 and about 0.56
    linear = acceptance_estimate(probs, confidence, VerifyConfig(estimator="soft_clipped_linear_margin",
                                                                 margin_coef=10.0))  # fmt: skip
    assert linear.tolist() == pytest.approx([1.0, 0.0, 0.2])
    renyi = acceptance_estimate(probs, confidence, VerifyConfig(estimator="soft_renyi_2_entropy"))
    assert renyi.tolist() == pytest.approx([1.0, 0.25, 0.25 + 0.2304 + 0.0004])


def test_entropy_bounded_rule_takes_the_least_uncertain_within_the_budget():
    entropy = [0.3, 0.05, 0.9, 0.1, 0.0]
    # cumulative entropies in order 0, 0.05, 0.15, 0.45: three stay below the budget
    assert entropy_bounded_commits(entropy, [0, 1, 2, 3, 4], k=5, budget=0.2) == [4, 1, 3]
    assert entropy_bounded_commits(entropy, [0, 2], k=5, budget=0.2) == [0]  # at least one
    assert entropy_bounded_commits(entropy, [0, 1, 2, 3, 4], k=1, budget=10.0) == [4]  # at most k


def ctx(expected: float, n_high: int = 0, span: int = 4) -> RouteContext:
    return RouteContext(0, span, 8, 0.0, expected, n_high, 0.5)


def test_static_and_dynamic_scores():
    static = ScoreThresholdPolicy(VerifyConfig(policy="score", score="static", c=1.0, tau_score=0.0))
    assert static.decide(ctx(1.5, n_high=3)).score == pytest.approx(0.5)
    assert static.decide(ctx(0.9)).verify is False
    dynamic = ScoreThresholdPolicy(VerifyConfig(policy="score", score="dynamic", c=1.0, tau_score=0.0))
    route = dynamic.decide(ctx(2.5, n_high=3))
    assert route.score == pytest.approx(-0.5) and route.verify is False
    assert dynamic.decide(ctx(2.5, n_high=2)).verify is True


def test_hysteresis_transitions():
    policy = HysteresisPolicy(VerifyConfig(policy="hysteresis", score="static", c=0.0, tau_on=2.0, tau_off=-1.0))
    decisions = [policy.decide(ctx(s)).verify for s in (1.0, 2.0, 2.5, 0.0, -1.0, -1.5, 2.0, 3.0)]
    # starts OFF; ON only at s > 2 (strict, as in the official experiments); stays ON at s >= -1; OFF below -1
    assert decisions == [False, False, True, True, True, False, False, True]


def test_ucb_bandit_update():
    policy = UCBPolicy(VerifyConfig(policy="ucb"))
    first = policy.decide(ctx(1.0))
    assert first.verify is True  # unexplored arms tie at +inf: verify
    policy.observe(first, committed=4, forwards=2)
    bucket = first.detail["bucket"]
    assert policy.counts[1][bucket] == 1 and policy.rewards[1][bucket] == 2.0
    second = policy.decide(ctx(1.0))
    assert second.verify is False  # skip arm still unexplored
    policy.observe(second, committed=1, forwards=1)
    assert policy.rewards[0][bucket] == 1.0
    third = policy.decide(ctx(1.0))
    assert third.verify is True  # verify has the higher mean with equal bonuses
    assert policy.bucket(ctx(1.0, span=8)) != policy.bucket(ctx(1.0, span=1))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: DecodeConfig(block_length=0), "block_length"),
        (lambda: DecodeConfig(block_length=4, steps=5), "steps"),
        (lambda: DecodeConfig(threshold=1.5), "threshold"),
        (lambda: DecodeConfig(threshold=-0.1), "threshold"),
        (lambda: DecodeConfig(max_new_tokens=0), "max_new_tokens"),
        (lambda: DecodeConfig(method="beam"), "method"),
        (lambda: DecodeConfig(block_length=8, sub_block_length=3), "sub-block"),
        (lambda: DecodeConfig(edit_threshold=1.2), "edit_threshold"),
        (lambda: DecodeConfig(max_post_steps=-1), "max_post_steps"),
        (lambda: VerifyConfig(tau_on=-5, tau_off=1), "tau_on > tau_off"),
        (lambda: VerifyConfig(tau_on=1, tau_off=1), "tau_on > tau_off"),
        (lambda: VerifyConfig(policy="sometimes"), "policy"),
        (lambda: VerifyConfig(acceptance="maybe"), "acceptance"),
        (lambda: VerifyConfig(estimator="vibes"), "estimator"),
        (lambda: VerifyConfig(tau_span=0), "tau_span"),
        (lambda: preset_config("sdar-z"), "preset"),
        (lambda: SamplingConfig(top_p=0), "top_p"),
        (lambda: SamplingConfig(temperature=-1), "temperature"),
    ],
)
def test_impossible_settings_raise_clear_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_presets_mirror_the_paper():
    a = preset_config("sdar-a")
    assert (a.block_length, a.steps, a.threshold, a.verify.c, a.cache_ver, a.draft_ver) == (4, 4, 0.85, 1.0, True, True)
    b = preset_config("sdar-b", max_new_tokens=7)
    assert (b.block_length, b.verify.c, b.max_new_tokens, b.verify.estimator) == (16, 0.0, 7, "soft_entropy_negexp")
    assert DecodeConfig(method="ar", block_length=8).block_length == 1
    assert DecodeConfig.from_dict(b.to_dict()) == b
    assert make_policy(b.verify).name == "score"
