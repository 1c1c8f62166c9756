"""Checkpoint layouts the training script writes for the Fast-dLLM v2 and LLaDA2.x families.

Each family is trained in the stock transformers class its adapter loads it
into (``Qwen2ForCausalLM``; ``Glm4MoeForCausalLM`` for LLaDA2) and saved in the
family's own published layout, so the result loads through ``load_model``
exactly as a Hub checkpoint of that family does: Fast-dLLM v2's
``Fast_dLLM_Qwen`` config with stock Qwen2 parameter names, and LLaDA2's
``llada2_moe`` config with BailingMoeV2 parameter names (fused
``query_key_value``, one module per expert), the inverse of the conversion the
LLaDA2 adapter applies while loading. No ``auto_map`` is written: these
checkpoints ship no modeling code, and nothing needs any.
"""

from __future__ import annotations

import math

import torch
from safetensors.torch import save_file
from transformers import Qwen2ForCausalLM

from ..models.fastdllm import qwen2_config_from_fast_dllm
from ..models.llada2 import LLaDA2AsGlm4MoeForCausalLM, glm4_moe_config_from_llada2
from .tokenizer import EOS

FAMILIES = ("sdar", "fastdllm", "llada2")
EXPERT_BIAS_RATE = 1e-3  # aux-loss-free balancing step (DeepSeek-V3's u; LLaDA2 keeps an expert_bias for it)


def shared_fields(cfg, tokenizer) -> dict:
    """The ``config.json`` fields every family's layout writes the same way (the vocabulary padded to 64)."""
    vocab = 64 * math.ceil(len(tokenizer) / 64)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    return {
        "vocab_size": vocab,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_positions,
        "rms_norm_eps": 1e-6,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "pad_token_id": tokenizer.pad_token_id,
    }


def fast_dllm_config(cfg, tokenizer) -> dict:
    """``config.json`` in Fast-dLLM v2's layout (Qwen2 fields, ``bd_size``); the mask id is the tokenizer's."""
    return {
        **shared_fields(cfg, tokenizer),
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "model_type": "Fast_dLLM_Qwen",
        "bd_size": cfg.bd_size,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "sliding_window": cfg.max_positions,
        "max_window_layers": cfg.layers,
        "attention_dropout": 0.0,
        "use_cache": True,
        "torch_dtype": "float32",
    }


def llada2_config(cfg, tokenizer) -> dict:
    """``config.json`` in LLaDA2.x's layout (``llada2_moe``, no mask id: the tokenizer's ``<|mask|>`` names it)."""
    return {
        **shared_fields(cfg, tokenizer),
        "architectures": ["LLaDA2MoeModelLM"],
        "model_type": "llada2_moe",
        "head_dim": cfg.hidden_size // cfg.heads,
        "num_experts": cfg.experts,
        "num_experts_per_tok": cfg.experts_per_token,
        "n_group": cfg.expert_groups,
        "topk_group": cfg.expert_groups_per_token,
        "num_shared_experts": 1,
        "moe_intermediate_size": cfg.expert_size,
        "first_k_dense_replace": 1,
        "routed_scaling_factor": 2.5,
        "partial_rotary_factor": 0.5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "use_qkv_bias": False,
        "use_bias": False,
        "use_qk_norm": True,
        "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "norm_topk_prob": True,
        "block_lengths": list(cfg.block_lengths),
        "dtype": "float32",
    }


def build_model(family: str, config: dict, device: str = "cpu") -> torch.nn.Module:
    """The stock network the family's adapter runs, freshly initialised, for training on ``device``.

    On an accelerator the MoE experts run transformers' eager loop over
    experts: its grouped-matmul kernels are not built for float32 on every
    CUDA build, and the eager loop is the same computation.
    """
    if family == "fastdllm":
        return Qwen2ForCausalLM(qwen2_config_from_fast_dllm(config))
    if family == "llada2":
        moe_config = glm4_moe_config_from_llada2(config)
        if device != "cpu":
            moe_config._experts_implementation = "eager"
        return LLaDA2AsGlm4MoeForCausalLM(moe_config)
    raise ValueError(f"no layout for family {family!r}")


def llada2_state_dict(model, config: dict) -> dict[str, torch.Tensor]:
    """The stock model's weights under LLaDA2's names and layouts (what ``llada2_weight_conversion`` undoes)."""
    renames = (
        ("model.embed_tokens.", "model.word_embeddings."),
        (".self_attn.o_proj.", ".attention.dense."),
        (".self_attn.q_norm.", ".attention.query_layernorm."),
        (".self_attn.k_norm.", ".attention.key_layernorm."),
        (".mlp.gate.e_score_correction_bias", ".mlp.gate.expert_bias"),
    )
    size = config["moe_intermediate_size"]
    out: dict[str, torch.Tensor] = {}
    state = model.state_dict()
    for name, tensor in state.items():
        tensor = tensor.detach().to(torch.float32).contiguous()
        if ".self_attn.k_proj." in name or ".self_attn.v_proj." in name:
            continue
        if ".self_attn.q_proj." in name:
            prefix, kind = name.split(".self_attn.q_proj.")
            parts = [state[f"{prefix}.self_attn.{p}_proj.{kind}"] for p in "qkv"]
            out[f"{prefix}.attention.query_key_value.{kind}"] = torch.cat(parts).to(torch.float32).contiguous()
            continue
        if name.endswith(".mlp.experts.gate_up_proj"):
            prefix = name.removesuffix(".gate_up_proj")
            for e, fused in enumerate(tensor):
                out[f"{prefix}.{e}.gate_proj.weight"] = fused[:size].clone()
                out[f"{prefix}.{e}.up_proj.weight"] = fused[size:].clone()
            continue
        if name.endswith(".mlp.experts.down_proj"):
            prefix = name.removesuffix(".down_proj")
            for e, down in enumerate(tensor):
                out[f"{prefix}.{e}.down_proj.weight"] = down.clone()
            continue
        for old, new in renames:
            name = name.replace(old, new)
        out[name] = tensor
    return out


def save_llada2_weights(model, config: dict, path) -> None:
    save_file(llada2_state_dict(model, config), str(path / "model.safetensors"), metadata={"format": "pt"})


class ExpertBalancer:
    """Aux-loss-free load balancing of a MoE router, the job of LLaDA2's ``expert_bias``.

    Each step counts the tokens every expert received in each MoE layer and
    nudges the layer's selection bias up for under-loaded experts and down for
    over-loaded ones. The bias only chooses experts; it never scales their
    output, so the loss is not distorted. Without it a small router trained
    from scratch tends to send most tokens to a few experts.
    """

    def __init__(self, model, rate: float = EXPERT_BIAS_RATE):
        self.rate = rate
        self.counts: dict[torch.nn.Module, torch.Tensor] = {}
        self.handles = [
            module.register_forward_hook(self._count)
            for module in model.modules()
            if hasattr(module, "e_score_correction_bias")
        ]

    def _count(self, router, _inputs, outputs) -> None:
        _, _, chosen = outputs
        load = torch.bincount(chosen.flatten(), minlength=router.e_score_correction_bias.numel())
        self.counts[router] = self.counts.get(router, 0) + load

    @torch.no_grad()
    def step(self) -> None:
        for router, load in self.counts.items():
            load = load.float()
            router.e_score_correction_bias += self.rate * torch.sign(load.mean() - load)
        self.counts.clear()
