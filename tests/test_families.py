"""Fast-dLLM v2 and LLaDA2 through the engine, on tiny random checkpoints in each family's on-disk format.

Nothing is downloaded: each checkpoint is written by ``checkpoints.py`` with the
config fields and parameter names the Hub models publish, then loaded through
``load_model`` like a real one.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from checkpoints import HEAD_DIM, HEADS, KV_HEADS, LAYERS, LLADA2_MOE
from helpers import CountingForward, assert_each_token_committed_once, exact_greedy_s2d2, random_prompts
from safetensors.torch import load_file
from transformers import Qwen2ForCausalLM

from s2d2.config import DecodeConfig, VerifyConfig, preset_config
from s2d2.decode import Decoder, generate
from s2d2.models import ADAPTERS, ModelLoadError, load_model
from s2d2.models.catalog import MODEL_CATALOG, estimate_memory_gb, parameter_count
from s2d2.models.fastdllm import FastDLLMModel
from s2d2.models.llada2 import LLaDA2Model
from s2d2.models.sdar import SDARModel
from s2d2.sampling import SamplingConfig
from s2d2.training.tokenizer import EOS

pytestmark = pytest.mark.usefixtures("one_thread")


def stock_logits(model, ids: list[int]) -> torch.Tensor:
    """Logits of one uncached causal forward of the stock network (its own default mask)."""
    with torch.no_grad():
        return model.model(input_ids=torch.tensor([ids])).logits[0]


def autoregressive_distribution(model, context: list[int]) -> torch.Tensor:
    """The block-size-1 distribution of the token after ``context``: a right-shifted
    model reads it off its last row, a position-aligned one off a mask token appended."""
    if model.family == "fast_dllm_v2":
        return torch.softmax(stock_logits(model, context)[-1], dim=-1)
    return torch.softmax(stock_logits(model, context + [model.mask_token_id])[-1], dim=-1)


# -- loading and the registry ---------------------------------------------------


@pytest.mark.parametrize(
    "config, adapter",
    [
        ({"model_type": "sdar", "architectures": ["SDARForCausalLM"]}, SDARModel),
        (
            {"model_type": "Fast_dLLM_Qwen", "architectures": ["Fast_dLLM_QwenForCausalLM"], "bd_size": 32},
            FastDLLMModel,
        ),
        ({"architectures": ["Fast_dLLM_QwenForCausalLM"]}, FastDLLMModel),
        ({"model_type": "llada2_moe", "architectures": ["LLaDA2MoeModelLM"]}, LLaDA2Model),
        ({"architectures": ["LLaDA2MoeModelLM"]}, LLaDA2Model),
    ],
)
def test_registry_picks_the_family_adapter(config, adapter):
    assert [a for a in ADAPTERS if a.matches(config)] == [adapter]


def test_loaded_checkpoints_have_the_family_adapter_and_its_tokens(family_models, tokenizer):
    fast, llada2 = family_models["fast_dllm_v2"], family_models["llada2"]
    assert isinstance(fast, FastDLLMModel) and isinstance(llada2, LLaDA2Model)
    assert type(fast.model).__name__ == "Qwen2ForCausalLM"
    assert fast.trained_block_lengths == (32,)
    for model in (fast, llada2):
        assert model.mask_token_id == tokenizer.mask_token_id
        assert tokenizer.convert_tokens_to_ids(EOS) in model.stop_token_ids


def test_decoding_outside_the_trained_block_lengths_warns(family_models):
    """A Fast-dLLM v2 checkpoint was trained on 32-token blocks: decoding at 8 says so; 32, or AR, does not."""
    fast = family_models["fast_dllm_v2"]
    with pytest.warns(UserWarning, match="trained with block lengths 32; decoding at block length 8"):
        generate(fast, "Tom has two apples.", DecodeConfig(method="dynamic", block_length=8, max_new_tokens=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generate(fast, "Tom has two apples.", DecodeConfig(method="dynamic", block_length=32, max_new_tokens=4))
        generate(fast, "Tom has two apples.", DecodeConfig(method="ar", max_new_tokens=4))


def test_unknown_model_type_is_a_clear_load_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(
        ModelLoadError, match=r"unsupported model \(model_type='llama'.*supported families: sdar, fast_dllm_v2, llada2"
    ):
        load_model(str(tmp_path), device="cpu")


def test_a_transformers_older_than_decoding_needs_is_a_clear_load_error(monkeypatch):
    """The package admits SGLang's transformers 5.19 (the sglang extra); decoding there is refused in one line."""
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.19.0")
    with pytest.raises(ModelLoadError, match=r"decoding needs transformers >= 5\.24, this environment has 5\.19\.0"):
        load_model("bundled", device="cpu")


