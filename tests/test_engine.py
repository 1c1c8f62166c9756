"""The engine's correctness properties, with real forwards on tiny random models."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import CountingForward, assert_each_token_committed_once, exact_greedy_s2d2, random_prompts

from s2d2 import masks
from s2d2.blocks import first_masked_span
from s2d2.config import DecodeConfig, VerifyConfig, config_from_settings, preset_config
from s2d2.decode import Decoder, generate
from s2d2.rules import rule_commits
from s2d2.sampling import SamplingConfig
from s2d2.trace import Trace


def session_forward_logits(model, ids: list[int], block_length: int, causal: bool):
    """Logits of one uncached forward over ``ids`` with a block-causal (or causal) mask."""
    x = torch.tensor(ids)
    allowed = masks.causal(len(ids)) if causal else masks.block_causal(len(ids), block_length)
    mask = masks.additive_mask(allowed, 0, torch.float32)
    with torch.no_grad():
        return model.model(input_ids=x[None], attention_mask=mask, position_ids=torch.arange(len(ids))[None]).logits[0]


def test_verifier_equals_sequential_block_size_one_forwards(tiny_model):
    model = tiny_model
    prompt = random_prompts(model, 1, seed=1)[0][:8]
    B, span_start, span_length = 8, 2, 6
    block = torch.tensor(random_prompts(model, 1, seed=2)[0][:B] + [0] * B)[:B]
    session = model.new_session(lambda *a: None)
    model.prefill(session, torch.tensor(prompt), causal=True, block_length=B)
    q = torch.softmax(model.verify_span(session, block, span_start, span_length), dim=-1)
    for k in range(span_length):
        i = span_start + k
        # Block size 1: the AR distribution of position i given the prompt and block[:i].
        ids = prompt + block[:i].tolist() + [model.mask_token_id]
        expected = torch.softmax(session_forward_logits(model, ids, 1, causal=True)[-1], dim=-1)
        assert (q[k] - expected).abs().max().item() <= 1e-5


def test_cached_draft_equals_recomputation_without_cache(tiny_model):
    model = tiny_model
    B = 4
    prompt = random_prompts(model, 1, seed=3)[0][:8]
    finished = random_prompts(model, 1, seed=4)[0][:B]
    current = finished[:1] + [model.mask_token_id] * (B - 1)
    session = model.new_session(lambda *a: None)
    model.prefill(session, torch.tensor(prompt), causal=False, block_length=B)
    fused = model.draft_forward(session, torch.tensor(current), torch.tensor(finished), False, 0)
    assert session.stored == len(prompt) + B
    reference = session_forward_logits(model, prompt + finished + current, B, causal=False)[-B:]
    assert (fused - reference).abs().max().item() <= 1e-4
    # The fused commit stored exactly what a separate commit would have: drafting
    # again from the cache gives the same logits.
    again = model.draft_forward(session, torch.tensor(current), None, False, 0)
    assert (again - reference).abs().max().item() <= 1e-4
    assert session.stored == len(prompt) + B


def test_fused_commit_matches_official_separate_commit_forward(tiny_model):
    """Riding the commit on the next draft stores the same KV as the official separate commit forward."""
    prompt = random_prompts(tiny_model, 1, seed=5)[0]
    base = DecodeConfig(method="dynamic", block_length=4, threshold=0.5, max_new_tokens=20)
    saved = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = []  # full-length outputs: a short one would make the prefix check empty
    try:
        fused = generate(tiny_model, prompt, base)
        official = generate(tiny_model, prompt, base.replace(accounting="official"))
    finally:
        tiny_model.stop_token_ids = saved
    assert len(fused.output_ids) == 20
    # SDAR's official code decodes whole blocks: the output runs on to the end of the last one.
    assert len(official.output_ids) == -(-(len(prompt) + 20) // 4) * 4 - len(prompt)
    assert official.output_ids[:20] == fused.output_ids
    blocks = len({s.block for s in official.steps})
    assert official.summary.nfe_by_kind["commit"] == blocks  # SDAR commits every block, the last one too
    assert fused.summary.nfe_by_kind["commit"] == 0


@pytest.mark.parametrize("block_length, sub_block_length", [(4, None), (8, None), (8, 4)])
def test_exact_greedy_s2d2_matches_ar_decoding(tiny_model, block_length, sub_block_length):
    ar = DecodeConfig(method="ar", max_new_tokens=24)
    for prompt in random_prompts(tiny_model, 20, seed=block_length):
        expected = generate(tiny_model, prompt, ar).output_ids
        got = generate(tiny_model, prompt, exact_greedy_s2d2(block_length, sub_block_length)).output_ids
        assert got == expected


def test_s2d2_takes_fewer_forwards_than_ar_when_drafts_agree(agreeing_model):
    agreeing_model.stop_token_ids = []
    prompt = random_prompts(agreeing_model, 1, seed=7)[0]
    ar = generate(agreeing_model, prompt, DecodeConfig(method="ar", max_new_tokens=24))
    s2d2 = generate(agreeing_model, prompt, exact_greedy_s2d2(8))
    assert s2d2.output_ids == ar.output_ids
    assert ar.summary.nfe == 1 + 24  # prefill + one fused forward per token
    assert s2d2.summary.nfe < ar.summary.nfe / 2
    assert s2d2.summary.acceptance_rate == 1.0


def test_ar_costs_one_forward_per_token(tiny_model):
    tiny_model_stops = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = []
    try:
        trace = generate(tiny_model, [5, 6, 7], DecodeConfig(method="ar", max_new_tokens=10))
    finally:
        tiny_model.stop_token_ids = tiny_model_stops
    assert trace.summary.nfe_by_kind == {"prefill": 1, "draft": 10, "verify": 0, "commit": 0}


METHOD_CONFIGS = [
    DecodeConfig(method="ar", max_new_tokens=30),
    DecodeConfig(method="static", block_length=8, steps=4, max_new_tokens=30),
    DecodeConfig(method="dynamic", block_length=8, threshold=0.3, max_new_tokens=30),
    preset_config("sdar-a", max_new_tokens=30),
    preset_config("sdar-b", max_new_tokens=30),
    preset_config("hysteresis", max_new_tokens=30),
    preset_config("min-span", max_new_tokens=30, verify=dict(tau_span=4)),
    DecodeConfig(method="s2d2", block_length=8, max_new_tokens=30, verify=VerifyConfig(policy="ucb")),
    DecodeConfig(method="s2d2", block_length=8, steps=2, max_new_tokens=30, s2d2_rule="static"),
    DecodeConfig(method="dynamic", block_length=16, sub_block_length=4, threshold=0.5, max_new_tokens=30),
    DecodeConfig(
        method="s2d2", block_length=4, max_new_tokens=30, sampling=SamplingConfig(temperature=0.8, top_k=20, top_p=0.9)
    ),
]


@pytest.mark.parametrize("config", METHOD_CONFIGS, ids=lambda c: f"{c.method}-B{c.block_length}-{c.verify.policy}")
def test_every_generated_token_is_committed_once_and_nfe_counts_model_calls(tiny_model, config):
    prompt = random_prompts(tiny_model, 1, seed=11)[0]
    with CountingForward(tiny_model) as counter:
        trace = Decoder(tiny_model, config).run(prompt)
    assert trace.summary.nfe == counter.calls == len(trace.forwards)
    assert_each_token_committed_once(trace)
    if config.method != "s2d2":
        assert trace.summary.nfe_by_kind["verify"] == 0


def test_trace_round_trips_through_json(tiny_model):
    trace = generate(tiny_model, "Ann has 3 pens.", preset_config("sdar-b", max_new_tokens=20))
    again = Trace.from_json(trace.to_json())
    assert again == trace
    assert again.to_json() == trace.to_json() == json.dumps(trace.to_dict())  # fast writer, same text
    with pytest.raises(ValueError, match="schema version"):
        Trace.from_dict({**trace.to_dict(), "schema_version": 999})
    with pytest.raises(ValueError, match="not valid JSON"):
        Trace.from_json("{nope")


def test_stop_token_ends_generation(tiny_model):
    prompt = random_prompts(tiny_model, 1, seed=13)[0]
    free = generate(tiny_model, prompt, DecodeConfig(method="ar", max_new_tokens=12))
    first = free.output_ids[3]
    saved = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = [first]
    try:
        stopped = generate(tiny_model, prompt, DecodeConfig(method="ar", max_new_tokens=12))
    finally:
        tiny_model.stop_token_ids = saved
    cut = free.output_ids.index(first) + 1
    assert stopped.output_ids == free.output_ids[:cut]
    assert stopped.stop_reason == "stop_token"


def test_max_new_tokens_not_a_block_multiple(tiny_model):
    tiny_model_stops = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = []
    try:
        trace = generate(tiny_model, [4, 5, 6, 7, 8], DecodeConfig(method="static", block_length=8, max_new_tokens=13))
    finally:
        tiny_model.stop_token_ids = tiny_model_stops
    assert len(trace.output_ids) == 13
    assert all(p.position < 13 for s in trace.steps for p in s.positions)


def test_first_masked_span_and_rule_commits():
    assert first_masked_span([False, True, True, False, True]) == (1, 2)
    assert first_masked_span([False, False]) is None
    confidence = torch.tensor([[0.95, 0.2, 0.9, 0.5]])

    def commits(candidates: list[int], k: int, rule: str) -> list[int]:
        mask = torch.tensor([[i in candidates for i in range(4)]])
        return rule_commits(confidence, mask, torch.tensor([k]), rule, 0.85)[0].nonzero().flatten().tolist()

    assert commits([0, 1, 2, 3], 1, "dynamic") == [0, 2]
    assert commits([1, 3], 1, "dynamic") == [3]
    assert commits([0, 1, 2, 3], 3, "dynamic") == [0, 2, 3]
    assert commits([0, 1, 2, 3], 2, "static") == [0, 2]


def test_bad_prompts_are_refused(tiny_model):
    with pytest.raises(ValueError, match="empty"):
        generate(tiny_model, "   ", DecodeConfig())
    with pytest.raises(ValueError, match="positions"):
        generate(tiny_model, [5] * 600, DecodeConfig())


@pytest.mark.parametrize("method", ["dynamic", "s2d2"])
def test_editing_rewrites_committed_tokens_and_the_trace_replays_them(tiny_model, method):
    config = DecodeConfig(
        method=method, block_length=8, threshold=0.5, edit_threshold=0.0, max_post_steps=2, max_new_tokens=24
    )
    saved = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = []
    try:
        with CountingForward(tiny_model) as counter:
            trace = Decoder(tiny_model, config).run(random_prompts(tiny_model, 1, seed=17)[0])
    finally:
        tiny_model.stop_token_ids = saved
    assert trace.summary.nfe == counter.calls
    final: dict[int, int] = {}
    for step in trace.steps:
        for e in step.edits:
            assert final[e.position] == e.old != e.new and e.confidence > 0.0
            final[e.position] = e.new
        for p in step.committed:
            assert p.position not in final
            final[p.position] = p.committed
    assert [final[i] for i in range(len(trace.output_ids))] == trace.output_ids
    assert trace.summary.edits > 0
    assert Trace.from_json(trace.to_json()) == trace


# -- the official code's options --------------------------------------------------------

STOCHASTIC = SamplingConfig(temperature=1.0)


def s2d2_trace(model, seed: int = 0, **settings) -> Trace:
    """Stochastic S2D2 over a few prompts' worth of steps, with the given settings."""
    settings = {"policy": "always", **settings}
    config = config_from_settings(
        method="s2d2", block_length=8, max_new_tokens=32, temperature=1.0, acceptance="stochastic", seed=seed,
        **settings,
    )  # fmt: skip
    return generate(model, random_prompts(model, 1, seed=seed)[0], config)


