"""Served traces: each finished request's S2D2 trajectory, in the engine's trace schema.

With ``trace_dir`` in the algorithm's YAML, every forward and every step of every
request is recorded as the engine records its own (:mod:`s2d2.trace`): each
position's draft and drafter probability, the verifier's ``q``, ratio, energy,
residual mass and the draw ``u`` where it looked, the outcome of each commit
(accepted, resampled, fallback, threshold), the route and the rule. A step's
records of the whole batch come to the host in one transfer, on top of the
step's own.

SGLang tells an algorithm nothing when a request finishes, so the recording is
closed where the request's output ends as SGLang ends it on token ids: at its
first stop token (its ``stop_token_ids``, the model's EOS ids and the
tokenizer's, unless ``ignore_eos``) or at ``max_new_tokens``. It is then
written, whole, as ``<trace_dir>/<request id>.json`` (the id SGLang returns in
``meta_info``), through a temporary file and a rename, so a reader never sees
half a trace. A request that ends otherwise (aborted, its client gone, a stop
string, the context full) writes none, nor do ``/health``'s probe requests.
The dashboard's Replay and ``python -m s2d2 serve-trace`` open it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX

from ... import trace as tr
from ...acceptance import draft_ratios, residual_energy, residual_mass
from ...config import DecodeConfig
from ...policies import RouteRecord
from ...rules import RULES
from ...sampling import SamplingConfig
from .batched import Verdict
from .requests import live_requests, request_seed

logger = logging.getLogger(__name__)


@dataclass
class Recording:
    """One request's trajectory so far, and what says where its output ends."""

    rid: str
    prompt_ids: list[int]
    config: DecodeConfig  # the server's settings with this request's sampling, seed and budget
    stops: set[int]
    block_size: int
    started: float
    block_offset: int = -1
    block_steps: int = 0  # steps recorded in the current block
    block_done: bool = False  # the current block is stored (a synchronous round goes on with the others)
    forwards: list[tr.ForwardRecord] = field(default_factory=list)
    step_forwards: list[int] = field(default_factory=list)  # the forwards of the step being taken
    steps: list[tr.StepRecord] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    canvas: list[float] = field(default_factory=list)  # the current block's tokens after its last step

    @property
    def block_index(self) -> int:
        """The engine's block numbering: 0 is the block holding the first generated position."""
        B = self.block_size
        return (self.block_offset - len(self.prompt_ids) // B * B) // B

    def at_block(self, offset: int) -> None:
        """The request's current block starts at ``offset``: a new one starts with no steps taken."""
        if offset != self.block_offset:
            self.block_offset, self.block_steps, self.block_done = offset, 0, False

    def forward(self, kind: str, tokens: int, seconds: float) -> None:
        index = len(self.forwards)
        self.forwards.append(tr.ForwardRecord(index, kind, tokens, seconds, self.block_index, self.block_steps))
        self.step_forwards.append(index)

    def end(self) -> tuple[list[int], str] | None:
        """``(output, stop reason)`` once the output has ended, else ``None``."""
        budget = self.config.max_new_tokens
        for i, token in enumerate(self.output[:budget]):
            if token in self.stops:
                return self.output[: i + 1], "stop_token"
        if len(self.output) >= budget:
            return self.output[:budget], "max_new_tokens"
        return None


@dataclass
class StepTensors:
    """One S2D2 step of a batch, as the algorithm computed it: ``(bs, B)`` canvases and ``(bs,)`` rows.

    ``todo`` is what was left to commit before the step, ``verdict`` the verification (``None`` when no row
    verified), ``commit`` everything the step committed and ``tokens`` what, ``ids`` the canvas after it.
    The seconds are the host's around each forward of the batch (on a GPU, where forwards run
    asynchronously, they hold the launch)."""

    todo: torch.Tensor
    drafts: torch.Tensor
    probs: torch.Tensor
    confidence: torch.Tensor
    span: torch.Tensor
    verify: torch.Tensor
    on: torch.Tensor
    verdict: Verdict | None
    u_accept: torch.Tensor | None  # drawn only when a row verified
    commit: torch.Tensor
    tokens: torch.Tensor
    ids: torch.Tensor
    k_min: torch.Tensor
    steps: torch.Tensor
    done: torch.Tensor
    draft_seconds: float
    verify_seconds: float | None

    @property
    def accepted(self) -> torch.Tensor:
        return torch.zeros_like(self.steps) if self.verdict is None else self.verdict.accepted


class ServedTraces:
    """The recordings of one server's requests, and where their traces go."""

    def __init__(self, directory: str, config, router, model_path: str, block_size: int):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config, self.router, self.model_path, self.block_size = config, router, model_path, block_size
        self.rule = RULES[config.commit_rule]
        self.recordings: dict[str, Recording] = {}
        self.failed: set[str] = set()  # requests whose recording broke: they write no trace
        self._tokenizer = None

    # -- where each row's records go ---------------------------------------

    def rows(self, rids: list[str]) -> list[Recording | None]:
        """The recording of each batch row (a new one for a request seen first; ``None`` for a row whose
        request is not live or not recorded), each at its request's current block; recordings of requests that
        have gone (aborted, disconnected) are dropped."""
        try:
            return self._rows(rids)
        except Exception:  # noqa: BLE001 - recording must never end the round (SGLang ends the server on it)
            logger.exception("S2D2 served traces: finding the batch's recordings failed; this batch writes none")
            self.failed |= set(rids)
            return [None] * len(rids)

    def _rows(self, rids: list[str]) -> list[Recording | None]:
        owners = live_requests()
        self.recordings = {rid: rec for rid, rec in self.recordings.items() if rid in owners}
        self.failed &= owners.keys()
        found = []
        for rid in rids:
            req = owners.get(rid)
            if req is None or rid in self.failed or rid.startswith(HEALTH_CHECK_RID_PREFIX):  # /health's probes
                found.append(None)
                continue
            rec = self.recordings.get(rid) or self._open(req)
            rec.at_block(req.dllm_block_offset)
            found.append(rec)
        return found

    def _open(self, req) -> Recording:
        params, tokenizer = req.sampling_params, req.tokenizer
        stops = {*(params.stop_token_ids or ()), *(req.eos_token_ids or ())}
        if tokenizer is not None:  # a server with its tokenizer also stops at the tokenizer's EOS and stop ids
            stops |= {tokenizer.eos_token_id, *(getattr(tokenizer, "additional_stop_token_ids", None) or ())}
        stops = set() if params.ignore_eos else stops - {None}
        config = self.config.replace(
            sampling=request_sampling(params, req.vocab_size),
            seed=request_seed(req),
            max_new_tokens=params.max_new_tokens,
            trace_top_k=0,
        )  # no top-k lists: 0
        rec = Recording(req.rid, list(req.origin_input_ids), config, stops, self.block_size, time.perf_counter())
        self.recordings[req.rid] = rec
        return rec

    def prefill(self, rows: list[Recording | None], tokens: list[int], seconds: float) -> None:
        """A forward of a batch with nothing to decode: prompt blocks, and blocks whose steps committed
        everything but were not stored by their verification (this forward stores them: their commit)."""
        with self._guarded(rows):
            self._prefill(rows, tokens, seconds)

    def _prefill(self, rows: list[Recording | None], tokens: list[int], seconds: float) -> None:
        for rec, n in zip(rows, tokens):
            if rec is None or rec.block_done:
                continue
            rec.forward("commit" if rec.block_steps else "prefill", n, seconds)
            if rec.block_steps:
                self._stored(rec)

    # -- one step ------------------------------------------------------------

    def step(self, rows: list[Recording | None], t: StepTensors) -> None:
        """Record one step for every row (one transfer to the host) and write the traces of requests whose
        output ended with the block this step completed."""
        with self._guarded(rows):
            self._step(rows, t)

    @contextmanager
    def _guarded(self, rows: list[Recording | None]):
        """Recording never ends the round (SGLang ends the server on any exception there): a failure is logged
        and the batch's requests write no trace; they are served as always."""
        try:
            yield
        except Exception:  # noqa: BLE001
            logger.exception("S2D2 served traces: recording failed; the requests of this batch write no trace")
            for rec in rows:
                if rec is not None:
                    self.failed.add(rec.rid)
                    self.recordings.pop(rec.rid, None)

    def _step(self, rows: list[Recording | None], t: StepTensors) -> None:
        canvas, per_row = self._columns(t), self._row_columns(t)
        host = torch.cat([torch.stack([c.double() for c in canvas]).flatten(),
                          torch.stack([c.double() for c in per_row]).flatten()]).tolist()  # fmt: skip
        bs, B = t.todo.shape
        split = len(canvas) * bs * B
        columns = [[host[(c * bs + i) * B : (c * bs + i + 1) * B] for c in range(len(canvas))] for i in range(bs)]
        rows_host = [[host[split + c * bs + i] for c in range(len(per_row))] for i in range(bs)]
        for rec, cols, row in zip(rows, columns, rows_host):
            if rec is None or rec.block_done:  # a synchronous round's other steps leave a stored block alone
                continue
            self._forwards(rec, bool(row[0]), bool(row[2]), t, B)
            if row[0]:  # had positions to commit: a step was taken
                rec.steps.append(self._step_record(rec, cols, row))
                rec.block_steps += 1
            rec.step_forwards, rec.canvas = [], cols[_IDS]
            if row[1]:  # done: the block is stored
                self._stored(rec)

    def _stored(self, rec: Recording) -> None:
        """The row's block is stored, its tokens final: they extend the output, which may end with them."""
        rec.block_done = True
        generated = max(0, len(rec.prompt_ids) - rec.block_offset)
        rec.output.extend(int(x) for x in rec.canvas[generated:])
        ended = rec.end()
        if ended is not None:
            self._write(rec, *ended)

    @staticmethod
    def _forwards(rec: Recording, stepped: bool, verified: bool, t: StepTensors, B: int) -> None:
        """The step's forwards as this row saw them: the draft forward (the storing forward of a full block: a
        commit after steps, a prefill of a block that was all prompt), and the verifier's if it verified."""
        rec.forward("draft" if stepped else "commit" if rec.block_steps else "prefill", B, t.draft_seconds)
        if verified and t.verify_seconds is not None:
            rec.forward("verify", 2 * B, t.verify_seconds)

    def _columns(self, t: StepTensors) -> list[torch.Tensor]:
        """The ``(bs, B)`` values a step's records are made of, in the order :meth:`_step_record` reads them."""
        if t.verdict is None:  # no row verified: nothing of the verifier's to record
            q_x = ratio = probability = energy = mass = u = torch.full_like(t.confidence, math.nan)
            outcome = torch.where(t.commit, 3, 0)
        else:
            v = t.verdict
            _, q_x, ratio, probability = draft_ratios(t.drafts, t.probs, v.q, self.config.verify.ratio_tempering)
            energy, mass, u = residual_energy(t.confidence, q_x), residual_mass(t.probs, v.q), t.u_accept
            outcome = torch.where(v.kept, 1, torch.where(v.commit, 2, torch.where(t.commit, 3, 0)))
        verified = t.span & t.verify[:, None]
        return [t.todo, t.drafts, t.confidence, verified, q_x, ratio, energy, mass, probability, u, outcome,
                t.tokens, t.ids]  # fmt: skip

    def _row_columns(self, t: StepTensors) -> list[torch.Tensor]:
        expected, n_high, score = self.router.estimates(t.probs, t.confidence, t.todo, t.span)
        return [t.todo.any(dim=1), t.done, t.verify, t.on, t.span.long().argmax(dim=1), t.span.sum(dim=1),
                expected, n_high, score, t.accepted, t.k_min, t.steps]  # fmt: skip

    def _step_record(self, rec: Recording, cols: list, row: list) -> tr.StepRecord:
        todo, drafts, p_x, verified, q_x, ratio, energy, mass, probability, u, outcome, tokens, _ = cols
        _, _, verify, on, span_start, span_length, expected, n_high, score, accepted, k_min, step = row
        offset = rec.block_offset - len(rec.prompt_ids)
        stochastic = self.config.verify.acceptance != "greedy"
        positions = []
        for j in range(len(todo)):
            if not todo[j]:
                continue
            pos = tr.PositionRecord(j + offset, int(drafts[j]), p_x[j])
            if verified[j]:
                pos.q, pos.ratio, pos.energy, pos.residual_mass = q_x[j], ratio[j], energy[j], mass[j]
                pos.accept_probability, pos.u = probability[j], (u[j] if stochastic else None)
            if outcome[j]:  # 1 accepted, 2 the rejection's correction, 3 the diffusion rule
                rule = tr.FALLBACK if verify else tr.THRESHOLD
                pos.outcome, pos.committed = (tr.ACCEPTED, tr.RESAMPLED, rule)[int(outcome[j]) - 1], int(tokens[j])
            positions.append(pos)
        route = self._route(bool(verify), bool(on), int(span_start), int(span_length), expected, int(n_high), score)
        rule = self.rule.record(self.config, int(k_min))
        return tr.StepRecord(rec.block_index, int(step), offset, rec.step_forwards, positions, route,
                             int(accepted) if verify else None, [], rule)  # fmt: skip

    def _route(self, verify, on, span_start, span_length, expected, n_high, score) -> RouteRecord:
        policy = self.config.verify.policy
        extra = {}
        if policy in ("score", "hysteresis"):
            extra["score"] = score if math.isfinite(score) else None
        if policy == "hysteresis":
            extra["state"] = "on" if on else "off"
        return RouteRecord(policy, verify, span_start, span_length, expected_accepted=expected, n_high=n_high,
                           **extra)  # fmt: skip

    # -- the finished trace ------------------------------------------------

    def _write(self, rec: Recording, output: list[int], stop_reason: str) -> None:
        """The request's trace, written whole (a temporary file, then a rename); the recording is closed."""
        self.recordings.pop(rec.rid, None)
        wall = time.perf_counter() - rec.started
        texts = self._token_texts({*output, *(p.token for s in rec.steps for p in s.positions)})
        trace = tr.Trace(
            method="s2d2",
            config=rec.config.to_dict(),
            model=self.model_path,
            prompt="",
            prompt_ids=rec.prompt_ids,
            output_ids=output,
            output_tokens=[texts.get(str(t), f"<{t}>") for t in output],
            text=self._decode([t for t in output if t not in rec.stops]),
            stop_reason=stop_reason,
            forwards=rec.forwards,
            steps=rec.steps,
            summary=tr.summarize(rec.forwards, rec.steps, len(output), wall),
            token_text=texts,
            exactness=rec.config.exactness().to_dict(),
        )
        path = self.directory / f"{_safe_name(rec.rid)}.json"
        partial = path.with_suffix(".json.partial")
        try:
            partial.write_text(trace.to_json(), encoding="utf-8")
            os.replace(partial, path)
        except OSError as error:  # a full disk loses the trace, never the request
            logger.warning("S2D2 could not write the trace of request %s: %s", rec.rid, error)

    def _token_texts(self, ids: set[int]) -> dict[str, str]:
        tokenizer = self._tokenizer_or_none()
        if tokenizer is None:
            return {}
        ordered = sorted(ids)
        return {str(t): tokenizer.decode([t]) for t in ordered}

    def _decode(self, ids: list[int]) -> str:
        tokenizer = self._tokenizer_or_none()
        return "" if tokenizer is None else tokenizer.decode(ids, skip_special_tokens=True)

    def _tokenizer_or_none(self):
        """The checkpoint's tokenizer for the token texts (the server itself may run without one); a trace of
        a checkpoint without one names its tokens by id."""
        if self._tokenizer is None:
            try:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            except (OSError, ValueError) as error:
                logger.warning("served traces name tokens by id: no tokenizer at %s (%s)", self.model_path, error)
                self._tokenizer = False
        return self._tokenizer or None


_IDS = 12  # the column of the canvas after the step (float64 holds every token id exactly)


def request_sampling(params, vocab: int) -> SamplingConfig:
    """The engine's sampling settings for what SGLang serves a request with: SGLang writes greedy as
    ``top_k = 1`` (temperature 0 becomes 1.0 with it) and the whole vocabulary as a ``top_k`` past it."""
    if params.top_k == 1:
        return SamplingConfig(temperature=0.0)
    top_k = params.top_k if 0 < params.top_k < vocab else 0
    return SamplingConfig(temperature=params.temperature, top_k=top_k, top_p=params.top_p)


def _safe_name(rid: str) -> str:
    """A request id as a file name (SGLang's are hex; anything else is kept to letters, digits, ``-`` and ``_``)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in rid)[:200]
