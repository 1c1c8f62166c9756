"""Incremental causal KV and lookahead: fewer tokens and forwards, the same outputs.

Real forwards on tiny random checkpoints. Both ideas must change nothing but
the cost: the tokens, the random draws and their order stay those of the plain
path, so every comparison below is exact on the output.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_each_token_committed_once, exact_greedy_s2d2, random_prompts

from s2d2 import masks
from s2d2.config import DecodeConfig, VerifyConfig
from s2d2.decode import Decoder, generate
from s2d2.models.base import Lookahead
from s2d2.sampling import SamplingConfig

pytestmark = pytest.mark.usefixtures("one_thread")

GREEDY_EXACT = VerifyConfig(policy="always", acceptance="greedy")


def run(model, prompt, config, incremental: bool | None = None):
    """Decode, optionally forcing incremental KV off; returns (trace, the session at the end)."""
    sessions = []
    original = model.new_session

    def keep(record):
        sessions.append(original(record))
        return sessions[-1]

    decoder = Decoder(model, config, new_session=keep)
    if incremental is not None:
        decoder.incremental = incremental
    return decoder.run(prompt), sessions[0]


def causal_kv(model, ids: list[int]) -> list[torch.Tensor]:
    """Per layer, the keys and values a causal forward over ``ids`` stores."""
    session = model.new_session(lambda *a: None)
    model.prefill(session, torch.tensor(ids), causal=True, block_length=1)
    return [torch.cat([layer.keys, layer.values]) for layer in session.cache.layers]


def stored_kv(session) -> list[torch.Tensor]:
    return [torch.cat([layer.keys, layer.values]) for layer in session.cache.layers]


SDAR_LIKE = dict(method="s2d2", block_length=8, cache_ver=True, draft_ver=True, max_new_tokens=24, threshold=0.3)


@pytest.mark.parametrize("family", ["sdar", "llada2"])
@pytest.mark.parametrize("verify", [GREEDY_EXACT, VerifyConfig(policy="score", c=1.0)], ids=["always", "score"])
def test_incremental_kv_changes_tokens_per_forward_only(every_family, family, verify):
    model = every_family[family]
    for prompt in random_prompts(model, 4, seed=31):
        config = DecodeConfig(**SDAR_LIKE, verify=verify)
        plain, _ = run(model, prompt, config, incremental=False)
        fast, session = run(model, prompt, config)
        assert fast.output_ids == plain.output_ids
        assert [f.kind for f in fast.forwards] == [f.kind for f in plain.forwards]
        assert sum(f.tokens for f in fast.forwards) < sum(f.tokens for f in plain.forwards)
        # Everything stored is exactly what a causal commit of the same tokens stores.
        ids = (list(prompt) + fast.output_ids)[: session.stored]
        for got, want in zip(stored_kv(session), causal_kv(model, ids)):
            assert (got - want).abs().max().item() <= 1e-5


def test_incremental_kv_is_used_only_where_it_is_exact(tiny_model):
    on = Decoder(tiny_model, DecodeConfig(**SDAR_LIKE))
    assert on.incremental
    for change in (dict(cache_ver=False), dict(draft_ver=False), dict(accounting="official")):
        assert not Decoder(tiny_model, DecodeConfig(**{**SDAR_LIKE, **change})).incremental


# -- lookahead ---------------------------------------------------------------------------


def drafted_block(model, seed: int, B: int) -> list[int]:
    return random_prompts(model, 1, seed=seed)[0][:B] + [model.mask_token_id] * B


@pytest.mark.parametrize("cache_ver", [True, False])
def test_lookahead_rows_equal_a_separate_commit_and_draft(every_family, cache_ver):
    """The next block's draft rows carried by a verification equal the commit followed by a draft forward,
    and the KV kept after a used lookahead equals the separate commit's."""
    B = 4
    for family, model in every_family.items():
        prompt = random_prompts(model, 1, seed=2)[0][:8]
        block = torch.tensor(random_prompts(model, 1, seed=3)[0][:B])
        masks_next = torch.full((B,), model.mask_token_id)

        separate = model.new_session(lambda *a: None)
        model.prefill(separate, torch.tensor(prompt), causal=cache_ver, block_length=B)
        separate.block_start = len(prompt)
        model.commit_forward(separate, block, cache_ver)
        separate.block_start += B
        reference = model.draft_forward(separate, masks_next, None, cache_ver, 0)

        carried = model.new_session(lambda *a: None)
        model.prefill(carried, torch.tensor(prompt), causal=cache_ver, block_length=B)
        carried.block_start = len(prompt)
        if model.next_token_from_commit:
            if not cache_ver:
                continue  # a right-shifted family carries only a causal commit
            plan = Lookahead(B, 0, "first_half")
        else:
            plan = Lookahead(B, B, "first_half" if cache_ver else "rows")
        verified = model.verify(carried, block, 1, B - 1, lookahead=plan)
        model.settle(carried, verified, verified.rows_to_keep(B, True, plan, False))
        assert carried.stored == separate.stored
        for got, want in zip(stored_kv(carried), stored_kv(separate)):
            assert (got - want).abs().max().item() <= 1e-5, family
        if plan.count:
            assert (verified.lookahead - reference).abs().max().item() <= 1e-5, family
        else:
            assert (carried.next_row - separate.next_row).abs().max().item() <= 1e-5, family


