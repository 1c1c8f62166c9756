"""Speculative acceptance: accept a draft with min(1, q/p), else resample (q - p)+.

``p`` is the drafter's distribution (the block-diffusion forward), ``q`` the
verifier's (the same model at block size 1). With drafts sampled from ``p`` the
committed token is distributed exactly as ``q``: the accept-or-resample step
of speculative sampling. Residual energy reads the verifier as an energy
correction of the drafter, ``q ∝ p · exp(-E)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import sample, uniform

ACCEPTANCE_MODES = ("stochastic", "greedy")


@dataclass
class SpanVerdict:
    """Outcome of verifying a span of drafts, all tensors on the model's device.

    ``accepted`` is the length of the accepted prefix; ``correction`` is the
    token committed at the first rejected position (meaningless when every
    draft was accepted). ``q_draft`` (the verifier's probability of each draft),
    ``ratio``, ``energy`` and ``residual_mass`` are per
    span position, for the trace.
    """

    accepted: torch.Tensor
    correction: torch.Tensor
    q_draft: torch.Tensor
    ratio: torch.Tensor
    energy: torch.Tensor
    residual_mass: torch.Tensor


def residual_energy(p_draft: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
    """``e = log p(x) - log q(x)`` per drafted token; acceptance is ``min(1, exp(-e))``."""
    tiny = torch.finfo(p_draft.dtype).tiny
    return p_draft.clamp_min(tiny).log() - q_draft.clamp_min(tiny).log()


def residual_mass(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``Σ_v (q - p)+`` per row: the total-variation distance, i.e. the rejection
    probability of a draft drawn from ``p``."""
    return (q - p).clamp_min(0).sum(dim=-1)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Normalised ``(q - p)+`` per row, falling back to ``q`` where it is empty."""
    return _normalise_residual((q - p).clamp_min(0), q)


def _normalise_residual(residual: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    total = residual.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(torch.finfo(q.dtype).tiny), q)


def _accepts(drafts, p_x, q_x, q, generator, mode: str) -> torch.Tensor:
    """Per-row decisions: ``u · p(x) < q(x)`` (stochastic) or ``x == argmax q`` (greedy)."""
    if mode == "greedy":
        return drafts == q.argmax(dim=-1)
    return uniform(drafts.shape[0], generator, drafts.device) * p_x < q_x


def _gather(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return probs.gather(-1, tokens[:, None]).squeeze(-1)


def speculative_accept(
    drafts: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator,
    mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise accept decisions and replacement tokens, every row independent.

    Returns ``(accept, replacement)``: whether each row's draft passes, and the
    token to commit in its place if it does not. ``stochastic`` accepts with
    probability ``min(1, q(x)/p(x))`` and resamples from the residual, even when
    the drafts were argmax (the paper's behaviour at temperature 0); ``greedy``
    accepts iff the draft is ``argmax q`` and otherwise substitutes ``argmax q``,
    which is exact block-size-1 greedy decoding.
    """
    accept = _accepts(drafts, _gather(p, drafts), _gather(q, drafts), q, generator, mode)
    if mode == "greedy":
        return accept, q.argmax(dim=-1)
    return accept, sample(residual_distribution(p, q), generator, greedy=False)


def verify_drafts(
    drafts: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator,
    mode: str,
) -> SpanVerdict:
    """Walk a span left to right: keep the accepted prefix, correct the first rejection.

    Decisions are made for every row at once and the prefix is found with a
    cumulative product; only the first rejected row is resampled. No host sync.
    """
    p_x, q_x = _gather(p, drafts), _gather(q, drafts)
    accept = _accepts(drafts, p_x, q_x, q, generator, mode)
    accepted = accept.long().cumprod(dim=0).sum()
    first_rejection = accepted.clamp_max(drafts.shape[0] - 1).reshape(1)
    residual = (q - p).clamp_min(0)
    q_row = q.index_select(0, first_rejection)
    if mode == "greedy":
        correction = q_row.argmax(dim=-1)
    else:
        correction = sample(
            _normalise_residual(residual.index_select(0, first_rejection), q_row), generator, greedy=False
        )
    return SpanVerdict(
        accepted=accepted,
        correction=correction[0],
        q_draft=q_x,
        ratio=q_x / p_x.clamp_min(torch.finfo(p_x.dtype).tiny),
        energy=residual_energy(p_x, q_x),
        residual_mass=residual.sum(dim=-1),
    )
