"""SDAR (JetLM/SDAR-*): Qwen3 weights, position-aligned, run by stock ``Qwen3ForCausalLM``.

SDAR checkpoints say ``model_type: "sdar"`` and ship their own modeling code;
the weights and parameter names are Qwen3's, so a ``Qwen3Config`` built from the
same fields loads them into the stock class, with no ``trust_remote_code``.
The bundled model uses exactly this layout and this code path.
"""

from __future__ import annotations

from transformers import Qwen3Config, Qwen3ForCausalLM

from .aligned import PositionAlignedModel

# Fields of a config.json that describe the remote code, not the network.
REMOTE_ONLY_FIELDS = ("model_type", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype")


def qwen3_config_from_sdar(config: dict) -> Qwen3Config:
    """The stock ``Qwen3Config`` equivalent of an SDAR ``config.json``.

    Unknown SDAR-only fields (``mask_token_id``, ``block_lengths``, ...) are kept
    as attributes so the adapter can read them from ``model.config``.
    """
    fields = {k: v for k, v in config.items() if k not in REMOTE_ONLY_FIELDS}
    qwen3 = Qwen3Config(**fields)
    qwen3._attn_implementation = "sdpa"
    return qwen3


class SDARModel(PositionAlignedModel):
    family = "sdar"
    stock_class = Qwen3ForCausalLM
    stock_config = staticmethod(qwen3_config_from_sdar)

    @staticmethod
    def matches(config: dict) -> bool:
        architectures = " ".join(config.get("architectures") or [])
        return config.get("model_type") == "sdar" or "SDAR" in architectures