def test_llada2_checkpoint_the_stock_class_cannot_express_is_refused(family_paths, tmp_path):
    path = shutil.copytree(family_paths["llada2"], tmp_path / "with_output_bias")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "use_bias": True}))
    with pytest.raises(ModelLoadError, match="as llada2: .*use_bias"):
        load_model(str(path), device="cpu")


def test_llada2_weights_land_on_the_stock_parameters(family_paths, family_models):
    """Fused q/k/v rows split in order, experts stacked as [gate | up], router bias renamed."""

    published = load_file(str(Path(family_paths["llada2"]) / "model.safetensors"))
    layer = family_models["llada2"].model.model.layers[1]
    fused = published["model.layers.1.attention.query_key_value.weight"]
    q, k = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    attention = layer.self_attn
    assert torch.equal(torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]), fused)
    assert torch.equal(attention.q_proj.weight, fused[:q]) and torch.equal(attention.v_proj.weight, fused[q + k :])
    assert torch.equal(attention.o_proj.weight, published["model.layers.1.attention.dense.weight"])
    e = 5
    gate_up = layer.mlp.experts.gate_up_proj[e]
    assert torch.equal(
        gate_up,
        torch.cat(
            [
                published[f"model.layers.1.mlp.experts.{e}.gate_proj.weight"],
                published[f"model.layers.1.mlp.experts.{e}.up_proj.weight"],
            ]
        ),
    )
    assert torch.equal(layer.mlp.experts.down_proj[e], published[f"model.layers.1.mlp.experts.{e}.down_proj.weight"])
    assert torch.equal(layer.mlp.gate.e_score_correction_bias, published["model.layers.1.mlp.gate.expert_bias"])
    assert layer.mlp.gate.top_k == LLADA2_MOE["num_experts_per_tok"] and layer.mlp.gate.norm_topk_prob


def test_device_map_is_passed_through_to_from_pretrained(family_paths, monkeypatch):
    seen = {}
    from_pretrained = Qwen2ForCausalLM.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        seen.update(kwargs)
        return from_pretrained(cls, *args, **kwargs)

    monkeypatch.setattr(Qwen2ForCausalLM, "from_pretrained", classmethod(spy))
    model = load_model(family_paths["fast_dllm_v2"], device="cpu", device_map="auto")
    assert seen["device_map"] == "auto"
    assert model.device.type == "cpu"


# -- the catalog ------------------------------------------------------------------


def test_memory_estimate_counts_the_loaded_parameters_exactly(family_paths, family_models):
    for family, path in family_paths.items():
        config = json.loads((Path(path) / "config.json").read_text())
        loaded = sum(p.numel() for p in family_models[family].model.parameters())
        expected = loaded + (
            config["num_experts"] * (LAYERS - 1) if family == "llada2" else 0
        )  # the router bias is a buffer
        assert parameter_count(config) == expected
        assert estimate_memory_gb(config, 4) == pytest.approx(4 * expected / 1e9)


def test_catalog_lists_every_family_with_sizes_that_agree():
    assert {entry.family for entry in MODEL_CATALOG} == {a.family for a in ADAPTERS}
    for entry in MODEL_CATALOG:
        assert entry.bf16_gb == pytest.approx(2 * entry.parameters_billion, rel=0.02), entry.hub_id
    sdar_8b = {
        "model_type": "sdar",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
    }
    assert estimate_memory_gb(sdar_8b) == pytest.approx(16.4, rel=0.01)  # the Hub's four shards


