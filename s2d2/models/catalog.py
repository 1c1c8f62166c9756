"""The Hub checkpoints users can pick, and a weight-memory estimate from any ``config.json``.

Sizes are bf16 weights in GB (1e9 bytes). Each entry says where its numbers
come from: the Hub's file listing, a computation from the model's published
``config.json`` with :func:`parameter_count`, or an estimate from the backbone
it was trained from when neither was available.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CatalogEntry:
    """One selectable Hub model."""

    hub_id: str
    family: str
    parameters_billion: float
    bf16_gb: float
    source: str
    note: str = ""


MODEL_CATALOG = (
    CatalogEntry("JetLM/SDAR-1.7B-Chat", "sdar", 2.03, 4.06, "hub file listing (model.safetensors 4.06 GB)"),
    CatalogEntry(
        "JetLM/SDAR-4B-Chat",
        "sdar",
        4.41,
        8.83,
        "computed from config.json; SDAR-4B-Chat-b64, same shape, stores 8.83 GB",
    ),
    CatalogEntry("JetLM/SDAR-8B-Chat", "sdar", 8.19, 16.4, "hub file listing (4 shards, 16.4 GB)"),
    CatalogEntry(
        "JetLM/SDAR-30B-A3B-Chat",
        "sdar",
        30.5,
        61.1,
        "estimate from the Qwen3-30B-A3B backbone",
        "MoE: about 3B parameters active per token",
    ),
    CatalogEntry(
        "Efficient-Large-Model/Fast_dLLM_v2_1.5B", "fast_dllm_v2", 1.54, 3.09, "estimate from the Qwen2.5-1.5B backbone"
    ),
    CatalogEntry(
        "Efficient-Large-Model/Fast_dLLM_v2_7B",
        "fast_dllm_v2",
        7.62,
        15.2,
        "computed from config.json (vocabulary as Qwen2.5-7B's)",
    ),
    CatalogEntry(
        "inclusionAI/LLaDA2.1-mini",
        "llada2",
        16.3,
        32.5,
        "computed from config.json (vocabulary size 157184 assumed)",
        "MoE: 256 experts, 8 chosen per token, about 1.4B parameters active",
    ),
)


def _attention_parameters(config: dict, hidden: int) -> int:
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    count = hidden * (q + 2 * kv) + q * hidden
    if (
        config.get("attention_bias")
        or config.get("use_qkv_bias")
        or config.get("model_type") in ("qwen2", "Fast_dLLM_Qwen")
    ):
        count += q + 2 * kv
    if config.get("use_bias"):
        count += hidden
    if config.get("use_qk_norm") or config.get("model_type") in ("qwen3", "qwen3_moe", "sdar", "sdar_moe"):
        count += 2 * head_dim
    return count


def _is_moe_layer(config: dict, layer: int) -> bool:
    """Qwen3-MoE style (``decoder_sparse_step``, ``mlp_only_layers``) or
    DeepSeek/LLaDA2 style (``first_k_dense_replace``) placement of MoE layers."""
    if not (config.get("num_experts") or config.get("n_routed_experts")):
        return False
    if layer < config.get("first_k_dense_replace", 0) or layer in (config.get("mlp_only_layers") or ()):
        return False
    return (layer + 1) % config.get("decoder_sparse_step", 1) == 0


def _mlp_parameters(config: dict, hidden: int, layer: int) -> int:
    if not _is_moe_layer(config, layer):
        return 3 * hidden * config["intermediate_size"]
    experts = config.get("num_experts") or config["n_routed_experts"]
    expert_size = config["moe_intermediate_size"]
    shared = (config.get("num_shared_experts") or config.get("n_shared_experts") or 0) * expert_size
    shared += config.get("shared_expert_intermediate_size") or 0
    router = experts * hidden + (experts if config.get("moe_router_enable_expert_bias") else 0)
    return experts * 3 * hidden * expert_size + 3 * hidden * shared + router


def parameter_count(config: dict) -> int:
    """Parameters of a dense or MoE decoder described by a Hugging Face ``config.json``."""
    hidden = config["hidden_size"]
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    layers = sum(
        _attention_parameters(config, hidden) + _mlp_parameters(config, hidden, i) + 2 * hidden
        for i in range(config["num_hidden_layers"])
    )
    return embeddings + layers + hidden


def estimate_memory_gb(config: dict, dtype_bytes: int = 2) -> float:
    """GB (1e9 bytes) the weights take at ``dtype_bytes`` per parameter (2 for
    bf16), to show before loading. The KV cache of a few thousand tokens and
    activations come on top; they are small next to the weights here."""
    return parameter_count(config) * dtype_bytes / 1e9
