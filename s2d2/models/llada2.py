"""LLaDA2.x (inclusionAI/LLaDA2.1-mini): a BailingMoeV2 MoE, position-aligned, run by stock ``Glm4MoeForCausalLM``.

LLaDA2 checkpoints say ``model_type: "llada2_moe"`` and ship their own modeling
code; transformers has no class of that name. Its network is, operation for
operation, the one ``Glm4MoeForCausalLM`` implements: GQA attention with
per-head RMS q/k-norm and partial rotary embeddings (rotate-half on the first
``partial_rotary_factor`` of each head), a dense SwiGLU MLP in the first
``first_k_dense_replace`` layers, then MoE layers with a float32 sigmoid
router, a score-correction bias used for choosing experts only, group-limited
top-k (groups ranked by the sum of their two best scores), top-k weights
normalised and scaled by ``routed_scaling_factor``, plus shared experts.
Only the parameter names and layouts differ, so the checkpoint is converted
while it loads (fused ``query_key_value`` split into q/k/v, per-expert MLPs
stacked, renames) and ``trust_remote_code`` is never needed.

Checked against the official modeling code (``phymhan/S2D2:
LLaDA2/modeling_llada2_moe_cache.py``) on random tiny configurations, the
official model's weights saved in LLaDA2's layout and loaded through this
adapter: in fp32 the logits agree to within 3e-6 (max abs; logits of scale 5)
for a block-causal forward, a cached draft and the 2L verifier. In bf16 both
implementations are equally far from the fp32 result (mean |diff| 0.034);
they differ from each other by bf16 rounding only (mean 0.007). Setting one
field wrong (e.g. not normalising the top-k weights) moves logits by ~5.

Alternative considered: ``trust_remote_code`` with the published modeling
file. Rejected: it executes downloaded code, and that file targets an older
transformers (it imports modules 5.x no longer has).
"""

from __future__ import annotations

from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
from transformers.conversion_mapping import register_checkpoint_conversion_mapping

from .aligned import PositionAlignedModel
from .base import OfficialConventions

LLADA2_MASK_TOKEN_ID = 156895
LLADA2_EOS_TOKEN_ID = 156892
LLADA2_BLOCK_LENGTH = 32  # the block size its decoding code and the paper use; config.json does not say

# LLaDA2's configuration defaults, for fields a config.json may leave out.
LLADA2_DEFAULTS = {
    "use_qkv_bias": False,
    "use_qk_norm": True,
    "use_bias": True,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "partial_rotary_factor": 0.5,
    "num_shared_experts": 0,
    "n_group": 8,
    "topk_group": 4,
    "routed_scaling_factor": 2.5,
    "first_k_dense_replace": 0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
}


class LLaDA2AsGlm4MoeForCausalLM(Glm4MoeForCausalLM):
    """Stock ``Glm4MoeForCausalLM`` under its own name, so that LLaDA2's weight
    conversion is registered for this class alone and never for GLM checkpoints."""


def llada2_weight_conversion() -> list:
    """How LLaDA2 parameter names and layouts map onto ``Glm4MoeForCausalLM``'s.

    Imported here, not with the module: ``Split`` is new in transformers 5.24, and ``s2d2.models`` must import
    under SGLang's 5.19 so that :func:`s2d2.models.load_model` can refuse it in one line."""
    from transformers.core_model_loading import Concatenate, MergeModulelist, Split, WeightConverter, WeightRenaming

    return [
        WeightRenaming(r"^model\.word_embeddings\.", "model.embed_tokens."),
        WeightRenaming(r"\.attention\.dense\.", ".self_attn.o_proj."),
        WeightRenaming(r"\.attention\.query_layernorm\.", ".self_attn.q_norm."),
        WeightRenaming(r"\.attention\.key_layernorm\.", ".self_attn.k_norm."),
        WeightRenaming(r"\.mlp\.gate\.expert_bias", ".mlp.gate.e_score_correction_bias"),
        # Fused rows are [query heads | key heads | value heads]; Split sizes each part like its target.
        WeightConverter(
            "attention.query_key_value.weight",
            ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"],
            operations=[Split(dim=0)],
        ),
        WeightConverter(
            "attention.query_key_value.bias",
            ["self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"],
            operations=[Split(dim=0)],
        ),
        WeightConverter(
            ["mlp.experts.*.gate_proj.weight", "mlp.experts.*.up_proj.weight"],
            "mlp.experts.gate_up_proj",
            operations=[MergeModulelist(dim=0), Concatenate(dim=1)],
        ),
        WeightConverter("mlp.experts.*.down_proj.weight", "mlp.experts.down_proj", operations=[MergeModulelist(dim=0)]),
    ]