# -- decoding -------------------------------------------------------------------------


def test_fast_dllm_ar_decoding_equals_the_stock_models_greedy_loop(family_models):
    """The right shift is hidden: AR through the adapter is plain causal greedy decoding."""
    model = family_models["fast_dllm_v2"]
    for prompt in random_prompts(model, 4, seed=21):
        ids = list(prompt)
        for _ in range(12):
            ids.append(int(stock_logits(model, ids)[-1].argmax()))
            if ids[-1] in model.stop_token_ids:
                break
        assert generate(model, prompt, DecodeConfig(method="ar", max_new_tokens=12)).output_ids == ids[len(prompt) :]


@pytest.mark.parametrize("span_start, span_length", [(0, 5), (2, 5), (0, 1)])
def test_verifier_equals_sequential_block_size_one_forwards(model, span_start, span_length):
    prompt = random_prompts(model, 1, seed=1)[0][:8]
    block = torch.tensor(random_prompts(model, 1, seed=2)[0][:8] + [0] * 8)[:8]
    session = model.new_session(lambda *a: None)
    model.prefill(session, torch.tensor(prompt), causal=True, block_length=8)
    q = torch.softmax(model.verify_span(session, block, span_start, span_length), dim=-1)
    assert q.shape[0] == span_length
    for k in range(span_length):
        expected = autoregressive_distribution(model, prompt + block[: span_start + k].tolist())
        assert (q[k] - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("block_length, sub_block_length", [(4, None), (8, 4)])
def test_exact_greedy_s2d2_matches_ar_decoding(model, block_length, sub_block_length):
    ar = DecodeConfig(method="ar", max_new_tokens=16)
    for prompt in random_prompts(model, 10, seed=block_length):
        expected = generate(model, prompt, ar).output_ids
        assert (
            generate(model, prompt, exact_greedy_s2d2(block_length, sub_block_length, max_new_tokens=16)).output_ids
            == expected
        )


DECODERS = [
    DecodeConfig(method="ar", max_new_tokens=20),
    DecodeConfig(method="static", block_length=8, steps=4, max_new_tokens=20),
    DecodeConfig(method="dynamic", block_length=8, threshold=0.3, max_new_tokens=20, accounting="official"),
    preset_config("sdar-a", max_new_tokens=20),
    preset_config("hysteresis", max_new_tokens=20),
    DecodeConfig(method="s2d2", block_length=8, max_new_tokens=20, verify=VerifyConfig(policy="ucb")),
    DecodeConfig(method="dynamic", block_length=16, sub_block_length=4, threshold=0.5, max_new_tokens=20),
    DecodeConfig(
        method="s2d2", block_length=4, max_new_tokens=20, sampling=SamplingConfig(temperature=0.8, top_k=20, top_p=0.9)
    ),
]


@pytest.mark.parametrize("config", DECODERS, ids=lambda c: f"{c.method}-B{c.block_length}-{c.verify.policy}")
def test_every_decoder_commits_each_token_once_and_counts_every_model_call(model, config):
    prompt = random_prompts(model, 1, seed=11)[0]
    with CountingForward(model) as counter:
        trace = Decoder(model, config).run(prompt)
    assert trace.summary.nfe == counter.calls == len(trace.forwards)
    assert_each_token_committed_once(trace)
    if config.method == "ar" and model.next_token_from_commit:
        # Each token comes from the row of the forward that stored the one before it.
        assert trace.summary.nfe_by_kind["draft"] == 0
        assert trace.summary.committed_by_outcome["carried"] == len(trace.output_ids)
    elif config.method == "ar":
        assert trace.summary.nfe_by_kind["draft"] == len(trace.output_ids)


# -- fidelity to each family's official decoding ------------------------------------


def test_fast_dllm_commits_a_blocks_first_token_from_the_previous_row_before_drafting(family_models):
    """Official Fast-dLLM v2: the first token of a block is the argmax of the last row of the forward that
    stored the block before it, committed before the first draft, which thus drafts B − 1 masks."""
    model = family_models["fast_dllm_v2"]
    B = 4
    prompt = random_prompts(model, 1, seed=3)[0][:8]  # a block multiple: the prefill predicts block 0's first token
    config = DecodeConfig(method="dynamic", block_length=B, threshold=0.5, max_new_tokens=16, cache_ver=True)
    trace = generate(model, prompt, config)  # causal KV: the stored row is the AR distribution
    for block in sorted({s.block for s in trace.steps}):
        steps = [s for s in trace.steps if s.block == block]
        first, draft = steps[0], steps[1]
        assert first.forwards == [] and [p.outcome for p in first.positions] == ["carried"]
        assert all(p.position != first.positions[0].position for p in draft.positions)
        assert len(draft.positions) == min(B, len(trace.output_ids) - first.positions[0].position) - 1
        context = prompt + trace.output_ids[: first.positions[0].position]
        assert first.positions[0].committed == int(autoregressive_distribution(model, context).argmax())


def test_fast_dllm_stops_on_a_carried_stop_token_before_any_forward(family_models):
    """When a block's carried first token is a stop token the run ends there, as in the official code:
    no draft or verification is spent on a block that is already over."""
    model = family_models["fast_dllm_v2"]
    B, prompt = 4, random_prompts(model, 1, seed=5)[0][:7]
    free = generate(model, prompt, DecodeConfig(method="ar", max_new_tokens=16)).output_ids
    k = next(k for k in range(1, len(free)) if (len(prompt) + k) % B == 0 and free[k] not in free[:k])
    stopper = with_stop_tokens(model, [free[k]])
    for config in (DecodeConfig(method="dynamic", block_length=B, max_new_tokens=16, cache_ver=True),
                   exact_greedy_s2d2(B, max_new_tokens=16)):  # fmt: skip
        trace = generate(stopper, prompt, config)
        assert trace.output_ids == free[: k + 1] and trace.stop_reason == "stop_token"
        last = trace.steps[-1]
        assert [p.outcome for p in last.positions] == ["carried"]
        assert all(f.block < last.block for f in trace.forwards), "a forward ran in the block the carried token ended"


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_checkpoints_with_sliding_window_attention_are_refused(family_paths, tiny_path, tmp_path, family):
    """Cropping the KV cache cannot undo a sliding window's evictions: such a checkpoint must not load."""
    path = tmp_path / family
    shutil.copytree({**family_paths, "sdar": tiny_path}[family], path)
    config = json.loads((path / "config.json").read_text())
    config.update(use_sliding_window=True, sliding_window=16, max_window_layers=1)
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="sliding-window attention .layers 1, window 16. is not supported"):
        load_model(str(path), device="cpu")


