"""The diffusion commit rules: which drafted positions a step commits without verification.

Each rule is a small function of one draft and the candidate positions,
registered in :data:`RULES` with the settings it commits by (what a step
records of it); the config's choices (:data:`COMMIT_RULES`) are derived from
it. The baselines commit with them, and S2D2 falls back to them for whatever
its verifier left (or when its router skips verification).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .sampling import normalized_entropy


def rule_commits(
    confidence: torch.Tensor, candidates: torch.Tensor, need: torch.Tensor, rule: str, threshold: float
) -> torch.Tensor:
    """What the static or dynamic diffusion rule commits, for rows of drafts ``(bs, B)``: ``need (bs,)``
    positions among each row's ``candidates``.

    ``static`` takes the ``need`` most confident (ties to the left); ``dynamic`` takes every candidate whose
    confidence exceeds ``threshold`` if there are at least ``need`` of them, else the ``need`` most
    confident (SDAR's ``low_confidence_dynamic``). Rows with ``need ≤ 0`` commit nothing. Confidences meet
    τ in float64, as Python numbers do. One function for a decode's step (a batch of one) and the SGLang
    plugin's batch.
    """
    score = confidence.masked_fill(~candidates, float("-inf"))
    order = torch.sort(score, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(
        1, order, torch.arange(score.shape[1], device=score.device).expand_as(order)
    )
    top = candidates & (rank < need[:, None])
    if rule == "dynamic":
        confident = candidates & (confidence.double() > threshold)
        top = torch.where((confident.sum(dim=1) >= need)[:, None], confident, top)
    return top & (need > 0)[:, None]


def _one_step(draft, candidates: list[int], k: int, rule: str, threshold: float) -> list[int]:
    """:func:`rule_commits` for one decode's step: its host confidences, a batch of one."""
    size = len(draft.confidence_host)
    mask = torch.zeros(1, size, dtype=torch.bool)
    mask[0, candidates] = True
    confidence = torch.tensor([draft.confidence_host], dtype=torch.float64)
    return rule_commits(confidence, mask, torch.tensor([k]), rule, threshold)[0].nonzero().flatten().tolist()


def entropy_bounded_commits(entropy: list[float], candidates: list[int], k: int, budget: float) -> list[int]:
    """SDAR's ``entropy_bounded`` rule: the least uncertain drafts first, as many
    as fit in the entropy ``budget`` (at least one, at most ``k``)."""
    ordered = sorted(candidates, key=lambda i: entropy[i])
    total, fits = 0.0, 0
    for i in ordered:
        total += entropy[i]
        if total >= budget:
            break
        fits += 1
    return ordered[: max(1, min(fits, k))]


def static_rule(draft, candidates: list[int], k: int, config) -> list[int]:
    """The ``k`` most confident drafts (SDAR's static schedule)."""
    return _one_step(draft, candidates, k, "static", config.threshold)


def dynamic_rule(draft, candidates: list[int], k: int, config) -> list[int]:
    """Every draft above τ, or the ``k`` most confident when fewer clear it."""
    return _one_step(draft, candidates, k, "dynamic", config.threshold)


def entropy_bounded_rule(draft, candidates: list[int], k: int, config) -> list[int]:
    """The least uncertain drafts while their entropies (in nats) fit the budget."""
    entropy = (normalized_entropy(draft.probs) * math.log(draft.probs.shape[-1])).tolist()
    return entropy_bounded_commits(entropy, candidates, k, config.eb_threshold)


@dataclass(frozen=True)
class CommitRule:
    """A diffusion rule and the settings it commits by.

    ``choose`` is ``(draft, candidate positions, minimum commits, DecodeConfig) -> positions to commit``;
    ``records`` maps each key a step records of the rule to the :class:`~s2d2.config.DecodeConfig` field
    behind it, so a commit can be read against its threshold without the loop naming the rule.
    """

    name: str
    choose: Callable
    records: tuple[tuple[str, str], ...] = ()

    def record(self, config, minimum: int) -> dict:
        """The rule as it stands at one step: ``{"rule", "minimum"}`` plus the settings it commits by."""
        return {"rule": self.name, "minimum": minimum, **{key: getattr(config, name) for key, name in self.records}}

    def fill(self, draft, candidates: list[bool], commits: dict, k: int, outcome: str, config) -> dict:
        """``commits`` plus what the rule commits among the candidates left, until ``k`` are committed in all."""
        left = [i for i, c in enumerate(candidates) if c and i not in commits]
        need = k - len(commits)
        if need <= 0 or not left:
            return commits
        chosen = self.choose(draft, left, need, config)
        return {**commits, **{i: (draft.tokens_host[i], outcome) for i in chosen}}


RULES: dict[str, CommitRule] = {
    rule.name: rule
    for rule in (
        CommitRule("static", static_rule),
        CommitRule("dynamic", dynamic_rule, (("threshold", "threshold"),)),
        CommitRule("entropy_bounded", entropy_bounded_rule, (("budget", "eb_threshold"),)),
    )
}
COMMIT_RULES = tuple(RULES)
