"""SDAR (JetLM/SDAR-*): Qwen3 weights, position-aligned, run by stock ``Qwen3ForCausalLM``.

SDAR checkpoints say ``model_type: "sdar"`` and ship their own modeling code;
the weights and parameter names are Qwen3's, so a ``Qwen3Config`` built from the
same fields loads them into the stock class, with no ``trust_remote_code``.
The bundled model uses exactly this layout and this code path.
"""

from __future__ import annotations

from transformers import Qwen3Config, Qwen3ForCausalLM

from .aligned import PositionAlignedModel
from .base import quiet_transformers

# Fields of an SDAR config that describe the remote code, not the network.
_REMOTE_ONLY_FIELDS = ("model_type", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype")


def qwen3_config_from_sdar(config: dict) -> Qwen3Config:
    """The stock ``Qwen3Config`` equivalent of an SDAR ``config.json``.

    Unknown SDAR-only fields (``mask_token_id``, ``block_lengths``, ...) are kept
    as attributes so the adapter can read them from ``model.config``.
    """
    fields = {k: v for k, v in config.items() if k not in _REMOTE_ONLY_FIELDS}
    qwen3 = Qwen3Config(**fields)
    qwen3._attn_implementation = "sdpa"
    return qwen3


class SDARModel(PositionAlignedModel):
    family = "sdar"

    @staticmethod
    def matches(config: dict) -> bool:
        architectures = " ".join(config.get("architectures") or [])
        return config.get("model_type") == "sdar" or "SDAR" in architectures

    @classmethod
    def load(cls, source: str, config: dict, tokenizer, device, dtype, name: str, **load_kwargs) -> "SDARModel":
        with quiet_transformers():
            model = Qwen3ForCausalLM.from_pretrained(
                source, config=qwen3_config_from_sdar(config), dtype=dtype, attn_implementation="sdpa", **load_kwargs
            )
        if "device_map" not in load_kwargs:
            model = model.to(device)
        adapter = cls(model, tokenizer, mask_token_id(config, tokenizer), stop_token_ids(config, tokenizer), name)
        adapter.trained_block_lengths = tuple(config.get("block_lengths") or ())
        return adapter


def mask_token_id(config: dict, tokenizer) -> int:
    """The ``[MASK]`` id: from the config, else the tokenizer's mask token."""
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    for token in (getattr(tokenizer, "mask_token", None), "<|MASK|>", "<|mask|>"):
        if token and token in tokenizer.get_vocab():
            return tokenizer.convert_tokens_to_ids(token)
    raise ValueError("this checkpoint names no mask token: config.json has no mask_token_id and the tokenizer none")


def stop_token_ids(config: dict, tokenizer) -> list[int]:
    """Every end token the checkpoint uses: SDAR chats end with ``<|im_end|>`` and
    pad with ``<|endoftext|>``, so generation stops on either."""
    ids: set[int] = set()
    for value in (config.get("eos_token_id"), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eos|>") if t in vocab)
    if not ids:
        raise ValueError("this checkpoint names no end-of-sequence token")
    return sorted(ids)
