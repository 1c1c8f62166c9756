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
    token to commit at the first rejected position (meaningless when every
    draft was accepted). ``q_draft`` (the verifier's probability of each
    draft), ``ratio`` (the acceptance probability ``min(1, (q/p)^γ)``),
    ``energy`` and ``residual_mass`` are per span position, for the trace.
    ``uniform`` holds the draws ``u`` the stochastic test compared against
    the acceptance probability (``None`` when greedy) and ``residual`` the
    normalised ``(q − p)+`` at the first rejected position (all zeros where
    the residual is empty), so the trace can show why each draft was decided.
    """

    accepted: torch.Tensor
    correction: torch.Tensor
    q_draft: torch.Tensor
    ratio: torch.Tensor
    accept_probability: torch.Tensor
    energy: torch.Tensor
    residual_mass: torch.Tensor
    uniform: torch.Tensor | None
    residual: torch.Tensor


def residual_energy(p_draft: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
    """``e = log p(x) - log q(x)`` per drafted token; acceptance is ``min(1, exp(-e))``."""
    tiny = torch.finfo(p_draft.dtype).tiny
    return p_draft.clamp_min(tiny).log() - q_draft.clamp_min(tiny).log()


def residual_mass(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``Σ_v (q - p)+`` per row: the total-variation distance, i.e. the rejection
    probability of a draft drawn from ``p``."""
    return (q - p).clamp_min(0).sum(dim=-1)


def accept_probability(ratio: torch.Tensor, tempering: float = 1.0) -> torch.Tensor:
    """``min(1, (q(x)/p(x))^γ)``: the chance a draft is accepted; ``γ = 1`` is exact speculative sampling."""
    return (ratio if tempering == 1.0 else ratio.pow(tempering)).clamp_max(1.0)


def draft_ratios(drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor, tempering: float = 1.0):
    """Per draft (``drafts (...)`` over ``p, q (..., V)``): ``p(x)``, ``q(x)``, ``q/p`` and the acceptance
    probability ``min(1, (q/p)^γ)``."""
    p_x = p.gather(-1, drafts[..., None]).squeeze(-1)
    q_x = q.gather(-1, drafts[..., None]).squeeze(-1)
    ratio = q_x / p_x.clamp_min(1e-12)
    return p_x, q_x, ratio, accept_probability(ratio, tempering)


def accepts(drafts: torch.Tensor, q: torch.Tensor, probability: torch.Tensor, u: torch.Tensor | None, greedy: bool):
    """Whether each draft passes the verifier's test: greedy, iff it is ``argmax q`` (exact block-size-1
    greedy decoding); stochastic, iff ``u < min(1, (q/p)^γ)``. The one test of the engine and the SGLang plugin."""
    return drafts == q.argmax(dim=-1) if greedy else u < probability


def accepted_prefix(accept: torch.Tensor, span: torch.Tensor | None = None) -> torch.Tensor:
    """The drafts kept, along the last dimension: those before the first rejection (inside ``span`` where
    one is given; positions outside it neither count nor stop the walk)."""
    if span is None:
        return accept.long().cumprod(dim=-1).bool()
    return (accept | ~span).long().cumprod(dim=-1).bool() & span


def corrected(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """What a rejected draft is replaced from: the normalised residual ``(q − p)+``, or ``q`` itself where the
    residual is empty (``p = q``). A draft from ``p`` kept with ``min(1, q/p)``, else replaced from this, is
    distributed as ``q``."""
    residual = (q - p).clamp_min(0)
    total = residual.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(1e-30), q)


def verify_drafts(
    drafts: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator,
    mode: str,
    tempering: float = 1.0,
) -> SpanVerdict:
    """Walk a span left to right: keep the accepted prefix, correct the first rejection.

    ``stochastic`` accepts each draft with probability ``min(1, (q/p)^γ)`` and
    resamples the first rejected position from the normalised residual
    ``(q − p)+`` (``q`` itself where the residual is empty), even when the
    drafts were argmax (the paper's behaviour at temperature 0). ``greedy``
    accepts iff the draft is ``argmax q`` and corrects with ``argmax q``: exact
    block-size-1 greedy decoding. Decisions are made for every row at once and
    the prefix is found with a cumulative product; only the first rejected row
    is resampled. No host sync.
    """
    p_x, q_x, ratio, probability = draft_ratios(drafts, p, q, tempering)
    greedy = mode == "greedy"
    draws = None if greedy else uniform(drafts.shape[0], generator, drafts.device)
    accepted = accepted_prefix(accepts(drafts, q, probability, draws, greedy)).sum()
    first_rejection = accepted.clamp_max(drafts.shape[0] - 1).reshape(1)
    residual = (q - p).clamp_min(0)
    q_row = q.index_select(0, first_rejection)
    row = residual.index_select(0, first_rejection)
    normalised = row / row.sum(dim=-1, keepdim=True).clamp_min(1e-30)  # all zeros where empty: the trace's view
    if greedy:
        correction = q_row.argmax(dim=-1)
    else:
        correction = sample(corrected(p.index_select(0, first_rejection), q_row), generator, greedy=False)
    return SpanVerdict(
        accepted=accepted,
        correction=correction[0],
        q_draft=q_x,
        ratio=ratio,
        accept_probability=probability,
        energy=residual_energy(p_x, q_x),
        residual_mass=residual.sum(dim=-1),
        uniform=draws,
        residual=normalised[0],
    )
