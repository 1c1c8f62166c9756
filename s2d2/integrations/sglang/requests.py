"""Each request's seed and router state, found from the batch rows SGLang hands the algorithm.

SGLang gives a dLLM algorithm the batch's tensors, not its requests; the
request's ``sampling_seed`` and the hysteresis router's ON/OFF state (kept across
steps *and* blocks) belong to the request. SGLang shows every request to
``validate_request`` when it arrives: :data:`LIVE` keeps it (weakly, so a finished
request goes away with SGLang's own reference), and a batch row is matched to its
request by the request-pool row SGLang assigned it.
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


def unsupported_request(params) -> str | None:
    """Why S2D2 cannot honour a request's ``sampling_params`` (it applies temperature, top-p, top-k and the
    seed, nothing else), or ``None``; SGLang answers the request with this message instead of running it."""
    ignored = [
        name
        for name, used in (
            ("min_p", params.min_p > 0),
            ("frequency_penalty", params.frequency_penalty != 0),
            ("presence_penalty", params.presence_penalty != 0),
            ("repetition_penalty", params.repetition_penalty != 1),
            ("logit_bias", bool(params.logit_bias)),
            ("constrained decoding", bool(params.regex or params.json_schema or params.ebnf)),
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
    if seed is not None:
        return int(seed) & (2**63 - 1)
    return int.from_bytes(hashlib.sha256(req.rid.encode()).digest()[:8], "little") & (2**63 - 1)


class StateTable:
    """Per-request S2D2 state for one algorithm instance, keyed by the request object."""

    def __init__(self):
        self._states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def for_batch(self, pool_rows: list[int], device) -> RequestStates:
        """The states of a batch's rows (``pool_rows``: SGLang's request-pool row of each); a request
        starting a new block starts at step 0."""
        owners = {r.kv.req_pool_idx: r for r in list(LIVE) if r.kv.req_pool_idx is not None and not r.finished()}
        states = []
        for row in pool_rows:
            req = owners.get(row)
            if req is None:
                raise RuntimeError(f"no live request holds request-pool row {row}; was validate_request bypassed?")
            state = self._states.get(req)
            if state is None:
                state = self._states[req] = RequestState(seed=request_seed(req))
            if state.block_offset != req.dllm_block_offset:
                state.block_offset, state.step = req.dllm_block_offset, 0
            states.append(state)
        values = torch.tensor([[s.seed, s.step, s.on] for s in states], dtype=torch.long).to(device)
        return RequestStates(states, values[:, 0], values[:, 1], values[:, 2].bool())