def with_stop_tokens(model, stops: list[int]):
    """The same loaded model with other stop tokens (adapters read them per decode)."""
    clone = object.__new__(type(model))
    clone.__dict__.update(model.__dict__, stop_token_ids=sorted(stops))
    return clone


def test_llada2_looks_for_stop_tokens_only_in_complete_blocks(family_models):
    model = family_models["llada2"]
    prompt = random_prompts(model, 1, seed=4)[0][:8]
    config = DecodeConfig(method="dynamic", block_length=8, threshold=0.3, max_new_tokens=24)
    free = generate(model, prompt, config)
    stop = free.output_ids[2]  # a token it generates early inside the first block
    stopped = generate(with_stop_tokens(model, [stop]), prompt, config)
    assert stopped.stop_reason == "stop_token"
    assert stopped.output_ids == free.output_ids[: free.output_ids.index(stop) + 1]
    first_block = {p.position for s in stopped.steps if s.block == 0 for p in s.committed}
    assert first_block == set(range(8)), "the block holding the stop token is decoded to its end"
    eager = with_stop_tokens(model, [stop])
    eager.stop_at_block_end = False  # what the other families do: stop as soon as the stop token is final
    eager_block = {p.position for s in generate(eager, prompt, config).steps if s.block == 0 for p in s.committed}
    assert eager_block < first_block


