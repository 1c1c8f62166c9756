"""Exact S2D2 is the model's own autoregressive decoding, on every family.

Greedy: token for token, over a seeded fuzz of checkpoint shapes and decoding
settings, each run compared with the stock network's own greedy loop
(tests/references.py, no engine code). Sampling: the same joint distribution,
checked against the AR distribution that reference computes by enumeration on
a small vocabulary. Every configuration compared is one ``DecodeConfig.exactness()``
calls exact, and every one it is declared exact for is decoded. Real forwards on
tiny random networks, built in memory.
Run with ``pytest -s`` to see the counts.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from helpers import chi_square, chi_square_bound, exact_greedy_s2d2, random_prompts
from references import greedy_reference, next_token_logits, sampling_probabilities
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from components.views import text_panel
from s2d2.__main__ import main
from s2d2.batch import generate_batch
from s2d2.config import DecodeConfig, config_from_settings, preset_config
from s2d2.decode import generate
from s2d2.models import load_model
from s2d2.models.fastdllm import FastDLLMModel
from s2d2.models.llada2 import LLaDA2AsGlm4MoeForCausalLM, LLaDA2Model, glm4_moe_config_from_llada2
from s2d2.models.sdar import SDARModel
from s2d2.policies import ESTIMATORS
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


# Drafts and verifier at temperature 0.8 within the 0.9 nucleus; B = 4 in sub-blocks of 2, lookahead on; four
# tokens after SAMPLED_PROMPT span both sub-blocks of the first block and the start of a second block.
SAMPLED_EXACT = config_from_settings(
    "exact", block_length=4, sub_block_length=2, steps=2, lookahead=True, max_new_tokens=4, temperature=0.8,
    top_p=0.9, acceptance="stochastic",
    trace_top_k=0,  # thousands of runs: no per-position top-k in their traces
)  # fmt: skip

# Configurations exactness() declares exact, each of them decoded in this module: the greedy ones against the
# stock reference (test_each_declared_exact_greedy_setting_writes_the_stock_reference_tokens), the sampled one
# by the sampled test.
DECLARED_EXACT = {
    "ar": DecodeConfig(method="ar"),
    "dynamic at B = 1": DecodeConfig(method="dynamic", block_length=1),
    "sdar-b, greedy acceptance": preset_config("sdar-b", verify={"acceptance": "greedy"}),  # c = 0, τ_score = 0
    "score c=4 τ=−5": config_from_settings("exact", policy="score", c=4.0, tau_score=-5.0),  # E[K] − 4 ≥ −5 always
    "hysteresis that stays on": config_from_settings("exact", policy="hysteresis", c=0.0, tau_on=-0.5, tau_off=-1.0),
    "sub-blocks of 4, one token a step": config_from_settings("exact", sub_block_length=4, steps=4),
    "official accounting": config_from_settings("exact", accounting="official"),
    "sampled at 0.8, top-p 0.9, stochastic acceptance": SAMPLED_EXACT,
}
GREEDY_DECLARED_EXACT = [name for name, config in DECLARED_EXACT.items() if config.sampling.greedy]


@pytest.mark.parametrize(
    "config, exact",
    [
        *((config, True) for config in DECLARED_EXACT.values()),
        (DecodeConfig(method="ar", edit_threshold=0.9), False),
        (DecodeConfig(method="dynamic", block_length=4), False),
        (preset_config("sdar-b"), False),  # the official random acceptance of argmax drafts
    ],
)
def test_exactness_of_the_presets_and_of_routers_that_cannot_skip(config, exact):
    assert config.exactness().exact == exact


def test_every_setting_declared_exact_is_decoded():
    """A setting declared exact is decoded, greedy against the stock reference or sampled by the sampled test."""
    for name, config in DECLARED_EXACT.items():
        assert config.exactness().exact, name
        decoded = name in GREEDY_DECLARED_EXACT if config.sampling.greedy else config == SAMPLED_EXACT
        assert decoded, f"{name} is declared exact but no test decodes it"
    assert len(GREEDY_DECLARED_EXACT) == len(DECLARED_EXACT) - 1


@pytest.mark.parametrize("name", GREEDY_DECLARED_EXACT)
@pytest.mark.parametrize("family", FAMILIES)
def test_each_declared_exact_greedy_setting_writes_the_stock_reference_tokens(every_family, family, name):
    """19 tokens (two blocks at B = 16) after a random prompt, token for token the stock network's greedy loop."""
    model = every_family[family]
    (prompt,) = random_prompts(model, 1, seed=len(name))
    config = DECLARED_EXACT[name].replace(max_new_tokens=19)
    mask_token_id = None if family in RIGHT_SHIFTED else model.tokenizer.mask_token_id
    reference, _ = greedy_reference(model.model, prompt, decoded_length(model, config, len(prompt)), mask_token_id)
    got = generate(model, prompt, config).output_ids
    assert got == reference[: next((k + 1 for k, t in enumerate(reference) if t in model.stop_token_ids), None)]


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
CHECKPOINTS, CONFIGS_PER_CHECKPOINT = 60, 2  # one prompt per checkpoint
TIE_MARGIN = 1e-4  # reference top-2 logit margin under which a case may be decided by float rounding
MOST_EXCUSED = 2  # ties excused per family
TWIN_PAIRS, TWIN_SPREAD = 64, 2e-4  # near-twin tokens' output rows differ by this much per coordinate
RIGHT_SHIFTED = {"fast_dllm_v2"}  # the family whose row i predicts token i + 1
FUZZ_COVERAGE = (
    "budget not a multiple of B", "prompt not a multiple of B", "lookahead", "sub-blocks", "a second block",
    "official accounting", "a stop token inside a block",
)  # fmt: skip

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
    new = rng.randint(5, 24)
    while B > 1 and new % B == 0:
        new = rng.randint(5, 24)
    sub = rng.choice([d for d in (B, B // 2, B // 4) if d >= 1])
    router = ALWAYS_VERIFYING[rng.choice(list(ALWAYS_VERIFYING))]
    return config_from_settings(
        method="s2d2", block_length=B, sub_block_length=sub, steps=sub, max_new_tokens=new, cache_ver=True,
        draft_ver=rng.random() < 0.5, lookahead=rng.random() < 0.5, lookahead_threshold=rng.choice([0.0, 0.5]),
        accounting=rng.choice(["fused", "official"]), acceptance="greedy", estimator=rng.choice(ESTIMATORS),
        seed=seed, **router,
    )  # fmt: skip


def with_twin_tokens(model, rng: random.Random):
    """The model, with ``TWIN_PAIRS`` pairs of ordinary tokens made near-twins: the second of a pair
    takes the first one's output row plus noise of ``TWIN_SPREAD`` per coordinate.

    Wherever one of a pair leads, its twin is a close second, a few thousandths
    of a logit behind, so AR often chooses between near-ties, and the draft, from
    other hidden states, sometimes prefers the other twin. An acceptance that
    takes a draft whose probability is merely close to the top one commits the
    wrong twin there.
    """
    special = set(model.tokenizer.all_special_ids)
    tokens = rng.sample([i for i in range(len(model.tokenizer)) if i not in special], 2 * TWIN_PAIRS)
    rows = model.model.get_output_embeddings().weight
    noise = torch.randn(TWIN_PAIRS, rows.shape[1], generator=torch.Generator().manual_seed(rng.randrange(1 << 31)))
    with torch.no_grad():
        rows[tokens[1::2]] = rows[tokens[0::2]] + TWIN_SPREAD * noise
    return model


def crosses_a_block(prompt_length: int, decoded: int, block_length: int) -> bool:
    """Whether the decoded tokens reach a second block."""
    return decoded > 0 and (prompt_length + decoded - 1) // block_length > prompt_length // block_length


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_exact_s2d2_equals_ar_over_random_shapes_and_settings(tokenizer, family):
    """Every exact configuration writes the stock network's greedy tokens (tests/references.py),
    on random shapes, prompts, budgets and stop tokens, half the checkpoints with near-twin tokens.

    A case may differ from the reference only where the reference's own top-2
    logit margin, at the first differing position, is under ``TIE_MARGIN``
    (float rounding decides such a tie); at most ``MOST_EXCUSED`` such cases per family.
    """
    rng = random.Random(f"fuzz-{family}")
    mask_token_id = None if family in RIGHT_SHIFTED else tokenizer.mask_token_id
    cases = excused = twinned = 0
    covered = dict.fromkeys(FUZZ_COVERAGE, 0)
    for checkpoint in range(CHECKPOINTS):
        model = random_network(family, rng, tokenizer)
        if checkpoint % 2:
            model, twinned = with_twin_tokens(model, rng), twinned + 1
        eos = list(model.stop_token_ids)
        (prompt,) = random_prompts(model, 1, seed=rng.randrange(1 << 16))
        configs = [random_exact_config(rng, seed=cases + i) for i in range(CONFIGS_PER_CHECKPOINT)]
        lengths = [decoded_length(model, config, len(prompt)) for config in configs]
        reference, margins = greedy_reference(model.model, prompt, max(lengths), mask_token_id)
        for config, length in zip(configs, lengths):
            assert config.exactness().exact, config.exactness().reasons
            if config.block_length > 1:
                assert not config.replace(cache_ver=False).exactness().exact
            B, expected, stops = config.block_length, reference[:length], set(eos)
            inside = [k for k in range(len(expected)) if (len(prompt) + k + 1) % B]
            stopped_inside = bool(inside) and rng.random() < 0.4
            if stopped_inside:  # a stop token that AR writes inside a block
                stops.add(expected[rng.choice(inside)])
            expected = expected[: next((k + 1 for k, t in enumerate(expected) if t in stops), length)]
            model.stop_token_ids = sorted(stops)
            try:
                got = generate(model, prompt, config).output_ids
            finally:
                model.stop_token_ids = eos
            cases += 1
            features = {
                "budget not a multiple of B": B > 1 and config.max_new_tokens % B != 0,
                "prompt not a multiple of B": len(prompt) % B != 0,
                "lookahead": B > 1 and config.lookahead,
                "sub-blocks": config.sub_block_length < B,
                "a second block": crosses_a_block(len(prompt), len(expected), B),
                "official accounting": config.accounting == "official",
                "a stop token inside a block": stopped_inside,
            }
            covered.update({name: covered[name] + on for name, on in features.items()})
            if got != expected:
                first = next((k for k, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                tie = first < min(len(got), len(expected)) and margins[first] < TIE_MARGIN
                assert tie, (
                    f"checkpoint {checkpoint}, prompt {prompt}, {config}: S2D2 {got} != reference {expected}, "
                    f"first at {first}, reference margin there {margins[first] if first < len(margins) else None}"
                )
                excused += 1
    print(
        f"\n[{family}] greedy fuzz against the stock reference: {cases} cases on {CHECKPOINTS} random checkpoints "
        f"({twinned} with near-twin tokens), {excused} excused as ties (margin < {TIE_MARGIN} where they first differ); "
        + ", ".join(f"{name} {count}" for name, count in covered.items())
    )
    assert excused <= MOST_EXCUSED
    assert min(covered.values()) >= cases // 10, covered


# -- the stochastic statement: sampled exact S2D2 follows the AR distribution -----------

SMALL_VOCAB, RUNS, FALSE_FAILURE = 6, 2_500, 1e-3  # 7,500 sampled runs over the three families
SAMPLED_PROMPT = [3, 4, 5, 4, 3]  # five tokens: the first block's sub-block 0 holds one mask, sub-block 1 two


def ar_distribution(network, prompt: list[int], length: int, mask_token_id: int | None, sampling) -> torch.Tensor:
    """P(x1, ..., x_length) of AR sampling after ``prompt``, by enumeration, as a ``(V,) * length`` tensor,
    from the stock network's full-recompute logits (tests/references.py), not the engine's."""
    V = network.config.vocab_size
    joint = torch.ones(1, dtype=torch.float64)
    for known in range(length):
        prefixes = torch.tensor(list(itertools.product(range(V), repeat=known))).long().reshape(V**known, known)
        logits = next_token_logits(
            network, torch.cat([torch.tensor(prompt).expand(len(prefixes), -1), prefixes], 1), mask_token_id
        )
        joint = (joint[:, None] * sampling_probabilities(logits, sampling.temperature, sampling.top_p)).reshape(-1)
    return joint.reshape((V,) * length)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_exact_s2d2_follows_the_ar_distribution(tokenizer, family):
    """2,500 sampled runs of ``SAMPLED_EXACT``: their four tokens against the enumerated AR distribution.

    No run may write a sequence AR cannot (outside the nucleus). Pearson's
    chi-square of the joint distribution, and of each position's marginal,
    must stay under the quantile that sampling noise alone exceeds with
    probability ``FALSE_FAILURE / 5`` (Bonferroni over the five statistics, so the
    test fails by chance with probability at most 1e-3; cells expecting fewer
    than five runs are pooled). Rows are decoded in batches: each row decodes
    as alone, with its own seed.
    """
    fixed = dict(vocab_size=SMALL_VOCAB, num_hidden_layers=1, hidden_size=32, tie_word_embeddings=False)
    model = random_network(family, random.Random(f"sampled-{family}"), tokenizer, **fixed)
    model.stop_token_ids = []  # every run writes its four tokens
    mask_token_id = None if family in RIGHT_SHIFTED else tokenizer.mask_token_id
    length = SAMPLED_EXACT.max_new_tokens
    p = ar_distribution(model.model, SAMPLED_PROMPT, length, mask_token_id, SAMPLED_EXACT.sampling)
    assert SAMPLED_EXACT.exactness().exact
    traces = generate_batch(model, [SAMPLED_PROMPT] * RUNS, SAMPLED_EXACT, seeds=range(RUNS), batch_size=128)
    outputs = torch.tensor([trace.output_ids for trace in traces])
    counts = (
        torch.zeros(p.numel(), dtype=torch.float64)
        .index_add_(
            0, (outputs * SMALL_VOCAB ** torch.arange(length - 1, -1, -1)).sum(1), torch.ones(RUNS, dtype=torch.float64)
        )
        .reshape(p.shape)
    )
    impossible = int(counts[p == 0].sum())
    assert impossible == 0, f"{family}: {impossible} runs wrote a sequence outside AR's nucleus"
    views = {"joint": (counts, p)}
    for position in range(length):
        others = tuple(d for d in range(length) if d != position)
        views[f"x{position + 1}"] = (counts.sum(others), p.sum(others))
    report = []
    for name, (observed, expected) in views.items():
        chi2, dof = chi_square(observed[expected > 0], expected[expected > 0])
        bound = chi_square_bound(dof, FALSE_FAILURE / len(views))
        report.append(f"{name} chi-square {chi2:.1f} on {dof} dof (bound {bound:.1f})")
        assert chi2 < bound, f"{family}: {report[-1]}"
    print(f"\n[{family}] sampled: {RUNS} runs over {int((p > 0).sum())} possible outcomes; " + "; ".join(report))
