"""Batched decoding: many prompts per forward, each row at its own pace.

Each prompt is decoded by its own :class:`~s2d2.decode.Decoder`, the same
loop and parts as one prompt at a time, with its own block state, position
ids, random generator and trace, running in a greenlet of its own. What is
batched is the model call: a row's session (:class:`RowSession`) hands every
forward to a :class:`BatchScheduler`, which waits until each live row has
asked for one, runs them as one forward over the batch and hands each row its
logits. So batching is written once, below the decoder, and every method,
router and family batches alike.

Rows are ragged in every way S2D2 makes them: they feed different numbers of
tokens (a prefill, a draft, a verification with lookahead), keep or drop
different KV (a rejection, a discarded lookahead), stop at different steps.

- The KV of all rows lives in one ``DynamicCache``; ``valid`` says which of
  its slots hold a row's own KV. A row's crop forgets its own newest slots,
  never another row's, and the padding of a forward belongs to nobody.
- Each row's attention mask sees its own valid slots and, among the new
  positions, what its own mask allows; padding sees only itself. Positions are
  explicit per row, so rotary positions are each row's own.
- Between forwards the rows run their steps one after another, in lockstep
  and without threads: each row's decoder runs in a greenlet (a coroutine
  with its own stack), and asking for a forward switches back to the
  scheduler, which resumes the next row, and runs the round once every live
  row has asked. Nothing waits on a lock or an OS scheduler, so a busy CPU
  slows a batch only by its share of the cores (threads taking turns spent
  their hand-offs waiting for a time slice: the suite's sampled tests took
  40 s alone and up to 200 s beside another process).
- A joining prompt's prefill is much wider than the others' steps (an AR
  step feeds two tokens). When padding every row to its width would cost more
  than a forward's fixed cost, the joiners' prefills run apart on a cache of
  their own, and their KV joins the batch's cache as new slots.
- A row that finishes leaves the cache before the next forward (compaction);
  queued prompts join as places free up (at most ``batch_size`` rows live,
  a quarter of the batch joining at a time);
  when dead slots outnumber live ones the cache is packed again.

A row's trace records the forwards it took part in, so its NFE keeps its
meaning; the batch's own forward count is reported beside it
(:class:`BatchTraces`). Floating-point results of a batched forward can differ
from a single row's in the last bits, which can flip a near-tie; otherwise
row ``i`` decodes exactly as ``generate(model, prompts[i], config.replace(seed=seeds[i]))``.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from greenlet import getcurrent, greenlet
from transformers import DynamicCache

from .config import DecodeConfig
from .decode import DecodeCancelled, Decoder, check_prompt, encode_prompt
from .models.base import BlockDiffusionModel, ForwardRecorder, KVSession
from .trace import Trace

SLACK_SLOTS = 64  # dead slots tolerated beyond the live ones before the cache is packed
# What a forward's fixed cost is worth in positions computed: the cost model's a / b on the 2-core CPU
# (9.8 ms / 0.097 ms, python -m s2d2.study.throughput). Joining prompts' prefills run apart from the rest of a
# round only when that saves more padding than this.
SPLIT_POSITIONS = 100


@dataclass
class _Request:
    """One row's forward: its new tokens, their positions, which new position sees which, logits wanted."""

    ids: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    keep_logits: int


class BatchTraces(list):
    """The rows' traces in prompt order, with what the batch itself spent."""

    def __init__(self, traces: list[Trace], forwards: int, tokens: int, wall_seconds: float, batch_size: int):
        super().__init__(traces)
        self.forwards = forwards  # batched forwards: each one served every live row
        self.tokens = tokens  # token positions those forwards computed, padding included
        self.wall_seconds = wall_seconds
        self.batch_size = batch_size


class _RowCache:
    """The part of the batch's cache one row owns: as much of ``DynamicCache`` as the adapters call."""

    def __init__(self, scheduler: BatchScheduler, row: int):
        self.scheduler, self.row = scheduler, row

    def crop(self, length: int) -> None:
        if length >= 0:
            raise ValueError("a batched row's cache is only ever cropped from its end (a negative length)")
        self.scheduler.forget(self.row, -length)


@dataclass
class RowSession(KVSession):
    """A KV session whose forwards are served by a batch."""

    scheduler: BatchScheduler | None = None
    row: int = -1

    def forward(self, model, kind, ids, positions, allowed, keep_logits) -> torch.Tensor:
        logits, seconds = self.scheduler.submit(self.row, _Request(ids, positions, allowed, keep_logits))
        self.record(kind, ids.shape[0], seconds)
        return logits


