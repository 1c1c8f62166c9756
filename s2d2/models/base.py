"""The one interface every model family implements, and the KV session it works on.

A decoder sees a block-diffusion model only through four forwards
(spec section 1 and 3):

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
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

import torch

ForwardRecorder = Callable[[str, int, float], None]


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
    carry: dict = field(default_factory=dict)


class BlockDiffusionModel(ABC):
    """A loaded block-diffusion LM plus its tokenizer, behind the engine's interface."""

    family: str = ""

    def __init__(self, model: torch.nn.Module, tokenizer, mask_token_id: int, stop_token_ids: list[int], name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.mask_token_id = int(mask_token_id)
        self.stop_token_ids = sorted({int(t) for t in stop_token_ids})
        self.name = name
        self.trained_block_lengths: tuple[int, ...] = ()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 20))

    @abstractmethod
    def new_session(self, record: ForwardRecorder) -> KVSession:
        """A fresh, empty KV session whose forwards are reported to ``record``."""

    @abstractmethod
    def prefill(self, session: KVSession, ids: torch.Tensor, causal: bool, block_length: int) -> None:
        """Store the KV of ``ids`` (whole blocks of the prompt)."""

    @abstractmethod
    def draft_forward(
        self,
        session: KVSession,
        block: torch.Tensor,
        commit: torch.Tensor | None,
        commit_causal: bool,
        causal_rows: torch.Tensor | None,
    ) -> torch.Tensor:
        """Drafter logits ``(B, V)`` for ``block``; stores ``commit``'s KV if given."""

    @abstractmethod
    def verify_span(self, session: KVSession, block: torch.Tensor, span_start: int, span_length: int) -> torch.Tensor:
        """Verifier logits ``(span_length, V)``: block-size-1 predictions of the span."""

    @abstractmethod
    def commit_forward(self, session: KVSession, block: torch.Tensor, causal: bool) -> None:
        """Store ``block``'s KV (the unfused commit)."""

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
        """Each id as the text it contributes, for per-token display."""
        return [self.tokenizer.decode([i]) for i in ids]

    def timed_call(self, session: KVSession, kind: str, tokens: int, call: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run one model call, report it to the session, return its result.

        On CUDA the clock is read after a synchronise, so seconds are real.
        """
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = call()
        if cuda:
            torch.cuda.synchronize(self.device)
        session.record(kind, tokens, time.perf_counter() - start)
        return out
