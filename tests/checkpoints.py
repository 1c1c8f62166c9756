"""Tiny random checkpoints in each family's published on-disk layout, written on the fly.

Each is written with the config fields and parameter names the Hub models
publish, then loaded through ``load_model`` like a real one; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from s2d2.training.tokenizer import EOS

INIT_STD = 0.15  # sharp, context-dependent predictions: decoders are not compared on ties
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2, 64, 4, 2, 16


def shape_fields(tokenizer) -> dict:
    vocab = 64 * -(-len(tokenizer) // 64)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    return {
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "pad_token_id": tokenizer.pad_token_id,
    }


def write_fast_dllm_checkpoint(path: Path, tokenizer, seed: int = 0) -> str:
    """Fast-dLLM v2's layout: a ``Fast_dLLM_Qwen`` config and Qwen2 parameter names."""
    fields = {**shape_fields(tokenizer), "intermediate_size": 128, "rope_theta": 1e6, "use_sliding_window": False}
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**fields))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 or name.endswith("proj.bias"):
                p.normal_(0, INIT_STD)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config = {
        **fields,
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "model_type": "Fast_dLLM_Qwen",
        "auto_map": {
            "AutoConfig": "configuration.Fast_dLLM_QwenConfig",
            "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM",
        },
        "bd_size": 32,
        "sliding_window": 512,
        "max_window_layers": LAYERS,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


LLADA2_MOE = {
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "n_group": 4,
    "topk_group": 2,
    "num_shared_experts": 1,
    "moe_intermediate_size": 32,
    "intermediate_size": 128,
    "first_k_dense_replace": 1,
    "routed_scaling_factor": 2.5,
}


def llada2_state_dict(config: dict, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random weights under LLaDA2's own parameter names and layouts (fused q/k/v, one module per expert)."""

    def matrix(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=generator) * INIT_STD

    def scale(n: int) -> torch.Tensor:
        return 0.5 + torch.rand(n, generator=generator)

    def mlp(prefix: str, size: int) -> dict:
        return {
            f"{prefix}.gate_proj.weight": matrix(size, HIDDEN),
            f"{prefix}.up_proj.weight": matrix(size, HIDDEN),
            f"{prefix}.down_proj.weight": matrix(HIDDEN, size),
        }

    vocab, experts = config["vocab_size"], config["num_experts"]
    weights = {
        "model.word_embeddings.weight": matrix(vocab, HIDDEN),
        "model.norm.weight": scale(HIDDEN),
        "lm_head.weight": matrix(vocab, HIDDEN),
    }
    for i in range(LAYERS):
        layer = f"model.layers.{i}"
        weights.update(
            {
                f"{layer}.input_layernorm.weight": scale(HIDDEN),
                f"{layer}.post_attention_layernorm.weight": scale(HIDDEN),
                f"{layer}.attention.query_key_value.weight": matrix((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
                f"{layer}.attention.query_layernorm.weight": scale(HEAD_DIM),
                f"{layer}.attention.key_layernorm.weight": scale(HEAD_DIM),
                f"{layer}.attention.dense.weight": matrix(HIDDEN, HEADS * HEAD_DIM),
            }
        )
        if i < config["first_k_dense_replace"]:
            weights.update(mlp(f"{layer}.mlp", config["intermediate_size"]))
            continue
        weights[f"{layer}.mlp.gate.weight"] = matrix(experts, HIDDEN)
        weights[f"{layer}.mlp.gate.expert_bias"] = torch.randn(experts, generator=generator) * 0.1
        weights.update(
            mlp(f"{layer}.mlp.shared_experts", config["moe_intermediate_size"] * config["num_shared_experts"])
        )
        for e in range(experts):
            weights.update(mlp(f"{layer}.mlp.experts.{e}", config["moe_intermediate_size"]))
    return weights


def write_llada2_checkpoint(path: Path, tokenizer, seed: int = 0) -> str:
    """LLaDA2.x's layout: an ``llada2_moe`` config without a mask id (the tokenizer's
    ``<|mask|>`` names it) and BailingMoeV2 parameter names."""
    config = {
        **shape_fields(tokenizer),
        **LLADA2_MOE,
        "architectures": ["LLaDA2MoeModelLM"],
        "model_type": "llada2_moe",
        "auto_map": {
            "AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
            "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM",
        },
        "head_dim": HEAD_DIM,
        "partial_rotary_factor": 0.5,
        "rope_theta": 600000,
        "rope_scaling": None,
        "use_qkv_bias": False,
        "use_bias": False,
        "use_qk_norm": True,
        "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "norm_topk_prob": True,
        "dtype": "float32",
    }
    path.mkdir(parents=True, exist_ok=True)
    save_file(
        llada2_state_dict(config, torch.Generator().manual_seed(seed)),
        str(path / "model.safetensors"),
        metadata={"format": "pt"},
    )
    tokenizer.save_pretrained(path)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


WRITERS = {"fast_dllm_v2": write_fast_dllm_checkpoint, "llada2": write_llada2_checkpoint}
