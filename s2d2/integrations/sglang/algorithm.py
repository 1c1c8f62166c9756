"""``--dllm-algorithm S2D2``: self-speculative decoding over SGLang's batch of block canvases.

Each round SGLang hands the algorithm one block canvas per request. An S2D2 step
runs over all of them at once: a **draft** forward of the canvases, **route**
(each request's router decides whether its span is worth verifying), one
**verify** forward for the batch (the "2L" layout, :mod:`.attention`),
**accept** each request's drafts left to right with ``min(1, q/p)`` (or greedily),
the first rejection resampled from ``(q − p)+``, and the diffusion rule as
**fallback**. Requests advance at their own pace; a request whose canvas is full
is done once its block is stored causally under ``cache_ver`` (so the exact
configuration is exact): by the verifier forward when the verification completed
the block with the drafts it checked, else by one more forward. Synchronous mode
repeats steps until every block of the round is done; first-done-first-out mode
(SGLang's default) takes one step per round and lets finished requests leave.

The checkpoint's own mask token is used inside the model: SGLang fills new
blocks with its per-architecture mask id, which is translated before every
forward, so a checkpoint with a small vocabulary keeps its own head.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext

import torch
from sglang.srt.dllm.algorithm.base import DllmAlgorithm
from sglang.srt.dllm.algorithm.low_confidence import LowConfidence
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

from ...rules import rule_commits
from . import batched
from .attention import MaskedAttention, causal_layers, draft_allowed, verifier_allowed, widened_batch
from .launch import launch_block_size, read_yaml
from .requests import LIVE, StateTable, malformed_request, unhonoured_request
from .settings import decode_config, trace_directory
from .tracing import ServedTraces, StepTensors

logger = logging.getLogger(__name__)

SUPPORTED = ("SDARForCausalLM", "SDARMoeForCausalLM", "LLaDA2MoeModelLM")


def own_mask_id(model_runner, default: int) -> int:
    """The checkpoint's mask token (``mask_token_id`` in its config), else SGLang's."""
    value = getattr(model_runner.model_config.hf_config, "mask_token_id", None)
    return default if value is None else int(value)


class S2D2(DllmAlgorithm):
    """S2D2 for SDAR and LLaDA2 checkpoints (position-aligned, bidirectional ``ENCODER_ONLY`` attention
    inside the block, both run through SGLang's ``RadixAttention``); the YAML is the engine's settings
    (:mod:`.settings`)."""

    supported_architectures = SUPPORTED

    def __init__(self, config):
        super().__init__(config)
        self.sglang_mask_id = config.mask_id
        self.config = decode_config(config.algorithm_config, config.block_size)
        self.router = batched.Router(self.config.verify, self.config.threshold)
        self.schedule = torch.tensor(self.config.schedule())
        self.table = StateTable()
        self.trace_dir = trace_directory(config.algorithm_config)
        self.traces: ServedTraces | None = None  # made in the first round, which knows the checkpoint
        logger.info("S2D2 in SGLang: %s", self.config.exactness().describe())

    @classmethod
    def configure_server_args(cls, server_args) -> None:
        """Refuse a bad YAML or an unsupported model before anything loads, with one line."""
        settings, model_path, device = read_yaml(server_args)
        decode_config(settings, launch_block_size(settings, model_path, SUPPORTED, device))
        trace_directory(settings)

    @classmethod
    def validate_request(cls, req):
        """Refuse what the round would fail on or not honour (:mod:`.requests`); keep the request so its rows
        can find its seed and state."""
        refusal = malformed_request(req) or unhonoured_request(req)
        if refusal is None:
            LIVE.add(req)
        return refusal

    def max_steps(self, block_size: int) -> int:
        return block_size + 1

    # -- one round ----------------------------------------------------------

    def run(self, model_runner, forward_batch, algo_states=None):
        bs, B = forward_batch.batch_size, self.block_size
        mask = own_mask_id(model_runner, self.sglang_mask_id)
        ids = forward_batch.input_ids.view(bs, B)
        prompt = self._prompt_mask(forward_batch)
        todo = ~prompt & (ids == self.sglang_mask_id)
        starts, anything = prompt.sum(dim=1), todo.any()
        host = torch.cat([starts, anything[None].long()]).tolist()
        rows = self._recordings(model_runner, forward_batch)
        if not host[-1]:
            return self._prefill(model_runner, forward_batch, rows)
        states = self.table.for_batch(forward_batch.rids, ids.device)
        sampling = batched.Sampling.from_batch(forward_batch.sampling_info, bs)
        for _ in range(1 if self.fdfo else self.max_steps(B)):
            logits, done, todo = self._step(model_runner, forward_batch, ids, todo, mask, states, sampling, rows)
            if not self.fdfo and all(done):
                break
        ids.copy_(torch.where(todo, self.sglang_mask_id, ids))
        if self.fdfo:
            accept = [B if d else 0 for d in done]
            out_states = [None if d else s for d, s in zip(done, states.states)]
            return logits, ids.tolist(), accept, out_states, False
        return logits, [ids[i, start:] for i, start in enumerate(host[:-1])], None, None, False

    def _recordings(self, model_runner, forward_batch):
        """Each row's served-trace recording (:mod:`.tracing`), or ``None`` when the YAML sets no ``trace_dir``."""
        if self.trace_dir is None:
            return None
        if self.traces is None:
            path = model_runner.model_config.model_path
            self.traces = ServedTraces(self.trace_dir, self.config, self.router, path, self.block_size)
        return self.traces.rows(forward_batch.rids)

    def _prefill(self, model_runner, forward_batch, rows):
        """Prompt blocks: one forward stores them, causally under ``cache_ver``."""
        started = time.perf_counter()
        with causal_layers(model_runner.model) if self.config.cache_ver else nullcontext():
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
        if rows is not None:
            self.traces.prefill(rows, forward_batch.extend_seq_lens_cpu, time.perf_counter() - started)
        if self.fdfo:
            bs = forward_batch.batch_size
            return (
                out.logits_output,
                forward_batch.input_ids.view(bs, -1).tolist(),
                [self.block_size] * bs,
                [None] * bs,
                False,
            )
        return out.logits_output, [], None, None, False

    def _step(self, model_runner, forward_batch, ids, todo, mask, states, sampling, rows):
        """One S2D2 step for every request: ``(draft logits output, done per request, still to commit)``.

        A request is done when its block is stored: this step's draft forward stored a block with nothing
        left to commit, or this step's verification committed the rest of the block exactly as it verified it
        (the verifier forward stored those causal rows), which spares the block a forward of its own.
        """
        cfg, B = self.config, self.block_size
        bs = ids.shape[0]
        canvas = torch.where(todo, mask, ids)
        forward_batch.input_ids.copy_(canvas.reshape(-1))
        has_todo = todo.any(dim=1)
        # Causal rows: a full block is stored causally under cache_ver; draft_ver drafts over a causal prefix.
        drafting = todo.long().argmax(dim=1) if cfg.draft_ver else torch.zeros_like(has_todo, dtype=torch.long)
        prefix = torch.where(has_todo, drafting, B if cfg.cache_ver else 0)
        started = time.perf_counter()
        out = self._masked_forward(model_runner, forward_batch, draft_allowed(prefix, B), saved_rows=B)
        seconds = [time.perf_counter() - started, None]
        logits = out.logits_output.full_logits.view(bs, B, -1)
        positions = forward_batch.positions.view(bs, B)
        probs = batched.batched_probs(logits, sampling)
        u = batched.keyed_uniform(states.seeds, positions, states.steps, batched.DRAFT)
        drafts = batched.draw(probs, sampling.greedy, u)
        confidence = probs.gather(-1, drafts[..., None]).squeeze(-1)
        span = batched.first_span(todo)
        verify, on = self.router.decide(probs, confidence, todo, span, states.on)
        commit, tokens, verified, verdict, u_accept = torch.zeros_like(todo), drafts, None, None, None
        if cfg.verify.policy == "always" or bool(verify.any()):
            u_accept = batched.keyed_uniform(states.seeds, positions, states.steps, batched.ACCEPT)
            verified = torch.where(span & verify[:, None], drafts, canvas)
            started = time.perf_counter()
            verdict = self._verify(model_runner, forward_batch, verified, probs, span & verify[:, None], mask,
                                   states, sampling, positions, u_accept)  # fmt: skip
            seconds[1] = time.perf_counter() - started
            commit, tokens = verdict.commit, torch.where(verdict.commit, verdict.tokens, drafts)
        before = todo
        candidates = todo & ~commit
        k_min = torch.minimum(self.schedule.to(ids.device)[states.steps.clamp_max(cfg.steps - 1)], todo.sum(dim=1))
        need = k_min - commit.sum(dim=1)
        commit = commit | rule_commits(confidence, candidates, need, cfg.commit_rule, cfg.threshold)
        ids.copy_(torch.where(commit, tokens, ids))
        todo = todo & ~commit
        done = ~has_todo
        if verified is not None and cfg.cache_ver:
            done = done | (~todo.any(dim=1) & (ids == verified).all(dim=1))
        if rows is not None:
            self.traces.step(rows, StepTensors(before, drafts, probs, confidence, span, verify, on, verdict, u_accept,
                                               commit, tokens, ids, k_min, states.steps, done, *seconds))  # fmt: skip
        steps = states.steps + has_todo.long()
        host = torch.stack([done.long(), steps, on.long()]).tolist()
        states.steps, states.on = steps, on
        states.store(host[1], [bool(x) for x in host[2]])
        return out.logits_output, [bool(x) for x in host[0]], todo

    def _verify(self, model_runner, forward_batch, drafted, probs, span, mask, states, sampling, positions, u_accept):
        """The verifier forward over ``[drafted block | masks]`` and each request's acceptance over its span.

        The drafted half is causal, so under ``cache_ver`` its keys and values are stored: a block that this
        verification completes with its drafts as they stand needs no forward to store it."""
        cfg, B = self.config, self.block_size
        bs = drafted.shape[0]
        wide_ids = torch.cat([drafted, torch.full_like(drafted, mask)], dim=1).reshape(-1)
        wide_positions = torch.cat([positions, positions], dim=1).reshape(-1)
        wide = widened_batch(forward_batch, wide_ids, wide_positions)
        allowed = verifier_allowed(B, drafted.device)
        out = self._masked_forward(model_runner, wide, allowed, saved_rows=B if cfg.cache_ver else 0)
        q = batched.batched_probs(out.logits_output.full_logits.view(bs, 2 * B, -1)[:, B:], sampling)
        return batched.verify_spans(
            drafted,
            probs,
            q,
            span,
            cfg.verify.acceptance == "greedy",
            u_accept,
            batched.keyed_uniform(states.seeds, positions, states.steps, batched.RESAMPLE),
            cfg.verify.ratio_tempering,
        )

    def _masked_forward(self, model_runner, forward_batch, allowed, saved_rows: int):
        """A forward whose attention inside the block is ``allowed``; each request's first ``saved_rows`` rows
        store their keys and values where SGLang keeps the block's."""
        prefix = forward_batch.extend_prefix_lens
        longest = max(forward_batch.extend_prefix_lens_cpu)
        backend = MaskedAttention(model_runner.attn_backend, allowed, prefix, longest, saved_rows)
        with forward_context(ForwardContext(attn_backend=backend)):
            return model_runner.forward(forward_batch, pp_proxy_tensors=None)


class LowConfidenceOwnMask(LowConfidence):
    """SGLang's ``LowConfidence``, unchanged, on checkpoints whose mask token is their own
    (``mask_token_id`` in config.json, e.g. an export of this project's bundled model): SGLang's mask id is
    translated before each forward, as S2D2 does, so the two are compared on the same model and head."""

    def __init__(self, config):
        super().__init__(config)
        self.sglang_mask_id = config.mask_id

    @classmethod
    def validate_request(cls, req):
        """Refuse what fails any dLLM round on this model (:func:`.requests.malformed_request`): SGLang's own
        ``LowConfidence`` checks nothing, and one token id outside the vocabulary ends the server."""
        return malformed_request(req)

    def run(self, model_runner, forward_batch, algo_states=None):
        self.mask_id = own_mask_id(model_runner, self.sglang_mask_id)
        ids = forward_batch.input_ids
        ids.masked_fill_(ids == self.sglang_mask_id, self.mask_id)
        return super().run(model_runner, forward_batch, algo_states)