LOOKAHEAD_CASES = {
    "greedy cache_ver": dict(cache_ver=True, draft_ver=True),
    "greedy no cache_ver": dict(cache_ver=False),
    "greedy sub-blocks": dict(sub_block_length=4, cache_ver=True, draft_ver=True),
    "sampled cache_ver": dict(cache_ver=True, draft_ver=True, sampling=SamplingConfig(temperature=1.0)),
    "sampled no cache_ver": dict(cache_ver=False, sampling=SamplingConfig(temperature=1.0)),
    "sampled sub-blocks": dict(sub_block_length=4, draft_ver=True, sampling=SamplingConfig(temperature=1.0)),
    "greedy B=16": dict(block_length=16, cache_ver=True, draft_ver=True, max_new_tokens=40),
    "greedy B=32 sub-blocks": dict(
        block_length=32, sub_block_length=8, cache_ver=True, draft_ver=True, max_new_tokens=40
    ),
}


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
@pytest.mark.parametrize("case", list(LOOKAHEAD_CASES))
def test_lookahead_changes_nothing_but_the_forward_count(every_family, family, case):
    model = every_family[family]
    settings = LOOKAHEAD_CASES[case]
    sampled = "sampling" in settings
    verify = VerifyConfig(policy="always", acceptance="stochastic" if sampled else "greedy")
    used_total = 0
    for i, prompt in enumerate(random_prompts(model, 4, seed=41)):
        base = DecodeConfig(
            **{"method": "s2d2", "block_length": 8, "max_new_tokens": 24, **settings}, seed=i, verify=verify
        )
        plain = generate(model, prompt, base)
        ahead = generate(model, prompt, base.replace(lookahead=True))
        assert ahead.output_ids == plain.output_ids
        assert_each_token_committed_once(ahead)
        s = ahead.summary
        assert s.nfe == plain.summary.nfe - s.lookaheads_used
        used_total += s.lookaheads_used
        assert s.lookaheads_used + s.lookaheads_discarded == sum(f.lookahead is not None for f in ahead.forwards)
    if model.next_token_from_commit and not settings.get("cache_ver"):
        assert used_total == 0  # a right-shifted family's lookahead is a causal commit: cache_ver only
    elif not (model.next_token_from_commit and settings.get("block_length") == 32):
        # (A right-shifted family carries one only at the end of a whole block: rare at B = 32 on random weights.)
        assert used_total > 0, "drafts of these tiny models agree with the verifier often enough to finish blocks"


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_exact_greedy_s2d2_with_lookahead_is_ar(every_family, family):
    model = every_family[family]
    ar = DecodeConfig(method="ar", max_new_tokens=16)
    for prompt in random_prompts(model, 6, seed=7):
        config = exact_greedy_s2d2(4, max_new_tokens=16).replace(lookahead=True)
        assert generate(model, prompt, config).output_ids == generate(model, prompt, ar).output_ids


def test_lookahead_mask_keeps_the_verifier_blind_to_the_extra_rows():
    allowed = masks.lookahead_verifier_mask(4, 3, 1, 3, 4)
    verifier = slice(4, 10)
    assert not allowed[verifier, :4].any() and not allowed[verifier, 10:].any()
    assert torch.equal(allowed[verifier, verifier], masks.verifier_mask(3, 1, 3))
    assert allowed[10:, :4].all() and allowed[10:, 10:].all() and not allowed[10:, 4:10].any()
    assert allowed[:4, :4].all() and not allowed[:4, 4:].any()


def test_lookahead_threshold_carries_fewer_lookaheads_and_changes_no_output(tiny_model):
    carried = {}
    for threshold in (0.0, 0.5):
        config = DecodeConfig(**SDAR_LIKE, verify=GREEDY_EXACT, lookahead=True, lookahead_threshold=threshold)
        traces = [generate(tiny_model, p, config) for p in random_prompts(tiny_model, 4, seed=51)]
        carried[threshold] = (
            sum(f.lookahead is not None for t in traces for f in t.forwards),
            [t.output_ids for t in traces],
        )
    assert carried[0.5][1] == carried[0.0][1]
    assert carried[0.5][0] < carried[0.0][0]


def test_no_sub_block_lookahead_is_carried_past_the_budget(agreeing_model):
    """The budget ends with a sub-block: a lookahead there would draft positions nothing decodes."""
    agreeing_model.stop_token_ids = []
    prompt = random_prompts(agreeing_model, 1, seed=7)[0][:5]
    config = DecodeConfig(**{**SDAR_LIKE, "max_new_tokens": 23}, sub_block_length=4, lookahead=True,
                          verify=GREEDY_EXACT)  # fmt: skip
    trace = generate(agreeing_model, prompt, config)
    assert (len(prompt) + config.max_new_tokens) % config.block_length == 4  # it ends mid-block, at a sub-block
    assert trace.summary.lookaheads_used > 0 and trace.summary.lookaheads_discarded == 0


def test_ucb_charges_a_verification_one_forward_when_its_lookahead_is_used(agreeing_model):
    """The bandit's reward is tokens per forward actually spent: a used lookahead saves one."""
    agreeing_model.stop_token_ids = []
    config = DecodeConfig(method="s2d2", block_length=4, cache_ver=True, lookahead=True, max_new_tokens=24,
                          verify=VerifyConfig(policy="ucb", acceptance="greedy"))  # fmt: skip
    decoder = Decoder(agreeing_model, config)
    trace = decoder.run(random_prompts(agreeing_model, 1, seed=9)[0])
    charged = {True: 0.0, False: 0.0}
    used = 0
    for step in trace.steps:
        if step.route is None:
            continue
        carried = any(trace.forwards[f].lookahead is not None for f in step.forwards)
        saved = carried and step.accepted == step.route.span_length
        used += saved
        charged[step.route.verify] += len(step.committed) / (1 + step.route.verify - saved)
    assert used > 0
    assert sum(decoder.policy.rewards[1]) == pytest.approx(charged[True])
    assert sum(decoder.policy.rewards[0]) == pytest.approx(charged[False])
