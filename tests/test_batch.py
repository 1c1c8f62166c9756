"""Batched decoding returns, row for row, what decoding one prompt at a time returns.

Real forwards on the tiny random checkpoints of every family: outputs, forward
counts and the tokens each forward fed must equal the single-prompt runs', for
every method, router and family, with ragged prompts, stop tokens inside
blocks, rows finishing while others continue and new rows joining. Run with
``pytest -s`` to see the counts. Every method runs at batch sizes 2, 3 and 5
over 7 prompts, so that rows join mid-decode as others finish.
"""

from __future__ import annotations

import threading

import pytest
from helpers import CountingForward, exact_greedy_s2d2, random_prompts

from s2d2 import generate, generate_batch
from s2d2.batch import BatchScheduler
from s2d2.config import DecodeConfig, VerifyConfig
from s2d2.decode import DecodeCancelled
from s2d2.sampling import SamplingConfig

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLED = SamplingConfig(temperature=1.0)
BATCH_SIZES = (2, 3, 5)  # under the 7 prompts: queued rows join while others are decoding


def matrix(family: str) -> dict[str, DecodeConfig]:
    """Every method and router, lookahead, incremental KV, sub-blocks, editing, both accountings."""
    s2d2 = dict(method="s2d2", max_new_tokens=21)
    configs = {
        "ar": DecodeConfig(method="ar", max_new_tokens=21),
        "static": DecodeConfig(method="static", block_length=4, steps=2, max_new_tokens=21),
        "dynamic official": DecodeConfig(  # Fast-dLLM's official block cache decodes one sequence at a time
            method="dynamic", block_length=8, threshold=0.3, accounting="official", use_block_cache=False,
            max_new_tokens=21,
        ),
        "entropy_bounded sampled": DecodeConfig(
            method="entropy_bounded", block_length=8, eb_threshold=0.5, sampling=SAMPLED, max_new_tokens=21
        ),
        "exact + lookahead (incremental KV)": DecodeConfig(
            **s2d2, block_length=8, cache_ver=True, draft_ver=True, lookahead=True,
            verify=VerifyConfig(policy="always", acceptance="greedy"),
        ),
        "score stochastic sampled": DecodeConfig(
            **s2d2, block_length=8, sampling=SAMPLED, verify=VerifyConfig(policy="score", c=0.5)
        ),
        "hysteresis sub-blocks + lookahead": DecodeConfig(
            **s2d2, block_length=8, sub_block_length=4, cache_ver=True, draft_ver=True, lookahead=True,
            verify=VerifyConfig(policy="hysteresis"),
        ),
        "min_span": DecodeConfig(**s2d2, block_length=16, verify=VerifyConfig(policy="min_span", tau_span=3)),
        "ucb sampled": DecodeConfig(
            **s2d2, block_length=4, sampling=SAMPLED, lookahead=True, cache_ver=True,
            verify=VerifyConfig(policy="ucb"),
        ),
    }  # fmt: skip
    if family == "llada2":
        configs["editing"] = DecodeConfig(
            method="dynamic", block_length=8, threshold=0.5, edit_threshold=0.3, max_new_tokens=21
        )
        configs["s2d2 + editing"] = DecodeConfig(**s2d2, block_length=8, edit_threshold=0.3)
    return configs


def same_run(single, batched) -> bool:
    """Same output, same forwards (kind and tokens fed, in order), same commits."""
    return (
        single.output_ids == batched.output_ids
        and [(f.kind, f.tokens) for f in single.forwards] == [(f.kind, f.tokens) for f in batched.forwards]
        and [[(p.position, p.committed) for p in s.committed] for s in single.steps]
        == [[(p.position, p.committed) for p in s.committed] for s in batched.steps]
    )


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_every_method_batched_equals_one_at_a_time(every_family, family):
    model = every_family[family]
    prompts = random_prompts(model, 7, seed=11)
    seeds = list(range(100, 107))
    rows = stopped = 0
    # Stop tokens that AR writes mid-block for some prompts, so rows end at different steps.
    free = [generate(model, p, DecodeConfig(method="ar", max_new_tokens=8)).output_ids for p in prompts[:3]]
    saved, model.stop_token_ids = model.stop_token_ids, sorted({free[0][5], free[1][6]})
    try:
        for name, config in matrix(family).items():
            single = [generate(model, p, config.replace(seed=s)) for p, s in zip(prompts, seeds)]
            for size in BATCH_SIZES:
                batched = generate_batch(model, prompts, config, seeds=seeds, batch_size=size)
                different = [i for i, (a, b) in enumerate(zip(single, batched)) if not same_run(a, b)]
                assert not different, f"{family} {name} at batch {size}: rows {different} differ from single runs"
                assert batched.forwards < sum(t.summary.nfe for t in single), "the batch shared no forward"
                rows += len(prompts)
                stopped += sum(t.stop_reason == "stop_token" for t in single)
    finally:
        model.stop_token_ids = saved
    assert stopped >= rows // 7, "too few rows ended on a stop token to test ragged stops"
    print(f"\n{family}: {rows} rows identical to their single runs ({stopped} ended on a stop token), 0 skipped")


