"""Exact S2D2 is the model's own autoregressive decoding, on every family.

Greedy: token for token. Real forwards on tiny random checkpoints.
"""

from __future__ import annotations

import pytest
import torch
from helpers import exact_greedy_s2d2, random_prompts

from components.views import text_panel
from s2d2.__main__ import main
from s2d2.config import DecodeConfig, config_from_settings, preset_config
from s2d2.decode import generate
from s2d2.models import load_model
from s2d2.trace import Trace

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
