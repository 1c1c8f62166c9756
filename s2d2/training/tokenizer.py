"""The bundled model's tokenizer: a small BPE trained on the task corpus.

Digits are always single tokens (so arithmetic is digit by digit, most
significant first), punctuation is split off, a space becomes a ``▁`` prefix
of the word, digit or sign after it so text decodes back exactly, and every printable ASCII character is in the
alphabet so free text never fails to tokenize. Saved as ``tokenizer.json``
with a chat template; it loads with ``AutoTokenizer``.
"""

from __future__ import annotations

import string
from collections.abc import Iterable

from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import PreTrainedTokenizerFast

MASK = "<|mask|>"
EOS = "<|endoftext|>"
PAD = "<|pad|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
UNK = "<|unk|>"
SPECIAL_TOKENS = (PAD, EOS, MASK, USER, ASSISTANT, UNK)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}" + USER + "{{ message['content'] }}"
    "{% else %}" + ASSISTANT + "{{ message['content'] }}" + EOS + "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def train_tokenizer(corpus: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train the BPE on ``corpus`` (deterministic for the same corpus)."""
    core = Tokenizer(models.BPE(unk_token=UNK))
    core.normalizer = normalizers.NFKC()
    # A word, one digit or one other character, each with its leading space.
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False),
            pre_tokenizers.Split(Regex(r"▁?[A-Za-z]+|▁?[0-9]|▁?[^A-Za-z0-9▁]|▁"), behavior="isolated"),
        ]
    )
    core.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    alphabet = sorted(set(string.printable.strip()) | {"▁"})
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOS,
        pad_token=PAD,
        mask_token=MASK,
        unk_token=UNK,
        additional_special_tokens=[USER, ASSISTANT],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def chat_text(prompt: str, answer: str | None = None) -> str:
    """The template as text: ``<|user|>prompt<|assistant|>`` and optionally the answer."""
    text = USER + prompt + ASSISTANT
    return text if answer is None else text + answer + EOS
