"""S2D2's per-step math over a batch of block canvases ``(bs, B)``, as tensor operations.

The engine decides one request at a time on the host (:mod:`s2d2.decode`);
inside SGLang every request of the batch takes its step at once, each at its
own pace: spans, routing, acceptance and the diffusion fallback are masks over
``(bs, B)``. The routers' rules, the acceptance estimators, ``E[K]``, the
verifier's test, the accepted prefix and the residual distribution are the
engine's own functions, called on the batch. What is still written here, as the
engine's rule applied to every row, is tested against the engine's one-request
function in ``tests/test_sglang.py``: sampling with each request's parameters,
keyed draws, the first masked span and the span bookkeeping of a verification
(the diffusion rule's commits are :func:`s2d2.rules.rule_commits`).

Random numbers are keyed, not drawn: a draw is a hash of (request seed,
absolute position, step in the block, purpose). A request's draws therefore do
not depend on which other requests share its batch, so a seeded request gives
the same output alone or in any batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...acceptance import accepted_prefix, accepts, corrected, draft_ratios
from ...policies import (
    acceptance_estimate,
    expected_accepted_length,
    hysteresis_switch,
    route_score,
    score_verifies,
    span_verifies,
)

# Purposes of a keyed draw.
DRAFT, ACCEPT, RESAMPLE = 1, 2, 3
_LOW32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding 32-bit values (products keep their low bits)."""
    x = x & _LOW32
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _LOW32
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _LOW32
    return x ^ (x >> 16)


def keyed_uniform(seeds: torch.Tensor, positions: torch.Tensor, steps: torch.Tensor, purpose: int) -> torch.Tensor:
    """U[0, 1) per ``(bs, B)`` position from its request's seed ``(bs,)``, position and step ``(bs,)``."""
    seeds = seeds.long()[:, None]
    key = _mix32((steps.long()[:, None] << 4) + purpose + (positions.long() << 12))
    key = _mix32(key ^ (seeds & _LOW32))
    key = _mix32(key ^ ((seeds >> 32) & _LOW32) ^ 0x9E3779B9)
    high = _mix32(key ^ 0x7F4A7C15)
    return ((high >> 11).double() * 2.0**32 + key.double()) / 2.0**53