def glm4_moe_config_from_llada2(config: dict) -> Glm4MoeConfig:
    """The ``Glm4MoeConfig`` that makes the stock class compute LLaDA2's forward.

    Raises ``ValueError`` for variants the stock class cannot express (a bias on
    the attention output, a non-sigmoid router, no experts at all).
    """
    c = {**LLADA2_DEFAULTS, **config}
    if c["use_bias"]:
        raise ValueError("LLaDA2 variant with an attention output bias (use_bias=true) is not supported")
    if c.get("score_function", "sigmoid") != "sigmoid" or not c.get("num_experts"):
        raise ValueError("only LLaDA2 MoE checkpoints with a sigmoid router are supported")
    rope = {"rope_type": "default", "rope_theta": c["rope_theta"], "partial_rotary_factor": c["partial_rotary_factor"]}
    if isinstance(c.get("rope_scaling"), dict):
        scaling = dict(c["rope_scaling"])
        rope.update(scaling, rope_type=scaling.get("rope_type", scaling.get("type", "default")))
    glm = Glm4MoeConfig(
        vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
        hidden_act=c["hidden_act"],
        max_position_embeddings=c["max_position_embeddings"],
        rms_norm_eps=c["rms_norm_eps"],
        tie_word_embeddings=c["tie_word_embeddings"],
        rope_parameters=rope,
        attention_bias=c["use_qkv_bias"],
        use_qk_norm=c["use_qk_norm"],
        n_routed_experts=c["num_experts"],
        num_experts_per_tok=c["num_experts_per_tok"],
        moe_intermediate_size=c["moe_intermediate_size"],
        n_shared_experts=c["num_shared_experts"] or 0,
        n_group=c["n_group"],
        topk_group=c["topk_group"],
        routed_scaling_factor=c["routed_scaling_factor"],
        first_k_dense_replace=c["first_k_dense_replace"],
        # LLaDA2 normalises the chosen experts' weights whenever it picks more than one.
        norm_topk_prob=c["num_experts_per_tok"] > 1,
        num_nextn_predict_layers=0,
        pad_token_id=c.get("pad_token_id"),
        bos_token_id=c.get("bos_token_id"),
        eos_token_id=c.get("eos_token_id"),
    )
    glm._attn_implementation = "sdpa"
    return glm


class LLaDA2Model(PositionAlignedModel):
    """LLaDA2.x. Its official decoding looks for EOS only in complete blocks (an
    edit may still rewrite one), and stores no KV for the last block or a block
    holding EOS."""

    family = "llada2"
    stock_class = LLaDA2AsGlm4MoeForCausalLM
    stock_config = staticmethod(glm4_moe_config_from_llada2)
    strict_weights = True
    default_mask_token_id = LLADA2_MASK_TOKEN_ID
    default_stop_token_ids = (LLADA2_EOS_TOKEN_ID,)
    stop_at_block_end = True
    official = OfficialConventions(
        commit_stop_block=False, commit_last_block=False, budget="whole_blocks_trimmed", draft_ver_rows_in_commit=False
    )

    @staticmethod
    def matches(config: dict) -> bool:
        architectures = " ".join(config.get("architectures") or [])
        return config.get("model_type") == "llada2_moe" or "LLaDA2" in architectures

    @staticmethod
    def trained_block_lengths_of(config: dict) -> tuple[int, ...]:
        """The released models decode 32-token blocks; a checkpoint may list its own (this project's does)."""
        return tuple(config.get("block_lengths") or (LLADA2_BLOCK_LENGTH,))

    @classmethod
    def prepare_loading(cls) -> None:
        register_checkpoint_conversion_mapping(cls.stock_class.__name__, llada2_weight_conversion(), overwrite=True)