class BatchScheduler:
    """Runs the rows' decoders and serves their forwards, one batched forward per round."""

    def __init__(self, model: BlockDiffusionModel, split_positions: int = SPLIT_POSITIONS):
        self.model = model
        self.split_positions = split_positions
        self.cache = DynamicCache(config=model.model.config)
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=model.device)  # (cache rows, slots)
        self.slots: list[int] = []  # the row each cache row holds
        # The rows' parked forwards and their answers; rows park by switching to ``hub``, the greenlet that
        # runs ``run``'s loop, which resumes them in turn.
        self.pending: dict[int, _Request] = {}
        self.results: dict[int, tuple[torch.Tensor, float] | BaseException] = {}
        self.rows: dict[int, greenlet] = {}
        self.hub: greenlet | None = None
        self.live: set[int] = set()
        self.forwards = 0
        self.tokens = 0  # positions computed, padding included: a batched forward costs rows × widest row

    # -- the rows' side ---------------------------------------------------

    def new_session(self, row: int) -> Callable[[ForwardRecorder], KVSession]:
        return lambda record: RowSession(cache=_RowCache(self, row), record=record, scheduler=self, row=row)

    def submit(self, row: int, request: _Request) -> tuple[torch.Tensor, float]:
        """Park this row's forward until the round that serves it; returns its logits and the forward's seconds."""
        self.pending[row] = request
        self.hub.switch()
        result = self.results.pop(row)
        if isinstance(result, BaseException):
            raise result
        return result

    def forget(self, row: int, count: int) -> None:
        """Drop a row's newest ``count`` slots (a crop): they stay in the cache, seen by nobody."""
        with torch.inference_mode():
            index = self.slots.index(row)
            owned = self.valid[index].nonzero().flatten()
            self.valid[index, owned[len(owned) - count :]] = False

    # -- the loop ---------------------------------------------------------

    def run(self, jobs: Sequence[Callable[[Callable[[ForwardRecorder], KVSession]], Trace]], batch_size: int):
        """Run ``jobs`` (each decodes one row, given its session factory) with at most ``batch_size`` live.

        Returns ``(traces, errors)`` by row.
        """
        queue = deque(range(len(jobs)))
        traces: dict[int, Trace] = {}
        errors: dict[int, BaseException] = {}
        self.hub = getcurrent()

        def row_main(row: int) -> None:
            try:
                traces[row] = jobs[row](self.new_session(row))
            except BaseException as err:  # noqa: BLE001 - handed to the caller, which raises it
                errors[row] = err
            finally:
                self.live.discard(row)

        # Prompts join a few at a time: a joining row's prefill either pads the whole round to its width or
        # costs a forward of its own (``_round``), so letting a quarter of the batch free up first shares
        # that cost among several joiners.
        refill = max(1, batch_size // 4)

        def may_join() -> bool:
            return bool(queue) and (batch_size - len(self.live) >= min(refill, len(queue)) or not self.live)

        turns: list[int] = []  # rows to resume, in order, before the next round: each runs until it parks or ends
        while True:
            joining = may_join()
            while joining and queue and len(self.live) < batch_size:
                row = queue.popleft()
                self._join(row)
                self.live.add(row)
                self.rows[row] = greenlet(partial(row_main, row))
                turns.append(row)
            for row in turns:
                self.rows[row].switch()
            if may_join():
                turns = []
                continue  # rows left: let the next prompts join this round
            if not self.live:
                break
            turns = self._round()
        return traces, errors

    def _round(self) -> list[int]:
        """One round of forwards serving every live row (all of which have parked a forward); returns the rows served.

        Usually one forward over the batch. When rows that have no KV yet (a joining prompt's prefill) are
        so much wider than the rest that padding everyone to their width costs more than a forward's fixed
        cost, they run apart first, on a cache of their own, and their KV joins the batch's.
        """
        with torch.inference_mode():
            self._drop_finished()
            rows = list(self.slots)
            requests = [self.pending.pop(row) for row in rows]
            try:
                fresh = self._fresh_to_split(requests)
                if fresh:
                    self._serve(rows, fresh, lambda: self._prefill_apart([requests[i] for i in fresh], fresh))
                    requests = [None if i in fresh else r for i, r in enumerate(requests)]
                others = [i for i, r in enumerate(requests) if r is not None]
                self._serve(rows, others, lambda: self._forward(requests, others))
            except BaseException as err:  # noqa: BLE001 - every row of the failed round raises it
                for row in rows:
                    self.results[row] = err
            self._pack_if_sparse()
        return rows

    def _serve(self, rows: list[int], served: list[int], forward: Callable[[], list[torch.Tensor]]) -> None:
        """Run one ``forward`` and hand each of the ``served`` rows (indices into ``rows``) its logits and the
        forward's seconds."""
        start = time.perf_counter()
        logits = forward()
        if self.model.device.type == "cuda":
            torch.cuda.synchronize(self.model.device)
        seconds = time.perf_counter() - start
        for i, rows_logits in zip(served, logits):
            self.results[rows[i]] = (rows_logits, seconds)
        self.forwards += 1

    def _fresh_to_split(self, requests: list[_Request]) -> list[int]:
        """The rows without KV yet, if running them apart saves more positions than a forward's fixed cost."""
        counts = self.valid.sum(dim=1).tolist()
        fresh = [i for i, count in enumerate(counts) if count == 0]
        if not fresh or len(fresh) == len(requests):
            return []
        widths = [r.ids.shape[0] for r in requests]
        rest = max(w for i, w in enumerate(widths) if i not in fresh)
        together = len(requests) * max(widths)
        apart = len(fresh) * max(widths[i] for i in fresh) + len(requests) * rest
        return fresh if together - apart > self.split_positions else []

    def _inputs(self, requests: list, cached: torch.Tensor):
        """Padded ids, positions and additive attention mask of one forward; ``None`` requests feed nothing.

        ``cached`` says which cache slots each row may see."""
        device, dtype = self.model.device, self.model.dtype
        lengths = [0 if r is None else r.ids.shape[0] for r in requests]
        n, width, slots = len(requests), max(lengths), cached.shape[1]
        self.tokens += n * width
        ids = torch.zeros(n, width, dtype=torch.long, device=device)
        positions = torch.zeros(n, width, dtype=torch.long, device=device)
        sees_new = torch.eye(width, dtype=torch.bool, device=device).repeat(n, 1, 1)  # padding sees itself
        for b, (r, length) in enumerate(zip(requests, lengths)):
            if r is not None:
                ids[b, :length] = r.ids
                positions[b, :length] = r.positions
                sees_new[b, :length, :length] = r.allowed
        sees = torch.cat([cached[:, None, :].expand(n, width, slots), sees_new], dim=2)
        mask = torch.zeros(n, 1, width, slots + width, dtype=dtype, device=device)
        mask.masked_fill_(~sees[:, None], torch.finfo(dtype).min)
        fed = torch.arange(width, device=device)[None] < torch.tensor(lengths, device=device)[:, None]
        return ids, positions, mask, lengths, fed

    def _run_model(self, requests: list, cached: torch.Tensor, cache: DynamicCache, served: list[int]):
        """One forward over ``requests`` with ``cache``; returns the served rows' logits and which slots it fed."""
        ids, positions, mask, lengths, fed = self._inputs(requests, cached)
        width = ids.shape[1]
        # Logits from the first position any served row wants to the end of the widest row.
        wanted = {b: lengths[b] - (requests[b].keep_logits or lengths[b]) for b in served}
        first = min(wanted.values())
        out = self.model.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=width - first,
        )
        return [out.logits[b, wanted[b] - first : lengths[b] - first] for b in served], fed

    def _forward(self, requests: list, served: list[int]) -> list[torch.Tensor]:
        """One forward over the whole batch's cache."""
        logits, fed = self._run_model(requests, self.valid, self.cache, served)
        self.valid = torch.cat([self.valid, fed], dim=1)
        return logits

    def _prefill_apart(self, requests: list[_Request], fresh: list[int]) -> list[torch.Tensor]:
        """The ``fresh`` rows' first forward on a cache of their own; their KV then joins the batch's as new
        slots (the other rows' copies of those slots are zeros, valid for nobody)."""
        own = DynamicCache(config=self.model.model.config)
        none = self.valid.new_zeros(len(fresh), 0)
        logits, fed = self._run_model(requests, none, own, list(range(len(fresh))))
        index = torch.tensor(fresh, dtype=torch.long, device=self.valid.device)
        for layer, new in zip(self._layers(), self._layers(own)):
            for name in ("keys", "values"):
                part = getattr(new, name)
                slots = part.new_zeros(getattr(layer, name).shape[0], *part.shape[1:])
                slots[index] = part
                setattr(layer, name, torch.cat([getattr(layer, name), slots], dim=2))
        joined = self.valid.new_zeros(self.valid.shape[0], fed.shape[1])
        joined[index] = fed
        self.valid = torch.cat([self.valid, joined], dim=1)
        return logits

    # -- the cache's rows and slots -----------------------------------------

    def _layers(self, cache: DynamicCache | None = None) -> list:
        cache = self.cache if cache is None else cache
        return [layer for layer in cache.layers if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4]

    def _join(self, row: int) -> None:
        """A new row: a cache row with no slots of its own."""
        with torch.inference_mode():
            self.slots.append(row)
            self.valid = torch.cat([self.valid, self.valid.new_zeros(1, self.valid.shape[1])])
            for layer in self._layers():
                layer.keys = torch.cat([layer.keys, layer.keys.new_zeros(1, *layer.keys.shape[1:])])
                layer.values = torch.cat([layer.values, layer.values.new_zeros(1, *layer.values.shape[1:])])

    def _drop_finished(self) -> None:
        """Rows whose decode ended leave the cache, so they cost the next forwards nothing."""
        keep = [i for i, row in enumerate(self.slots) if row in self.live]
        if len(keep) == len(self.slots):
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.valid.device)
        self.slots = [self.slots[i] for i in keep]
        self.valid = self.valid[index]
        for layer in self._layers():
            layer.keys, layer.values = layer.keys[index], layer.values[index]

    def _pack_if_sparse(self) -> None:
        """Move every row's valid slots to the front when dead slots dominate (attention reads them all)."""
        counts = self.valid.sum(dim=1)
        longest = int(counts.max()) if len(counts) else 0
        if self.valid.shape[1] <= 2 * longest + SLACK_SLOTS:
            return
        order = torch.sort((~self.valid).to(torch.uint8), dim=1, stable=True).indices[:, :longest]
        for layer in self._layers():
            index = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys, layer.values = layer.keys.gather(2, index), layer.values.gather(2, index)
        self.valid = torch.arange(longest, device=self.valid.device)[None] < counts[:, None]


