"""What-if runs (s2d2.forcing): one draft forced, everything else the model's, on a tiny random SDAR model."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import exact_greedy_s2d2, random_prompts

from s2d2 import config_from_settings, generate
from s2d2.forcing import ForcedDraft
from s2d2.trace import ACCEPTED, RESAMPLED, Trace

CONFIG = exact_greedy_s2d2(8, max_new_tokens=24)


def rejected_positions(trace: Trace) -> list[tuple[int, object]]:
    """``(step index, position record)`` of every draft the verifier rejected and replaced."""
    return [(i, p) for i, s in enumerate(trace.steps) for p in s.positions if p.outcome == RESAMPLED]


def forced_at(trace: Trace, index: int, position: int, token: int) -> ForcedDraft:
    step = trace.steps[index]
    return ForcedDraft(step.block, step.step, position, token)


def record_at(trace: Trace, index: int, position: int):
    return next(p for p in trace.steps[index].positions if p.position == position)


def without_clocks(trace: Trace) -> dict:
    data = trace.to_dict()
    data.pop("summary")
    data.pop("forwards")
    data.pop("forced")
    data.pop("exactness")
    return data


@pytest.fixture(scope="module")
def runs(tiny_model) -> list[tuple[list[int], Trace]]:
    prompts = random_prompts(tiny_model, 6, seed=11)
    return [(prompt, generate(tiny_model, prompt, CONFIG)) for prompt in prompts]


def test_forcing_the_drafters_own_token_is_the_original_run(tiny_model, runs):
    for prompt, original in runs[:3]:
        index, record = rejected_positions(original)[0]
        again = generate(tiny_model, prompt, CONFIG, forced=forced_at(original, index, record.position, record.token))
        assert without_clocks(again) == without_clocks(original)
        assert again.summary.nfe == original.summary.nfe
        assert again.forced["drafted"] == record.token and not again.exactness["exact"]


def test_the_verifier_accepts_its_own_correction_and_exact_s2d2_writes_ar_whatever_is_forced(tiny_model, runs):
    """Forcing the token the verifier put in place of a rejected draft: now it is accepted. Forcing any other
    candidate: exact greedy S2D2 still writes the AR output, since the verifier decides every token."""
    ar_config = config_from_settings(method="ar", max_new_tokens=24)
    for prompt, original in runs:
        ar = generate(tiny_model, prompt, ar_config).output_ids
        index, record = rejected_positions(original)[0]
        accepted = generate(tiny_model, prompt, CONFIG, forced=forced_at(original, index, record.position, record.committed))
        assert record_at(accepted, index, record.position).outcome == ACCEPTED
        assert accepted.output_ids == ar
        assert accepted.steps[:index] == original.steps[:index]  # before the forced step, the original run
        for token, _ in record.p_top[1:3]:
            other = generate(tiny_model, prompt, CONFIG, forced=forced_at(original, index, record.position, token))
            assert record_at(other, index, record.position).token == token
            assert other.output_ids == ar
            assert other.forced == {**dataclasses.asdict(forced_at(original, index, record.position, token)),
                                    "drafted": record.token}  # fmt: skip


def test_a_forced_trace_reads_back_with_what_was_forced(tiny_model, runs):
    prompt, original = runs[0]
    index, record = rejected_positions(original)[0]
    forced = generate(tiny_model, prompt, CONFIG, forced=forced_at(original, index, record.position, record.committed))
    again = Trace.from_json(forced.to_json())
    assert again.forced == forced.forced and again.exactness == forced.exactness
    assert "forced draft" in again.exactness["reasons"][0]
    assert Trace.from_json(original.to_json()).forced is None


def test_a_draft_that_cannot_be_forced_is_refused(tiny_model, runs):
    prompt, original = runs[0]
    index, record = rejected_positions(original)[0]
    step = original.steps[index]
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        generate(tiny_model, prompt, CONFIG, forced=ForcedDraft(step.block, step.step, record.position, 10**7))
    with pytest.raises(ValueError, match="is not masked"):
        generate(tiny_model, prompt, CONFIG, forced=ForcedDraft(step.block, step.step, record.position + 40, 5))
    with pytest.raises(ValueError, match="never reached step 99"):
        generate(tiny_model, prompt, CONFIG, forced=ForcedDraft(step.block, 99, record.position, 5))


def test_the_what_if_panel_says_what_the_verifier_did_and_what_it_cost(tiny_model, runs):
    from components.whatif import what_if_html, what_if_offer

    prompt, original = runs[0]
    index, record = rejected_positions(original)[0]
    offer = what_if_offer(original, "S2D2", index, record)
    assert offer.count('class="whatif-go"') == min(4, len(record.p_top) - 1)
    forced = generate(tiny_model, prompt, CONFIG, forced=forced_at(original, index, record.position, record.committed))
    panel = what_if_html(original, forced, "S2D2")
    assert "accepted" in panel and "whatif-accepted" in panel
    fewer = original.summary.nfe - forced.summary.nfe
    assert f"{forced.summary.nfe} forwards ({fewer} fewer than the original's {original.summary.nfe})" in panel
    assert "The text is the original run's, token for token." in panel and "no exactness claim" in panel