def committed_positions(trace: Trace, outcome: str):
    return [p for s in trace.steps for p in s.committed if p.outcome == outcome]


def test_without_resampling_a_rejected_draft_is_committed_as_it_is(tiny_model):
    trace = s2d2_trace(tiny_model, allow_resample=False)
    kept = committed_positions(trace, "kept")
    assert kept and not committed_positions(trace, "resampled")
    assert all(p.committed == p.token for p in kept)
    assert_each_token_committed_once(trace)


def test_ratio_tempering_zero_accepts_every_draft(tiny_model):
    """(q/p)^0 = 1: every draft of every verified span is accepted."""
    trace = s2d2_trace(tiny_model, ratio_tempering=0.0)
    verified = [s for s in trace.steps if s.accepted is not None]
    assert verified and all(s.accepted == s.route.span_length for s in verified)


@pytest.mark.parametrize("all_spans", [False, True])
def test_ratio_threshold_adds_drafts_whose_ratio_reaches_it(tiny_model, all_spans):
    # Two steps per block: the fallback tops each step up to B/2 commits anywhere, so masks lie beyond the span.
    trace = s2d2_trace(tiny_model, ratio_threshold=0.3, threshold_all_spans=all_spans, steps=2)
    extra = committed_positions(trace, "ratio")
    assert extra and all(min(1.0, p.ratio) >= 0.3 for p in extra)
    outside_span = [
        p for s in trace.steps if s.route for p in s.committed
        if p.outcome == "ratio" and not s.route.span_start <= p.position - s.block_start < s.route.span_start + s.route.span_length
    ]  # fmt: skip
    assert bool(outside_span) == all_spans
    assert_each_token_committed_once(trace)


