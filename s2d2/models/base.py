"""The one interface every model family implements, and the KV session it works on.

A decoder sees a block-diffusion model only through four forwards
(docs/ALGORITHM.md):

- ``prefill``: store the prompt's KV;
- ``draft_forward``: denoise the current block (KV not stored), optionally
  fused with the commit of the block just finished (its KV stored);
- ``verify_span``: the block-size-1 (autoregressive) distributions of a span of
  drafted positions;
- ``commit_forward``: store a finished block's KV on its own (only used when the
  commit is not fused, to reproduce the paper's accounting).

Logits always come back *aligned with block positions* (row ``i`` predicts the
token at block position ``i``): a family whose logits are shifted by one hides
that inside its adapter, so the decoders never know which family they drive.

Every family runs through a stock transformers class, and the mechanics of
that (explicit additive 4D masks, explicit positions, a ``DynamicCache`` that
is cropped after a forward whose KV must not stay) live here, together with
the prefill and the unfused commit, which are the same for all families.
Adapters differ in how they draft and verify, in how they recognise and convert
their checkpoints (:meth:`BlockDiffusionModel.matches`,
:meth:`BlockDiffusionModel.stock_config`), and in a few decoding conventions of
their official code, declared as class attributes.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .. import masks, trace

ForwardRecorder = Callable[[str, int, float], None]


@dataclass(frozen=True)
class OfficialConventions:
    """How a family's official code spends forwards, stops and sizes its output.

    Used under ``accounting="official"`` only (docs/ALGORITHM.md lists them):

    - ``commit_stop_block`` / ``commit_last_block``: whether a commit forward
      stores the block holding the stop token / the last block of the budget;
    - ``stop_at_block_end``: stop tokens are looked for only in complete blocks;
    - ``budget``: ``whole_blocks`` decodes up to the end of the block holding
      the last budget position and keeps it all (SDAR), ``whole_blocks_trimmed``
      decodes the same but cuts the output to the budget (LLaDA2),
      ``floor_blocks`` decodes ``max_new_tokens // B`` blocks (Fast-dLLM v2);
    - ``draft_ver_rows_in_commit``: the causal rows ``draft_ver`` set while
      drafting stay causal in the block's commit when ``cache_ver`` is off
      (SDAR edits its mask in place);
    - ``block_cache``: the official script drafts against a cache of the
      block's own KV (Fast-dLLM v2's ``use_block_cache``), which the setting
      of that name turns off;
    - ``appends_next_token``: the last block's commit forward predicts one more
      token, and the official code appends it to the output (Fast-dLLM v2).
    """

    commit_stop_block: bool = True
    commit_last_block: bool = True
    stop_at_block_end: bool = True
    budget: str = "whole_blocks"
    draft_ver_rows_in_commit: bool = True
    block_cache: bool = False
    appends_next_token: bool = False

    def positions(self, prompt_length: int, block_length: int, max_new_tokens: int) -> tuple[int, int | None]:
        """``(positions to decode up to, cap on the output length)``: whole blocks, as the official codes decode."""
        if self.budget == "floor_blocks":
            return prompt_length // block_length * block_length + max_new_tokens // block_length * block_length, None
        whole = -(-(prompt_length + max_new_tokens) // block_length) * block_length
        return whole, max_new_tokens if self.budget == "whole_blocks_trimmed" else None

    def stores(self, stopped: bool, last: bool) -> bool:
        """Whether the official code spends a commit forward on a finished block."""
        return (self.commit_stop_block or not stopped) and (self.commit_last_block or not last)


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' loading chatter (progress bars, the expected
    "model of type sdar" notice) while a checkpoint loads into a stock class."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        logging.enable_progress_bar()


@dataclass
class KVSession:
    """Per-generation state: the KV cache and what it holds.

    Sessions are independent, so two users decoding with the same loaded model
    never share state. ``stored`` is the number of positions whose KV the cache
    holds; the current block always starts right after them (or, while a commit
    is pending, right after the pending block). ``record`` is called once per
    model call, so a trace's forward count cannot drift from the truth.
    """

    cache: object
    record: ForwardRecorder
    stored: int = 0
    block_start: int | None = None  # absolute position of the current block's first token; None: right after the cache
    next_row: torch.Tensor | None = None  # right-shifted families: the row predicting the next block's first token
    window: tuple[int, int] | None = None  # block positions of the sub-block being drafted
    block_cache: BlockCache | None = None  # Fast-dLLM v2's official block cache, when the run uses it

    def forward(
        self,
        model: BlockDiffusionModel,
        kind: str,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        keep_logits: int,
    ) -> torch.Tensor:
        """One call of ``model`` over ``ids`` after this session's cache; ``allowed`` says which of the new
        positions sees which (the cache is always visible). Returns the last ``keep_logits`` logit rows.

        A batched session (:mod:`s2d2.batch`) answers the same call from one forward over many rows.
        """
        mask = masks.additive_mask(allowed, self.stored, model.dtype)

        def call() -> torch.Tensor:
            out = model.model(
                input_ids=ids[None],
                attention_mask=mask,
                position_ids=positions[None],
                cache=self.cache,
                use_cache=True,
                logits_to_keep=keep_logits,
            )
            return out.logits[0]

        return model.timed_call(self, kind, ids.shape[0], call)

    @property
    def cached_in_block(self) -> int:
        """Positions of the current block whose KV is already stored (incremental causal KV)."""
        return 0 if self.block_start is None else max(0, self.stored - self.block_start)


@dataclass
class BlockCache:
    """The KV of the current block's own positions that Fast-dLLM v2's official script drafts against.

    Its first draft of a block stores the whole block's KV here; each later
    draft feeds one sub-block, attends to the stored prefix and to this
    block KV with the sub-block's rows replaced by its own, and writes them
    back. The other rows are whatever an earlier draft left there: the
    block's first draft for later sub-blocks, the last draft for earlier ones.
    ``layers`` is ``None`` until the block's first draft.
    """

    block_start: int | None = None
    layers: list[tuple[torch.Tensor, torch.Tensor]] | None = None


@dataclass(frozen=True)
class Lookahead:
    """What a verification also carries, for the case that it accepts every draft to the end of its window.

    ``start`` and ``count`` are the block positions of the next draft's masks
    (the next block's are ``B .. 2B − 1``; ``count`` 0 carries no draft).
    ``commit`` says how the finished block gets stored: ``"none"`` (the window
    ends inside the block), ``"first_half"`` (under ``cache_ver`` the verifier's
    causal first half is exactly the commit) or ``"rows"`` (extra rows laid out
    as the bidirectional commit).
    """

    start: int
    count: int
    commit: str


@dataclass
class Verified:
    """A verifier forward whose KV waits in the cache until the decoder knows what was accepted.

    The rows it appended are ``[commit rows | first half | verifier masks |
    lookahead masks]``; :meth:`BlockDiffusionModel.settle` keeps a prefix of them.
    """

    logits: torch.Tensor  # (span_length, V): the block-size-1 rows of the span
    lookahead: torch.Tensor | None  # (count, V): the next draft's rows, if carried
    cached: int  # block positions stored before this forward
    prefix_rows: int  # first-half rows, block positions cached, cached + 1, ...
    commit_rows: int
    appended: int
    next_row: torch.Tensor | None = None  # right-shifted: the row after the finished block

    def rows_to_keep(self, committed_end: int, used: bool, plan: Lookahead | None, store_prefix: bool) -> int:
        """The prefix of appended rows whose KV is exactly what a commit would store.

        ``committed_end`` is the block position after the committed prefix. A
        used lookahead keeps its commit; with incremental causal KV the rows of
        the committed prefix are kept; everything else is dropped.
        """
        if used and plan.commit == "rows":
            return self.commit_rows
        if used and plan.commit == "first_half":
            return self.prefix_rows
        if store_prefix:
            return min(self.prefix_rows, committed_end - self.cached)
        return 0


class BlockDiffusionModel(ABC):
    """A loaded block-diffusion LM plus its tokenizer, behind the engine's interface.

    A family is one subclass. It declares how it recognises its ``config.json``
    (:meth:`matches`), the stock transformers class and config that run it
    (``stock_class``, :meth:`stock_config`), and its decoding conventions:

    - ``next_token_from_commit``: the forward that stores a block's KV also
      predicts the next block's first token (Fast-dLLM v2's right shift);
    - ``stop_at_block_end``: stop tokens are looked for only once a block is
      complete, because later edits may still rewrite them (LLaDA2.x);
    - ``official``: how its official code spends forwards, stops and sizes
      its output (:class:`OfficialConventions`, for ``accounting="official"``);
    - ``supports_incremental_kv``: a committed causal prefix's KV can be
      stored while the block is still being decoded (position-aligned families).

    Where a convention changes what the decoder does mid-block, the family
    answers through a hook instead of a flag the loop would branch on:
    :meth:`carried_row` (how a block begins), :meth:`defer_commit` (when a
    finished block is stored), :meth:`official_commit_causal_rows` (how its
    official code stores it), :meth:`lookahead_plan` (what a verification
    can carry), :meth:`rejected_commit` (a rejection without resampling) and
    :meth:`filled_for_routing` (the UCB router's block progress).
    """

    family: str = ""
    stock_class: type = None
    strict_weights = False  # refuse a checkpoint whose parameters do not all match the stock class
    default_mask_token_id: int | None = None
    default_stop_token_ids: tuple[int, ...] = ()
    next_token_from_commit = False
    stop_at_block_end = False
    supports_incremental_kv = False
    official = OfficialConventions()

    def __init__(self, model: torch.nn.Module, tokenizer, mask_token_id: int, stop_token_ids: list[int], name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.mask_token_id = int(mask_token_id)
        self.stop_token_ids = sorted({int(t) for t in stop_token_ids})
        self._token_text: dict[int, str] = {}
        self.name = name
        self.trained_block_lengths: tuple[int, ...] = ()
        # Read once: the weights do not move after loading, and the hot loop asks often.
        first = next(self.model.parameters())
        self.device: torch.device = first.device
        self.dtype: torch.dtype = first.dtype

    @staticmethod
    @abstractmethod
    def matches(config: dict) -> bool:
        """Whether a checkpoint's ``config.json`` belongs to this family."""

    @staticmethod
    @abstractmethod
    def stock_config(config: dict):
        """The stock transformers config that makes ``stock_class`` compute this family's forward."""

    @staticmethod
    def trained_block_lengths_of(config: dict) -> tuple[int, ...]:
        """Block sizes the checkpoint was trained with, when its config says."""
        return tuple(config.get("block_lengths") or ())

    @classmethod  # noqa: B027 - an optional hook: most families need nothing
    def prepare_loading(cls) -> None:
        """Anything to register before ``from_pretrained`` (a weight conversion, say)."""

    @classmethod
    def load(cls, source: str, config: dict, tokenizer, device, dtype, name: str, **load_kwargs) -> BlockDiffusionModel:
        """The one loader every family shares: stock class, stock config, the family's token ids."""
        cls.prepare_loading()
        stock = cls.stock_config(config)
        refuse_sliding_window(stock)
        model = from_pretrained_stock(
            cls.stock_class, source, stock, device, dtype, strict=cls.strict_weights, **load_kwargs
        )
        mask = mask_token_id(config, tokenizer, default=cls.default_mask_token_id)
        stops = stop_token_ids(config, tokenizer, defaults=cls.default_stop_token_ids)
        adapter = cls(model, tokenizer, mask, stops, name)
        adapter.trained_block_lengths = cls.trained_block_lengths_of(config)
        return adapter

    # -- decoding conventions, as hooks the decoder calls -------------------

    def carried_row(self, session: KVSession) -> torch.Tensor | None:
        """The logit row that predicts a new block's position 0 before any draft, if the family has one.

        ``None`` here: position 0 is drafted like every other. A right-shifted
        family returns the last row of the forward that stored the previous
        tokens, and the decoder commits position 0 from it first.
        """
        return None

    def defer_commit(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """A finished block's unstored ``tokens``, to be stored fused with the next block's first draft.

        Returning ``None`` asks for a commit forward now instead: a family whose
        commit predicts the next block's first token needs it before that draft.
        """
        return tokens

    def lookahead_plan(
        self, window_end: int, size: int, last_block: bool, next_active: bool, draft_ver: bool, cache_ver: bool
    ) -> Lookahead | None:
        """What a verification that accepts every draft up to ``window_end`` can carry for the next step.

        At the end of a block: the block's commit and the next block's first
        draft. At the end of a sub-block: the next sub-block's draft, exact
        under ``draft_ver`` only, where the committed prefix attends causally
        as in the verifier. Nothing past the budget.
        """
        if window_end < size:
            return Lookahead(window_end, size - window_end, "none") if draft_ver and next_active else None
        if last_block:
            return None
        return Lookahead(size, size, "first_half" if cache_ver else "rows")

    def official_commit_causal_rows(self, drafted_causal_rows: int) -> int:
        """How many of a finished block's first rows its official commit forward keeps causal.

        The rows ``draft_ver`` made causal while drafting, where the official
        code edits its mask in place (SDAR: ``draft_ver_rows_in_commit``);
        none where it commits the block with a fresh bidirectional mask.
        """
        return drafted_causal_rows if self.official.draft_ver_rows_in_commit else 0

    def rejected_commit(self, draft_token: int) -> tuple[int, str] | None:
        """What a rejected draft becomes when the verifier may not resample: kept as it is, as SDAR's code does.

        ``None`` leaves the position to the diffusion rule.
        """
        return draft_token, trace.KEPT

    def filled_for_routing(self, decoded_in_block: int, filled_in_window: int) -> int:
        """The count the UCB router reads as block progress: the tokens decoded in the block so far."""
        return decoded_in_block

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 20))

    def new_session(self, record: ForwardRecorder) -> KVSession:
        """A fresh, empty KV session whose forwards are reported to ``record``."""
        return KVSession(cache=DynamicCache(config=self.model.config), record=record)

    def prefill(self, session: KVSession, ids: torch.Tensor, causal: bool, block_length: int) -> torch.Tensor:
        """Store the KV of ``ids`` (whole blocks of the prompt), causally or
        block-causally; returns the last position's logit row."""
        n = ids.shape[0]
        if causal:
            allowed = masks.causal(n, self.device)
        else:
            allowed = masks.block_causal(n, block_length, session.stored, self.device)
        return self._forward(session, "prefill", ids, self._positions(session, n), allowed, keep_kv=n, keep_logits=1)[
            -1
        ]

    @abstractmethod
    def draft_forward(
        self,
        session: KVSession,
        block: torch.Tensor,
        commit: torch.Tensor | None,
        commit_causal: bool,
        causal_prefix: int,
        store_prefix: bool = False,
    ) -> torch.Tensor:
        """Drafter logits ``(B, V)`` for ``block``; stores ``commit``'s KV if given.

        ``causal_prefix`` rows at the start of the block attend causally
        (``draft_ver``). With ``store_prefix`` (incremental causal KV) their KV
        is stored too, and positions already stored are not fed again: their
        rows come back as zeros."""

    @abstractmethod
    def verify(
        self,
        session: KVSession,
        block: torch.Tensor,
        span_start: int,
        span_length: int,
        keep_prefix: bool = False,
        lookahead: Lookahead | None = None,
    ) -> Verified:
        """The verifier forward over a span, its KV left for :meth:`settle`.

        ``keep_prefix`` feeds the whole span to the first half so that every
        accepted draft's row can be kept; ``lookahead`` appends the rows it asks for.
        """

    def verify_span(self, session: KVSession, block: torch.Tensor, span_start: int, span_length: int) -> torch.Tensor:
        """Verifier logits ``(span_length, V)``: block-size-1 predictions of the span, nothing stored."""
        verified = self.verify(session, block, span_start, span_length)
        self.settle(session, verified, 0)
        return verified.logits

    def settle(self, session: KVSession, verified: Verified, keep: int) -> None:
        """Keep the KV of the first ``keep`` rows a verification appended, drop the rest."""
        dropped = verified.appended - keep
        if dropped:
            session.cache.crop(-dropped)
        session.stored += keep
        if keep and verified.next_row is not None:
            session.next_row = verified.next_row

    def commit_forward(
        self, session: KVSession, block: torch.Tensor, causal: bool, causal_prefix: int = 0
    ) -> torch.Tensor:
        """Store ``block``'s KV on its own, causally or bidirectionally (its first
        ``causal_prefix`` rows causal); returns the last position's logit row."""
        n = block.shape[0]
        allowed = masks.causal(n, self.device) if causal else masks.draft_mask(0, n, False, causal_prefix, self.device)
        return self._forward(session, "commit", block, self._positions(session, n), allowed, keep_kv=n, keep_logits=1)[
            -1
        ]

    def _forward(
        self,
        session: KVSession,
        kind: str,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        keep_kv: int | None,
        keep_logits: int,
    ) -> torch.Tensor:
        """One model call over ``ids`` after the cache; returns the last ``keep_logits`` logit rows.

        Every family runs through a stock transformers class the same way: an
        explicit additive 4D mask, explicit position ids and the session's
        ``DynamicCache`` (:meth:`KVSession.forward`). Only the KV of the first ``keep_kv`` inputs is kept:
        "run without storing" is "run, then crop what this call appended".
        ``keep_kv=None`` leaves everything for :meth:`settle`.
        """
        logits = session.forward(self, kind, ids, positions, allowed, keep_logits)
        if keep_kv is not None:
            dropped = ids.shape[0] - keep_kv
            if dropped:
                session.cache.crop(-dropped)
            session.stored += keep_kv
        return logits

    def _draft_rows(
        self, session, block, commit, commit_causal, causal_prefix, store_prefix: bool, extra_logits: int = 0
    ) -> torch.Tensor:
        """The draft forward over ``[finished block | block]`` (:func:`masks.draft_mask`).

        Stores the finished block's KV (and, with ``store_prefix``, the causal
        prefix's), never the drafts'. Positions of the block already stored are
        not fed; the block's rows come back for the positions fed, preceded by
        ``extra_logits`` rows of the finished block.
        """
        cached = session.cached_in_block
        rows = block[cached:]
        commit_length = 0 if commit is None else commit.shape[0]
        ids = rows if commit is None else torch.cat([commit, rows])
        prefix = max(0, causal_prefix - cached)
        allowed = masks.draft_mask(commit_length, rows.shape[0], commit_causal, prefix, self.device)
        positions = self._positions(session, ids.shape[0])
        keep = commit_length + (prefix if store_prefix else 0)
        return self._forward(session, "draft", ids, positions, allowed, keep, rows.shape[0] + extra_logits)

    def _positions(self, session: KVSession, n: int) -> torch.Tensor:
        """Absolute positions of ``n`` inputs placed right after the cache."""
        return session.stored + torch.arange(n, device=self.device)

    def chat_prompt(self, text: str) -> list[int]:
        """Token ids of ``text`` wrapped in the model's chat template."""
        messages = [{"role": "user", "content": text}]
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return list(ids)
        return self.tokenizer(text)["input_ids"]

    def token_strings(self, ids: list[int]) -> list[str]:
        """Each id as the text it contributes, for per-token display.

        Remembered per id: a trace with the inspector's top-k names hundreds of
        ids, and decoding one costs tens of microseconds, which made naming
        them a visible share of a small model's decode time.
        """
        missing = [i for i in dict.fromkeys(ids) if i not in self._token_text]
        if missing:
            self._token_text.update(zip(missing, self.tokenizer.batch_decode([[i] for i in missing])))
        return [self._token_text[i] for i in ids]

    def timed_call(self, session: KVSession, kind: str, tokens: int, call: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run one model call, report it to the session, return its result.

        On CUDA the clock is read after a synchronise, so seconds are real.
        """
        cuda = self.device.type == "cuda"  # a CPU computes synchronously
        if cuda:
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = call()
        if cuda:
            torch.cuda.synchronize(self.device)
        session.record(kind, tokens, time.perf_counter() - start)
        return out


def refuse_sliding_window(stock_config) -> None:
    """Refuse a network with sliding-window attention layers.

    The engine drops the KV a forward must not keep by cropping the cache's
    end. A sliding-window layer's cache holds only the last ``window``
    positions and evicts older ones as it grows, which a crop cannot undo.
    Until that is handled, such checkpoints fail to load rather than decode wrongly.
    """
    sliding = [i for i, kind in enumerate(getattr(stock_config, "layer_types", None) or ()) if kind != "full_attention"]
    if sliding:
        raise ValueError(
            f"sliding-window attention (layers {', '.join(map(str, sliding))}, window "
            f"{getattr(stock_config, 'sliding_window', None)}) is not supported: the engine crops the KV cache, "
            "which a sliding window breaks; use a checkpoint with use_sliding_window false"
        )


def from_pretrained_stock(
    model_class, source: str, config, device, dtype, strict: bool = False, **load_kwargs
) -> torch.nn.Module:
    """Load a checkpoint into a stock transformers class with SDPA attention.

    With a ``device_map`` among ``load_kwargs`` accelerate places the layers
    (possibly over several GPUs); otherwise the model is moved to ``device``.
    ``strict`` refuses a checkpoint whose parameters do not all land on the
    model's (a converted layout must match exactly, or weights stay random).
    """
    with quiet_transformers():
        model, info = model_class.from_pretrained(
            source, config=config, dtype=dtype, attn_implementation="sdpa", output_loading_info=True, **load_kwargs
        )
    unmatched = sorted(set(info.get("missing_keys", ())) | set(info.get("unexpected_keys", ())))
    if strict and unmatched:
        raise ValueError(
            f"the weights do not match {model_class.__name__}; unmatched parameters: {', '.join(unmatched[:4])}"
        )
    if load_kwargs.get("device_map") is None:
        model = model.to(device)
    return model


def mask_token_id(config: dict, tokenizer, default: int | None = None) -> int:
    """The ``[MASK]`` id: from the config, else the tokenizer's mask token, else
    the family's published ``default`` when the vocabulary holds it."""
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    for token in (getattr(tokenizer, "mask_token", None), "<|MASK|>", "<|mask|>", "|<MASK>|"):
        if token and token in tokenizer.get_vocab():
            return tokenizer.convert_tokens_to_ids(token)
    if default is not None and default < int(config.get("vocab_size", 0)):
        return default
    raise ValueError("this checkpoint names no mask token: config.json has no mask_token_id and the tokenizer none")


def stop_token_ids(config: dict, tokenizer, defaults: tuple[int, ...] = ()) -> list[int]:
    """Every end token the checkpoint uses: chats end with ``<|im_end|>`` (Qwen
    family) and pad with ``<|endoftext|>``, so generation stops on either; a
    family's published ``defaults`` count when the vocabulary holds them."""
    ids: set[int] = set()
    for value in (config.get("eos_token_id"), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eos|>") if t in vocab)
    ids.update(t for t in defaults if t < int(config.get("vocab_size", 0)))
    if not ids:
        raise ValueError("this checkpoint names no end-of-sequence token")
    return sorted(ids)
