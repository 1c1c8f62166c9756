"""Exact S2D2 is the model's own autoregressive decoding, on every family.

Greedy: token for token, over a seeded fuzz of checkpoint shapes and decoding
settings, each run compared with AR (a differential test). Sampling: the same
distribution, checked against the AR distribution computed by enumeration on a
small vocabulary. Every configuration compared is one ``DecodeConfig.exactness()``
calls exact. Real forwards on tiny random networks, built in memory.
Run with ``pytest -s`` to see the counts.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from helpers import chi_square, chi_square_bound, exact_greedy_s2d2, random_prompts
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from components.views import text_panel
from s2d2 import masks
from s2d2.__main__ import main
from s2d2.config import DecodeConfig, config_from_settings, preset_config
from s2d2.decode import generate
from s2d2.models import load_model
from s2d2.models.fastdllm import FastDLLMModel
from s2d2.models.llada2 import LLaDA2AsGlm4MoeForCausalLM, LLaDA2Model, glm4_moe_config_from_llada2
from s2d2.models.sdar import SDARModel
from s2d2.policies import ESTIMATORS
from s2d2.sampling import SamplingConfig, logits_to_probs
from s2d2.trace import Trace
from s2d2.training.tokenizer import EOS

FAMILIES = ("sdar", "fast_dllm_v2", "llada2")

pytestmark = pytest.mark.usefixtures("one_thread")


def mask_emitting(path: str):
    """A fresh copy of a checkpoint whose output row for the mask token is scaled up,
    so that autoregressive decoding often emits the mask token id: with random
    weights it is an ordinary vocabulary entry."""
    model = load_model(path, device="cpu")
    with torch.no_grad():
        model.model.get_output_embeddings().weight[model.mask_token_id] *= 2.0
    return model


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_a_committed_mask_token_id_stays_committed(family_paths, tiny_path, family):
    """What is masked is state: a committed token equal to the mask id is not drafted over."""
    model = mask_emitting({**family_paths, "sdar": tiny_path}[family])
    ar = DecodeConfig(method="ar", max_new_tokens=16)
    emitted = 0
    for prompt in random_prompts(model, 6, seed=3):
        expected = generate(model, prompt, ar).output_ids
        emitted += model.mask_token_id in expected
        for block_length in (4, 8):
            assert generate(model, prompt, exact_greedy_s2d2(block_length, max_new_tokens=16)).output_ids == expected
    assert emitted, "AR must emit the mask token id for this test to mean anything"


# -- exactness as a declared property ---------------------------------------------------

# Each setting alone, on top of the exact preset, and a word its reason must contain.
BREAKS_EXACTNESS = {
    "cache_ver off": (dict(cache_ver=False), "cache_ver"),
    "score router": (dict(policy="score", c=1.0), "router"),
    "dynamic score router": (dict(policy="score", score="dynamic", c=1.0, tau_score=0.0), "router"),
    "hysteresis router": (dict(policy="hysteresis"), "router"),
    "ucb router": (dict(policy="ucb"), "router"),
    "minimum span > 1": (dict(policy="min_span", tau_span=2), "router"),
    "fallback commits": (dict(steps=8), "fallback"),
    "ratio threshold": (dict(ratio_threshold=0.5), "ratio threshold"),
    "threshold commits outside the span": (dict(always_check_high_confidence=True), "outside the verified span"),
    "no resampling": (dict(allow_resample=False), "allow_resample"),
    "ratio tempering": (dict(ratio_tempering=0.5), "tempering"),
    "editing": (dict(edit_threshold=0.9, lookahead=False), "editing"),
    "drafts sampled, verifier greedy": (dict(temperature=0.7), "temperature 0.7"),
    "drafts greedy, verifier sampled": (dict(acceptance="stochastic"), "temperature 0"),
}


def test_the_exact_preset_is_exact_and_says_so():
    exactness = preset_config("exact").exactness()
    assert exactness.exact and exactness.reasons == ()
    assert exactness.describe() == "exact: output ≡ AR"


@pytest.mark.parametrize("case", list(BREAKS_EXACTNESS))
def test_each_reason_alone_makes_a_configuration_inexact_and_is_named(case):
    settings, word = BREAKS_EXACTNESS[case]
    exactness = config_from_settings("exact", **settings).exactness()
    assert not exactness.exact
    assert len(exactness.reasons) == 1 and word in exactness.reasons[0], exactness.reasons
    assert exactness.describe().startswith("not exact: ")


@pytest.mark.parametrize(
    "config, exact",
    [
        (DecodeConfig(method="ar"), True),
        (DecodeConfig(method="ar", edit_threshold=0.9), False),
        (DecodeConfig(method="dynamic", block_length=4), False),
        (DecodeConfig(method="dynamic", block_length=1), True),
        (preset_config("sdar-b", verify={"acceptance": "greedy"}), True),  # c = 0, τ_score = 0 verifies every span
        (preset_config("sdar-b"), False),  # the official random acceptance of argmax drafts
        (config_from_settings("exact", policy="score", c=4.0, tau_score=-5.0), True),  # E[K] − 4 ≥ −5 always
        (config_from_settings("exact", policy="hysteresis", c=0.0, tau_on=-0.5, tau_off=-1.0), True),
        (config_from_settings("exact", temperature=0.8, acceptance="stochastic"), True),
        (config_from_settings("exact", sub_block_length=4, steps=4), True),
        (config_from_settings("exact", accounting="official"), True),
    ],
)
def test_exactness_of_the_presets_and_of_routers_that_cannot_skip(config, exact):
    assert config.exactness().exact == exact


def test_cli_prints_exactness_with_the_summary(tiny_path, capsys):
    common = ["generate", "--model", tiny_path, "--prompt", "a b c", "--max-new-tokens", "6", "--preset", "exact"]
    assert main(common) == 0
    assert capsys.readouterr().out.rstrip().endswith("exact: output ≡ AR")
    assert main([*common, "--no-cache-ver"]) == 0
    assert "not exact: cache_ver off" in capsys.readouterr().out


def test_trace_and_dashboard_show_exactness_and_old_traces_still_load(tiny_model):
    config = config_from_settings("exact", cache_ver=False, max_new_tokens=8)
    trace = generate(tiny_model, "Ann has 3 pens.", config)
    assert trace.exactness == config.exactness().to_dict() and not trace.exactness["exact"]
    assert Trace.from_json(trace.to_json()) == trace
    version_2 = {k: v for k, v in trace.to_dict().items() if k != "exactness"} | {"schema_version": 2}
    assert Trace.from_dict(version_2).exactness == trace.exactness
    panel = text_panel({"S2D2": trace}, "S2D2")
    assert "not exact: cache_ver off" in panel and 'data-exact="false"' in panel
    exact = generate(tiny_model, "Ann has 3 pens.", preset_config("exact", max_new_tokens=8))
    assert "exact: output ≡ AR" in text_panel({"S2D2": exact}, "S2D2")


# -- the differential fuzz: greedy exact S2D2 ≡ AR --------------------------------------

INIT_STD = 0.15  # sharp, context-dependent predictions, as in checkpoints.py
CHECKPOINTS, CONFIGS_PER_PROMPT = 6, 4  # two prompts per checkpoint
TIE_MARGIN = 1e-4  # AR top-2 logit margin under which a case may be decided by float rounding

# Each router with settings under which it verifies every span (UCB never can: exactness() says so).
ALWAYS_VERIFYING = {
    "always": dict(policy="always"),
    "min_span 1": dict(policy="min_span", tau_span=1),
    "score c=0": dict(policy="score", c=0.0, tau_score=0.0),
    "score c=4 τ=−5": dict(policy="score", c=4.0, tau_score=-5.0),
    "dynamic score c=0": dict(policy="score", score="dynamic", c=0.0, tau_score=0.0),
    "hysteresis": dict(policy="hysteresis", c=0.0, tau_on=-0.5, tau_off=-1.0),
}


def random_network(family: str, rng: random.Random, tokenizer, **fixed):
    """A family adapter over a random tiny network of a random shape (``fixed`` pins fields).

    Shapes vary in hidden size, heads and KV heads, head size, layers,
    vocabulary padding beyond the tokenizer, tied or untied embeddings and, for
    LLaDA2, the experts. In some, the mask token's output row is scaled up so
    that AR emits the mask token id, which random weights make an ordinary token.
    """
    heads, kv_heads = rng.choice([(4, 2), (2, 1), (4, 4), (2, 2), (4, 1)])
    fields = {
        "vocab_size": len(tokenizer) + rng.choice([0, 6, 64]),
        "hidden_size": rng.choice([32, 48, 64]),
        "num_hidden_layers": rng.choice([1, 2, 3]),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": rng.choice([8, 16]),
        "intermediate_size": rng.choice([64, 96]),
        "tie_word_embeddings": rng.random() < 0.5,
        "max_position_embeddings": 256,
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS),
        **fixed,
    }
    torch.manual_seed(rng.randrange(1 << 31))
    if family == "sdar":
        network, adapter = Qwen3ForCausalLM(Qwen3Config(**fields)), SDARModel
    elif family == "fast_dllm_v2":
        fields.pop("head_dim")
        network, adapter = Qwen2ForCausalLM(Qwen2Config(**fields)), FastDLLMModel
    else:
        experts = rng.choice([4, 8, 16])
        groups = rng.choice([g for g in (1, 2, 4) if experts // g >= 2])
        top_groups = rng.randint(1, groups)
        moe = {
            "num_experts": experts,
            "n_group": groups,
            "topk_group": top_groups,
            "num_experts_per_tok": rng.randint(1, min(4, top_groups * experts // groups)),
            "num_shared_experts": rng.choice([1, 2]),
            "moe_intermediate_size": rng.choice([16, 32]),
            "first_k_dense_replace": rng.choice([0, 1]),
            "use_bias": False,
        }
        network, adapter = LLaDA2AsGlm4MoeForCausalLM(glm4_moe_config_from_llada2({**fields, **moe})), LLaDA2Model
    with torch.no_grad():
        for name, p in network.named_parameters():
            if p.dim() >= 2 or name.endswith("proj.bias"):
                p.normal_(0, INIT_STD)
            elif name.endswith("e_score_correction_bias"):
                p.normal_(0, 0.1)
        model = adapter(network, tokenizer, tokenizer.mask_token_id, [fields["eos_token_id"]], family)
        if rng.random() < 0.5:
            network.get_output_embeddings().weight[model.mask_token_id] *= 2.0
    return model


def ar_margins(model, prompt: list[int], output: list[int]) -> list[float]:
    """AR's top-1 minus top-2 logit at each output position (one verifier forward, which is AR)."""
    session = model.new_session(lambda *a: None)
    model.prefill(session, torch.tensor(prompt), causal=True, block_length=1)
    top = model.verify_span(session, torch.tensor(output), 0, len(output)).topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def decoded_length(model, config: DecodeConfig, prompt_length: int) -> int:
    """Tokens a run decodes when no stop token comes: the budget, or the official code's blocks."""
    B, new = config.block_length, config.max_new_tokens
    budget = model.official.budget if config.accounting == "official" else "exact"
    if budget == "floor_blocks":  # and the token the last commit forward predicts, once a forward stored the prompt
        decoded = prompt_length // B * B + new // B * B - prompt_length
        return decoded + 1 if decoded >= 0 else 0
    if budget == "whole_blocks":
        return -(-(prompt_length + new) // B) * B - prompt_length
    return new


def random_exact_config(rng: random.Random, seed: int) -> DecodeConfig:
    """A random always-verifying greedy configuration with a causal cache: one exactness() calls exact."""
    B = rng.choice([1, 2, 4, 8, 16])
    new = rng.randint(5, 40)
    while B > 1 and new % B == 0:
        new = rng.randint(5, 40)
    sub = rng.choice([d for d in (B, B // 2, B // 4) if d >= 1])
    router = ALWAYS_VERIFYING[rng.choice(list(ALWAYS_VERIFYING))]
    return config_from_settings(
        method="s2d2", block_length=B, sub_block_length=sub, steps=sub, max_new_tokens=new, cache_ver=True,
        draft_ver=rng.random() < 0.5, lookahead=rng.random() < 0.5, lookahead_threshold=rng.choice([0.0, 0.5]),
        accounting=rng.choice(["fused", "official"]), acceptance="greedy", estimator=rng.choice(ESTIMATORS),
        seed=seed, **router,
    )  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_exact_s2d2_equals_ar_over_random_shapes_and_settings(tokenizer, family):
    """Every exact configuration writes AR's tokens, on random shapes, prompts, budgets and stop tokens.

    A case whose first difference from AR comes at or after a near-tie of AR
    (top-2 margin under ``TIE_MARGIN``) is skipped and counted, not failed.
    """
    rng = random.Random(f"fuzz-{family}")
    cases = ties = mask_emitting = stopped_inside = 0
    for checkpoint in range(CHECKPOINTS):
        model = random_network(family, rng, tokenizer)
        eos = list(model.stop_token_ids)
        for prompt in random_prompts(model, 2, seed=rng.randrange(1 << 16)):
            configs = [random_exact_config(rng, seed=cases + i) for i in range(CONFIGS_PER_PROMPT)]
            lengths = [decoded_length(model, config, len(prompt)) for config in configs]
            reference = generate(model, prompt, DecodeConfig(method="ar", max_new_tokens=max(lengths))).output_ids
            margins = ar_margins(model, prompt, reference)
            mask_emitting += model.mask_token_id in reference
            for config, length in zip(configs, lengths):
                assert config.exactness().exact, config.exactness().reasons
                if config.block_length > 1:
                    assert not config.replace(cache_ver=False).exactness().exact
                expected, stops = reference[:length], set(eos)
                inside = [k for k in range(len(expected)) if (len(prompt) + k + 1) % config.block_length]
                if inside and rng.random() < 0.4:  # a stop token that AR writes inside a block
                    stops.add(expected[rng.choice(inside)])
                    stopped_inside += 1
                expected = expected[: next((k + 1 for k, t in enumerate(expected) if t in stops), length)]
                model.stop_token_ids = sorted(stops)
                try:
                    got = generate(model, prompt, config).output_ids
                finally:
                    model.stop_token_ids = eos
                cases += 1
                if got != expected:
                    first = next(
                        (k for k, (a, b) in enumerate(zip(got, expected)) if a != b), len(min(got, expected, key=len))
                    )
                    assert min(margins[: first + 1]) < TIE_MARGIN, (
                        f"checkpoint {checkpoint}, prompt {prompt}, {config}: S2D2 {got} != AR {expected}"
                    )
                    ties += 1
    print(
        f"\n[{family}] greedy fuzz: {cases} cases on {CHECKPOINTS} random checkpoints, {ties} skipped as ties "
        f"(AR top-2 margin < {TIE_MARGIN}); {stopped_inside} with a stop token inside a block; "
        f"AR emitted the mask token id in {mask_emitting} of {2 * CHECKPOINTS} references"
    )
    assert ties <= cases // 10


# -- the stochastic statement: sampled exact S2D2 follows the AR distribution -----------

SMALL_VOCAB, GENERATED, RUNS = 6, 3, 1000
SAMPLED = SamplingConfig(temperature=1.0)  # drafts and verifier at the same temperature


def ar_distribution(model, prompt: list[int]) -> torch.Tensor:
    """P(x1, x2, x3) of AR decoding after ``prompt``, by enumeration, as a ``(V, V, V)`` tensor.

    Computed with plain causal forwards of the stock network, not the engine:
    a position-aligned family predicts position ``i`` from a mask token there,
    a right-shifted one from the row before it.
    """
    V = model.vocab_size
    joint = torch.ones(1)
    for length in range(GENERATED):
        prefixes = torch.tensor(list(itertools.product(range(V), repeat=length))).long().reshape(V**length, length)
        ids = torch.cat([torch.tensor(prompt).expand(len(prefixes), -1), prefixes], dim=1)
        if not model.next_token_from_commit:
            ids = torch.cat([ids, torch.full((len(ids), 1), model.mask_token_id)], dim=1)
        n = ids.shape[1]
        mask = masks.additive_mask(masks.causal(n), 0, model.dtype).expand(len(ids), -1, -1, -1)
        with torch.no_grad():
            logits = model.model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(n).expand_as(ids)).logits
        joint = (joint[:, None] * logits_to_probs(logits[:, -1], SAMPLED)).reshape(-1)
    return joint.reshape((V,) * GENERATED)


def total_variation(counts: torch.Tensor, p: torch.Tensor) -> float:
    return 0.5 * float((counts / counts.sum() - p).abs().sum())


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_exact_s2d2_follows_the_ar_distribution(tokenizer, family):
    """A thousand sampled runs: their first three tokens against the enumerated AR distribution.

    Pearson's chi-square of the joint and of each position's marginal must stay
    within its mean plus four standard deviations under sampling noise, and the
    total-variation distance within that of as many samples drawn from AR itself.
    The marginals are what catches a wrong correction (drawn from ``q`` instead
    of the residual ``(q − p)+``), which the joint's many cells dilute.
    """
    fixed = dict(vocab_size=SMALL_VOCAB, num_hidden_layers=1, hidden_size=32, tie_word_embeddings=False)
    model = random_network(family, random.Random(f"sampled-{family}"), tokenizer, **fixed)
    model.stop_token_ids = []  # every run writes its three tokens
    prompt = [3, 4, 5, 4, 3]  # B = 4: one draft proposes all three tokens, so rejections are frequent
    p = ar_distribution(model, prompt)
    config = config_from_settings(
        "exact", block_length=4, steps=4, max_new_tokens=GENERATED, temperature=1.0, acceptance="stochastic",
        trace_top_k=0,  # thousands of runs: no per-position top-k in their traces
    )  # fmt: skip
    assert config.exactness().exact
    counts = torch.zeros_like(p)
    for seed in range(RUNS):
        counts[tuple(generate(model, prompt, config.replace(seed=seed)).output_ids)] += 1
    views = {"joint": (counts, p)}
    for position in range(GENERATED):
        others = tuple(d for d in range(GENERATED) if d != position)
        views[f"x{position + 1}"] = (counts.sum(others), p.sum(others))
    generator = torch.Generator().manual_seed(0)
    flat = p.reshape(-1)
    noise = torch.tensor(
        [total_variation(torch.multinomial(flat, RUNS, True, generator=generator).bincount(minlength=len(flat)), flat)
         for _ in range(200)]
    )  # fmt: skip
    tv = total_variation(counts.reshape(-1), flat)
    report = []
    for name, (observed, expected) in views.items():
        chi2, dof = chi_square(observed, expected)
        bound = chi_square_bound(dof)
        report.append(f"{name} chi-square {chi2:.1f} on {dof} dof (bound {bound:.1f})")
        assert chi2 < bound, f"{family}: {report[-1]}"
    print(
        f"\n[{family}] sampled: {RUNS} runs over {flat.numel()} outcomes; " + "; ".join(report)
        + f"; TV {tv:.3f}, sampling noise {noise.mean():.3f} ± {noise.std():.3f}"
    )  # fmt: skip
    assert tv < noise.mean() + 4 * noise.std()
