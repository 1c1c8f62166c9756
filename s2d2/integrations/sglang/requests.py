"""Each request's seed and router state, found from the batch rows SGLang hands the algorithm.

SGLang gives a dLLM algorithm the batch's tensors, not its requests; the
request's ``sampling_seed`` and the hysteresis router's ON/OFF state (kept across
steps *and* blocks) belong to the request. SGLang shows every request to
``validate_request`` when it arrives: what S2D2 cannot serve is refused there
(:func:`malformed_request`, :func:`unhonoured_request`), the rest is kept in
:data:`LIVE` (weakly, so a finished request goes away with SGLang's own
reference), and a batch row is matched to its request by its request id.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass

import torch

LIVE: weakref.WeakSet = weakref.WeakSet()


@dataclass
class RequestState:
    """What S2D2 keeps for one request: its seed, where its current block starts, the steps taken in it
    and the hysteresis router's state."""

    seed: int
    block_offset: int = -1
    step: int = 0
    on: bool = False


@dataclass
class RequestStates:
    """The states of a batch's rows, with the per-row values the step reads as tensors."""

    states: list[RequestState]
    seeds: torch.Tensor
    steps: torch.Tensor
    on: torch.Tensor

    def store(self, steps: list[int], on: list[bool]) -> None:
        """Write the step's results back to the requests (from the round's one transfer to the host)."""
        for state, step, switch in zip(self.states, steps, on):
            state.step, state.on = step, switch


def malformed_request(req) -> str | None:
    """Why no dLLM round can serve ``req`` on this model, or ``None``: a token id outside the embedding fails
    the whole batch's forward, and SGLang ends the server on any exception inside the round. Both of the
    plugin's algorithms refuse it here, where SGLang answers one request and nothing else is affected."""
    vocab, ids = req.vocab_size, req.origin_input_ids
    if len(ids) == 0:
        return "input_ids is empty: send at least one token id"
    outside = next((t for t in (min(ids), max(ids)) if not 0 <= t < vocab), None)
    if outside is not None:
        return f"input_ids holds {outside}, outside the model's vocabulary [0, {vocab})"
    stops = sorted(t for t in req.sampling_params.stop_token_ids or () if not 0 <= t < vocab)
    if stops:
        return f"stop_token_ids holds {stops[0]}, outside the model's vocabulary [0, {vocab}): no output token can match it"
    return None


def unhonoured_request(req) -> str | None:
    """Why S2D2 cannot honour ``req`` as asked, or ``None``: it applies temperature, top-p, top-k and the seed,
    draws one sample, and returns token ids only."""
    params = req.sampling_params
    if params.n != 1:
        return (
            f"n={params.n}: S2D2 serves one sample per request; send {params.n} requests, each with its own "
            "sampling_seed"
        )
    if req.return_logprob or req.logprob.top_logprobs_num or req.logprob.token_ids_logprob:
        return "S2D2 returns token ids only: return_logprob, top_logprobs_num and token_ids_logprob are not computed"
    ignored = [
        name
        for name, used in (
            ("min_p", params.min_p > 0),
            ("min_new_tokens", params.min_new_tokens > 0),
            ("frequency_penalty", params.frequency_penalty != 0),
            ("presence_penalty", params.presence_penalty != 0),
            ("repetition_penalty", params.repetition_penalty != 1),
            ("logit_bias", bool(params.logit_bias)),
            ("constrained decoding", bool(params.regex or params.json_schema or params.ebnf or params.structural_tag)),
            ("custom_logit_processor", bool(req.custom_logit_processor)),
        )
        if used
    ]
    return (
        f"S2D2 does not apply {', '.join(ignored)}; send only temperature, top_p, top_k, sampling_seed"
        if ignored
        else None
    )


def request_seed(req) -> int:
    """The request's ``sampling_seed``, else a hash of its id (unseeded requests differ from each other)."""
    seed = req.sampling_params.sampling_seed
    return int(seed) & (2**63 - 1) if seed is not None else rid_seed(req.rid)


def rid_seed(rid: str) -> int:
    """A seed from a request id."""
    return int.from_bytes(hashlib.sha256(rid.encode()).digest()[:8], "little") & (2**63 - 1)


def live_requests() -> dict:
    """The requests SGLang has admitted and not finished, by request id."""
    return {r.rid: r for r in list(LIVE) if not r.finished()}


class StateTable:
    """Per-request S2D2 state for one algorithm instance, keyed by the request object."""

    def __init__(self):
        self._states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def for_batch(self, rids: list[str], device) -> RequestStates:
        """The states of a batch's rows (``rids``: SGLang's request id of each); a request starting a new block
        starts at step 0. SGLang shows every request to ``validate_request`` before it runs, so each row finds
        its request in :data:`LIVE`; a row that did not (no SGLang path skips it) is not failed but decoded
        with a state of its own for this round, seeded from its id, as an unseeded request is."""
        owners = live_requests()
        states = [self._state(owners[rid]) if rid in owners else RequestState(seed=rid_seed(rid)) for rid in rids]
        values = torch.tensor([[s.seed, s.step, s.on] for s in states], dtype=torch.long).to(device)
        return RequestStates(states, values[:, 0], values[:, 1], values[:, 2].bool())

    def _state(self, req) -> RequestState:
        state = self._states.get(req)
        if state is None:
            state = self._states[req] = RequestState(seed=request_seed(req))
        if state.block_offset != req.dllm_block_offset:
            state.block_offset, state.step = req.dllm_block_offset, 0
        return state