def test_always_check_high_confidence_commits_confident_drafts_outside_the_span(tiny_model):
    trace = s2d2_trace(tiny_model, always_check_high_confidence=True, threshold=0.005)
    confident = committed_positions(trace, "confident")
    assert confident and all(p.p > 0.005 for p in confident)
    assert_each_token_committed_once(trace)


def test_ucb_block_progress_counts_tokens_decoded_in_the_block(tiny_model):
    """Official definition: decoded here / block length, so a prompt tail in the block does not count."""
    prompt = random_prompts(tiny_model, 1, seed=3)[0][:6]  # B=4: the first block holds 2 prompt tokens
    trace = generate(tiny_model, prompt, config_from_settings(method="s2d2", block_length=4, policy="ucb",
                                                              max_new_tokens=12))  # fmt: skip
    decoded: dict[int, int] = {}
    for s in trace.steps:
        assert s.route.detail["block_progress"] == pytest.approx(decoded.get(s.block, 0) / 4)
        decoded[s.block] = decoded.get(s.block, 0) + len(s.committed)
    assert trace.steps[0].route.detail["block_progress"] == 0.0


def test_entropy_bounded_baseline_commits_what_its_entropy_budget_allows(tiny_model):
    """The least uncertain drafts while their summed entropy stays under the budget, at least one and at most
    the step's minimum. A random model's drafts carry nearly log V = 5.95 nats each: a budget of 0 commits one
    a step, 15 nats two (11.9 fit, 17.9 do not), 1e9 every one the step allows."""
    prompt = random_prompts(tiny_model, 1, seed=4)[0]
    for budget, fitting in ((0.0, 1), (15.0, 2), (1e9, 8)):
        config = DecodeConfig(method="entropy_bounded", block_length=8, steps=2, eb_threshold=budget, max_new_tokens=24)
        trace = generate(tiny_model, prompt, config)
        assert_each_token_committed_once(trace)
        assert [s.rule for s in trace.steps] == [
            {"rule": "entropy_bounded", "minimum": s.rule["minimum"], "budget": budget} for s in trace.steps
        ]
        assert [len(s.committed) for s in trace.steps] == [min(fitting, s.rule["minimum"]) for s in trace.steps], budget