@pytest.mark.parametrize("batch_size", [2, 7, 16])
def test_batch_sizes_and_rows_joining_as_others_finish(every_family, batch_size):
    """Prompts of different lengths finish at different steps; queued prompts take their places."""
    model = every_family["sdar"]
    prompts = random_prompts(model, 9, seed=5)
    config = DecodeConfig(
        method="s2d2", block_length=4, cache_ver=True, draft_ver=True, lookahead=True, max_new_tokens=17,
        verify=VerifyConfig(policy="always", acceptance="greedy"),
    )  # fmt: skip
    single = [generate(model, p, config) for p in prompts]
    batched = generate_batch(model, prompts, config, batch_size=batch_size)
    assert [t.output_ids for t in batched] == [t.output_ids for t in single]
    assert [t.summary.nfe for t in batched] == [t.summary.nfe for t in single]
    assert batched.batch_size == batch_size and len(batched) == len(prompts)
    longest = max(t.summary.nfe for t in single)
    assert longest <= batched.forwards < sum(t.summary.nfe for t in single)


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_long_prompts_joining_mid_decode_prefill_apart_and_decode_as_alone(every_family, family, monkeypatch):
    """A joining prompt much wider than the rows already decoding runs its prefill in a forward of its own,
    whose KV then joins the batch's; every row still decodes as it does alone."""
    model = every_family[family]
    short, long = random_prompts(model, 5, seed=8), [p * 4 for p in random_prompts(model, 4, seed=9)]
    prompts = short[:4] + long[:3] + short[4:] + long[3:]
    apart = []
    prefill_apart = BatchScheduler._prefill_apart
    monkeypatch.setattr(
        BatchScheduler, "_prefill_apart", lambda self, *a: apart.append(a[1]) or prefill_apart(self, *a)
    )
    ar = DecodeConfig(method="ar", max_new_tokens=12)
    monkeypatch.setattr(model, "stop_token_ids", [generate(model, prompts[0], ar).output_ids[3]])  # ragged stops
    for config in (ar, exact_greedy_s2d2(4, max_new_tokens=12)):
        apart.clear()
        single = [generate(model, p, config) for p in prompts]
        batched = generate_batch(model, prompts, config, batch_size=4)
        different = [i for i, (a, b) in enumerate(zip(single, batched)) if not same_run(a, b)]
        assert not different, f"{family} {config.method}: rows {different} differ from single runs"
        assert apart, f"{family} {config.method}: no prefill ran apart"


def test_a_row_that_stops_early_leaves_while_the_others_continue(every_family):
    model = every_family["sdar"]
    prompts = random_prompts(model, 4, seed=2)
    ar = DecodeConfig(method="ar", max_new_tokens=20)
    free = generate(model, prompts[0], ar).output_ids
    saved = model.stop_token_ids
    model.stop_token_ids = [free[2]]  # the first row now stops after three tokens
    try:
        single = [generate(model, p, ar) for p in prompts]
        batched = generate_batch(model, prompts, ar)
    finally:
        model.stop_token_ids = saved
    assert single[0].stop_reason == "stop_token" and single[0].summary.nfe < max(t.summary.nfe for t in single)
    assert [t.output_ids for t in batched] == [t.output_ids for t in single]
    assert batched.forwards == max(t.summary.nfe for t in single)


def test_cancelling_a_batch_stops_every_row_and_leaves_no_thread(every_family):
    model = every_family["sdar"]
    before = threading.active_count()
    asked = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 12

    with pytest.raises(DecodeCancelled):
        generate_batch(model, random_prompts(model, 5, seed=1), DecodeConfig(method="ar"), should_stop=should_stop)
    assert threading.active_count() == before


def test_bad_batches_are_refused_before_any_forward(every_family):
    model = every_family["sdar"]
    config = DecodeConfig(method="ar", max_new_tokens=8)
    with CountingForward(model) as forwards:
        with pytest.raises(ValueError, match="no prompts"):
            generate_batch(model, [], config)
        with pytest.raises(ValueError, match="seeds"):
            generate_batch(model, [[5, 6]], config, seeds=[1, 2])
        with pytest.raises(ValueError, match="batch_size"):
            generate_batch(model, [[5, 6]], config, batch_size=0)
        with pytest.raises(ValueError, match="empty"):
            generate_batch(model, [[5, 6], "  "], config)
        with pytest.raises(ValueError, match="positions"):
            generate_batch(model, [[5, 6], [5] * 5000], config)
        assert forwards.calls == 0
        accepted = generate_batch(model, [[5, 6]], config)  # the counter sees the forwards a valid batch runs
    assert forwards.calls == accepted.forwards == accepted[0].summary.nfe == 9