def generate_batch(
    model: BlockDiffusionModel,
    prompts: Sequence[str | list[int]],
    config: DecodeConfig,
    seeds: Sequence[int] | None = None,
    batch_size: int | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BatchTraces:
    """Decode every prompt with ``config``, many rows per forward; returns one trace per prompt, in order.

    Row ``i`` uses ``config.replace(seed=seeds[i])`` (every row ``config.seed``
    without ``seeds``). At most ``batch_size`` rows decode at once (all of them
    by default); a finished row's place goes to the next prompt. Every prompt
    is checked before any forward runs.
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts to decode")
    seeds = [config.seed] * len(prompts) if seeds is None else list(seeds)
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    size = len(prompts) if batch_size is None else int(batch_size)
    if size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    encoded = [encode_prompt(model, prompt) for prompt in prompts]
    for ids, _ in encoded:
        check_prompt(model, config, ids)
    configs = [config.replace(seed=int(seed)) for seed in seeds]

    def job(row: int) -> Callable[[Callable[[ForwardRecorder], KVSession]], Trace]:
        return lambda new_session: Decoder(model, configs[row], should_stop, new_session=new_session).run(*encoded[row])

    scheduler = BatchScheduler(model)
    start = time.perf_counter()
    traces, errors = scheduler.run([job(row) for row in range(len(prompts))], size)
    wall = time.perf_counter() - start
    if errors:
        cancelled = [err for err in errors.values() if isinstance(err, DecodeCancelled)]
        raise cancelled[0] if cancelled else errors[min(errors)]
    ordered = [traces[row] for row in range(len(prompts))]
    return BatchTraces(ordered, scheduler.forwards, scheduler.tokens, wall, size)


def available_memory(device: torch.device) -> int:
    """Bytes free for a batch on ``device``: the accelerator's free memory, or the host's available RAM."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def auto_batch_size(model: BlockDiffusionModel, config: DecodeConfig, positions: int, limit: int = 64) -> int:
    """The largest power of two up to ``limit`` whose rows fit in half of the free memory.

    A row holds the KV of ``positions`` positions (twice over, for the dead
    slots tolerated before the cache is packed), the float32 logits and
    probabilities of a verification with lookahead (three blocks of rows) and
    that forward's widest activations.
    """
    c = model.model.config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    itemsize = torch.finfo(model.dtype).bits // 8
    kv = 2 * c.num_hidden_layers * getattr(c, "num_key_value_heads", heads) * head_dim * itemsize * 2 * positions
    width = 3 * config.block_length
    logits = 2 * width * model.vocab_size * 4
    activations = 4 * width * max(c.hidden_size, getattr(c, "intermediate_size", 0) or 0) * itemsize
    fits = available_memory(model.device) // 2 // (kv + logits + activations)
    size = 1
    while size * 2 <= min(limit, fits):
        size *= 2
    return size