def test_llada2_post_edit_steps_route_an_empty_span_and_hysteresis_turns_off(family_models):
    model = family_models["llada2"]
    prompt = random_prompts(model, 1, seed=6)[0][:8]
    config = DecodeConfig(
        method="s2d2", block_length=8, threshold=0.5, edit_threshold=0.0, max_post_steps=2, max_new_tokens=16,
        verify=VerifyConfig(policy="hysteresis", score="dynamic", c=0.0, tau_on=-1.0, tau_off=-5.0),
    )  # fmt: skip
    trace = generate(model, prompt, config)
    post = [s for s in trace.steps if not s.positions]
    assert post, "editing-only steps ran"
    for s in post:
        assert s.route is not None and s.route.span_length == 0 and not s.route.verify and s.route.state == "off"


@pytest.mark.parametrize("family", ["sdar", "llada2", "fast_dllm_v2"])
def test_official_accounting_spends_commit_forwards_where_the_official_code_does(every_family, family):
    """SDAR commits every block (the stop block and the last included); LLaDA2 skips the last block and an
    EOS block; Fast-dLLM v2 commits every finished block but none on stop."""
    model = every_family[family]
    B = 4
    prompt = random_prompts(model, 1, seed=8)[0][:8]
    config = DecodeConfig(method="dynamic", block_length=B, threshold=0.5, max_new_tokens=12, accounting="official")
    free = generate(model, prompt, config)
    blocks = len({s.block for s in free.steps if s.forwards})  # Fast-dLLM's trailing token starts no forward
    trailing = family == "fast_dllm_v2"  # its last commit forward predicts one more token, which it appends
    assert len(free.output_ids) == blocks * B + trailing, "the official code decodes whole blocks"
    expected = {"sdar": blocks, "llada2": blocks - 1, "fast_dllm_v2": blocks}[family]
    assert free.summary.nfe_by_kind["commit"] == expected
    stop = free.output_ids[B + 1]  # stops inside the second block
    stopped = generate(with_stop_tokens(model, [stop]), prompt, config)
    assert stopped.stop_reason == "stop_token"
    decoded = len({s.block for s in stopped.steps})
    expected = {"sdar": decoded, "llada2": decoded - 1, "fast_dllm_v2": decoded - 1}[family]
    assert stopped.summary.nfe_by_kind["commit"] == expected


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
@pytest.mark.parametrize("method", ["dynamic", "s2d2"])
def test_official_budgets_with_a_remainder_decode_the_official_blocks(every_family, family, method):
    """A budget that is not a multiple of B under the official accounting, for the baseline and S2D2: SDAR
    decodes and keeps whole blocks, LLaDA2 decodes whole blocks and cuts to the budget, Fast-dLLM v2
    decodes ``max_new_tokens // B`` blocks; the tokens are those of the fused run, the commits the family's.
    Fast-dLLM v2 appends the token its last commit forward predicts, as its official code does."""
    model = with_stop_tokens(every_family[family], [])
    B, prompt = 4, random_prompts(every_family[family], 1, seed=8)[0][:8]
    config = DecodeConfig(method=method, block_length=B, threshold=0.5, max_new_tokens=11, cache_ver=True,
                          accounting="official", verify=VerifyConfig(policy="always", acceptance="greedy"))  # fmt: skip
    trace = generate(model, prompt, config)
    length, blocks = {"sdar": (12, 3), "llada2": (11, 3), "fast_dllm_v2": (9, 2)}[family]
    assert len(trace.output_ids) == length and len({s.block for s in trace.steps if s.forwards}) == blocks
    assert trace.summary.nfe_by_kind["commit"] == {"sdar": 3, "llada2": 2, "fast_dllm_v2": 2}[family]
    fused = generate(model, prompt, config.replace(accounting="fused", max_new_tokens=12))
    assert trace.output_ids == fused.output_ids[:length]