def sample_rows(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs (..., V)`` by the inverse CDF at ``u (...)``; zero-probability tokens never."""
    cdf = probs.double().cumsum(dim=-1)
    target = (u * cdf[..., -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(probs.shape[-1] - 1)


@dataclass
class Sampling:
    """Each request's sampling parameters as ``(bs, 1, 1)`` tensors; greedy where SGLang says ``top_k == 1``
    (its encoding of temperature 0). ``top_k`` at or past the vocabulary is off, as the engine's 0."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor

    @classmethod
    def from_batch(cls, sampling_info, bs: int) -> Sampling:
        def column(values, dtype):
            return values.reshape(bs, 1, 1).to(dtype)

        return cls(
            column(sampling_info.temperatures, torch.float32),
            column(sampling_info.top_ks, torch.long),
            column(sampling_info.top_ps, torch.float32),
        )

    @property
    def greedy(self) -> torch.Tensor:
        return self.top_k[:, 0, 0] == 1


def batched_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """:func:`s2d2.sampling.logits_to_probs` with each request's own parameters: logits ``(bs, n, V)`` to
    float32 probabilities. Greedy rows keep the plain softmax (confidences and ratios read it); the others
    are tempered, then top-k, then top-p truncated, as the engine does."""
    logits = logits.float()
    plain = torch.softmax(logits, dim=-1)
    vocab = logits.shape[-1]
    tempered = logits / sampling.temperature
    ordered, order = torch.sort(tempered, dim=-1, descending=True)
    k = sampling.top_k.clamp(1, vocab)
    kth = ordered.gather(-1, (k - 1).expand(*ordered.shape[:-1], 1))
    cut = (sampling.top_k < vocab) & (ordered < kth)
    ordered = ordered.masked_fill(cut, float("-inf"))
    sorted_probs = torch.softmax(ordered, dim=-1)
    drop_sorted = cut | ((sorted_probs.cumsum(dim=-1) - sorted_probs >= sampling.top_p) & (sampling.top_p < 1.0))
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    probs = torch.softmax(tempered.masked_fill(drop, float("-inf")), dim=-1)
    return torch.where(sampling.greedy[:, None, None], plain, probs)


def draw(probs: torch.Tensor, greedy: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens ``(bs, n)``: argmax for greedy requests, a sample at ``u`` for the others."""
    return torch.where(greedy[:, None], probs.argmax(dim=-1), sample_rows(probs, u))


def first_span(todo: torch.Tensor) -> torch.Tensor:
    """The first contiguous run of positions still to commit in each row (:func:`s2d2.blocks.first_masked_span`)."""
    started = todo.long().cummax(dim=1).values.bool()
    return started & (todo | ~started).long().cumprod(dim=1).bool()


class Router:
    """The routing policies (:mod:`s2d2.policies`, their decision rules applied to every row at once) for a
    batch; ``on`` is each request's hysteresis state."""

    def __init__(self, verify, threshold: float):
        self.verify = verify
        self.threshold = threshold

    def decide(self, probs, confidence, todo, span, on: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(verify (bs,), hysteresis state after (bs,))``. The engine consults its policy only while the block
        has positions to commit, so a row with none (its block full, waiting for its storing forward) neither
        verifies nor changes its state."""
        v = self.verify
        length = span.sum(dim=1)
        consulted = todo.any(dim=1)
        if v.policy == "always":
            return consulted, on
        if v.policy == "min_span":
            return consulted & span_verifies(length, v), on
        _, _, score = self.estimates(probs, confidence, todo, span)
        if v.policy == "score":
            return consulted & score_verifies(score, v), on
        on = torch.where(consulted, hysteresis_switch(on, score, v), on)
        return consulted & on, on

    def estimates(self, probs, confidence, todo, span) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per row, what the routers read: the expected accepted length over the span, the count of positions
        to commit whose confidence passes the threshold, and the route score made of them."""
        bs, block, vocab = probs.shape
        alpha = acceptance_estimate(probs.reshape(-1, vocab), confidence.reshape(-1), self.verify).reshape(bs, block)
        expected = expected_accepted_length(alpha, span)
        n_high = (todo & (confidence.double() > self.threshold)).sum(dim=1)  # τ met in float64, as the engine does
        return expected, n_high, route_score(expected, n_high, span.sum(dim=1), self.verify)


@dataclass
class Verdict:
    """What a verification commits: ``commit`` marks positions, ``tokens`` holds what they take; ``kept``
    marks the accepted drafts (``accepted`` of them per row) and ``q`` is the verifier's distribution."""

    commit: torch.Tensor
    tokens: torch.Tensor
    accepted: torch.Tensor
    q: torch.Tensor
    kept: torch.Tensor


def verify_spans(drafts, p, q, span, greedy_acceptance: bool, u_accept, u_resample, tempering: float) -> Verdict:
    """:func:`s2d2.acceptance.verify_drafts` for every row at once, each over its own span, with the engine's
    test (:func:`~s2d2.acceptance.accepts`), prefix and residual: accept the drafts left to right, stop at the
    first rejection and commit there a sample of the normalised ``(q − p)+`` (``q`` where it is empty;
    ``argmax q`` when greedy), drawn at the row's keyed ``u_resample``."""
    _, _, _, probability = draft_ratios(drafts, p, q, tempering)
    kept = accepted_prefix(accepts(drafts, q, probability, u_accept, greedy_acceptance), span)
    accepted = kept.sum(dim=1)
    start = span.long().argmax(dim=1)
    index = torch.arange(span.shape[1], device=span.device)
    rejected = span & (index[None, :] == (start + accepted)[:, None])
    correction = q.argmax(dim=-1) if greedy_acceptance else sample_rows(corrected(p, q), u_resample)
    tokens = torch.where(rejected, correction, drafts)
    return Verdict(kept | rejected, tokens, accepted, q, kept)
