"""Rewinds (s2d2.rewind): a run decoded again up to one step and on from there with other settings, on a tiny
random SDAR model with real forwards."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import exact_greedy_s2d2, random_prompts

from s2d2 import config_from_settings, generate
from s2d2.rewind import Rewind
from s2d2.trace import Trace

EXACT = exact_greedy_s2d2(8, max_new_tokens=24)
DYNAMIC = dataclasses.replace(EXACT, method="dynamic", threshold=0.3)


def rewind_at(trace: Trace, index: int, config) -> Rewind:
    step = trace.steps[index]
    return Rewind(step.block, step.step, config)


def steps_of(trace: Trace) -> list:
    """The steps without their clocks (a step record carries none; forwards do)."""
    return [dataclasses.asdict(s) for s in trace.steps]


@pytest.fixture(scope="module")
def runs(tiny_model) -> list[tuple[list[int], Trace, Trace]]:
    """``(prompt, exact S2D2 run, dynamic run)`` for a few random prompts."""
    prompts = random_prompts(tiny_model, 4, seed=5)
    return [(p, generate(tiny_model, p, EXACT), generate(tiny_model, p, DYNAMIC)) for p in prompts]


def test_rewinding_with_the_same_settings_is_the_original_run(tiny_model, runs):
    prompt, original, _ = runs[0]
    middle = len(original.steps) // 2
    again = generate(tiny_model, prompt, EXACT, rewind=rewind_at(original, middle, EXACT))
    assert steps_of(again) == steps_of(original) and again.output_ids == original.output_ids
    assert again.rewound == {"block": original.steps[middle].block, "step": original.steps[middle].step, "changed": {}}
    assert again.exactness["exact"]


def test_a_rewind_keeps_every_step_before_it_and_decodes_the_rest_with_the_new_settings(tiny_model, runs):
    """Exact S2D2 rewound to a loose dynamic threshold: the steps before the switch are the original's, those
    after verify nothing and commit by the threshold, and the trace says it is no longer exact."""
    for prompt, original, _ in runs:
        index = len(original.steps) // 3
        rewound = generate(tiny_model, prompt, EXACT, rewind=rewind_at(original, index, DYNAMIC))
        assert steps_of(rewound)[:index] == steps_of(original)[:index]
        assert all(s.accepted is None for s in rewound.steps[index:])
        assert all(s.accepted is not None for s in original.steps[:index])
        assert rewound.rewound["changed"] == {
            "method": {"before": "s2d2", "after": "dynamic"},
            "threshold": {"before": EXACT.threshold, "after": 0.3},
        }
        assert not rewound.exactness["exact"] and rewound.method == "dynamic"
        # The committed prefix at the switch is the exact run's; the rest is the threshold rule's.
        before = {p.position: p.committed for s in original.steps[:index] for p in s.committed}
        assert all(rewound.output_ids[i] == t for i, t in before.items() if i < len(rewound.output_ids))


def test_a_threshold_run_rewound_to_exact_s2d2_at_its_first_step_writes_ar(tiny_model, runs):
    ar_config = config_from_settings(method="ar", max_new_tokens=24)
    for prompt, _, dynamic in runs:
        rewound = generate(tiny_model, prompt, DYNAMIC, rewind=rewind_at(dynamic, 0, EXACT))
        assert rewound.output_ids == generate(tiny_model, prompt, ar_config).output_ids
        assert rewound.exactness["exact"], "nothing was decoded before the switch"
        later = generate(tiny_model, prompt, DYNAMIC, rewind=rewind_at(dynamic, 1, EXACT))
        assert not later.exactness["exact"] and "before the rewind" in later.exactness["reasons"][0]


def test_a_rewound_trace_reads_back_with_its_switch(tiny_model, runs):
    prompt, original, _ = runs[0]
    rewound = generate(tiny_model, prompt, EXACT, rewind=rewind_at(original, 1, DYNAMIC))
    again = Trace.from_json(rewound.to_json())
    assert again.rewound == rewound.rewound and again.exactness == rewound.exactness
    older = {**original.to_dict(), "schema_version": 5}
    del older["rewound"]
    assert Trace.from_dict(older).rewound is None


def test_a_rewind_the_decoder_cannot_make_is_refused(tiny_model, runs):
    prompt, original, _ = runs[0]
    smaller = dataclasses.replace(EXACT, block_length=4, sub_block_length=4, steps=4)
    with pytest.raises(ValueError, match="block_length, sub_block_length cannot change mid-run"):
        generate(tiny_model, prompt, EXACT, rewind=rewind_at(original, 1, smaller))
    with pytest.raises(ValueError, match="no step inside a block"):
        generate(tiny_model, prompt, EXACT, rewind=rewind_at(original, 1, dataclasses.replace(EXACT, method="ar")))
    with pytest.raises(ValueError, match="ended before step 99"):
        generate(tiny_model, prompt, EXACT, rewind=Rewind(0, 99, DYNAMIC))


def test_the_rewind_panel_says_what_changed_and_what_it_did(tiny_model, runs):
    from components.whatif import rewind_html, rewind_offer

    prompt, original, _ = runs[0]
    offer = rewind_offer(original, "S2D2", 1, 3)
    assert 'class="rewind-go"' in offer and 'name="method"' in offer and 'name="threshold"' in offer
    assert '<option value="s2d2" selected>' in offer
    rewound = generate(tiny_model, prompt, EXACT, rewind=rewind_at(original, 1, DYNAMIC))
    panel = rewind_html(original, rewound, "S2D2")
    assert "method s2d2 → dynamic" in panel and "τ 0.9 → 0.3" in panel
    more = rewound.summary.nfe - original.summary.nfe
    than = f"{more} more than" if more > 0 else f"{-more} fewer than" if more < 0 else "as many as"
    assert f"{rewound.summary.nfe} forwards ({than} the original's {original.summary.nfe})" in panel
    assert "not exact" in panel


def test_the_panels_say_where_a_text_ends_instead_of_spelling_its_stop_token():
    """A run that ends on a stop token is quoted up to it, then "(end of text)"; a run cut mid-text is not."""
    import copy

    from components.bundle import load_bundle_file
    from components.ui import DEMO_COMPARISON
    from components.whatif import rewind_html

    original = load_bundle_file(DEMO_COMPARISON)["S2D2"]
    rewound = copy.deepcopy(original)
    rewound.output_ids[-3], rewound.output_tokens[-3] = -1, "5"
    rewound.rewound = {"block": 0, "step": 0, "changed": {"threshold": {"before": 0.9, "after": 0.5}}}
    panel = rewind_html(original, rewound, "S2D2")
    assert "<q>5. <em>(end of text)</em></q>" in panel and "<q>4. <em>(end of text)</em></q>" in panel
    assert "endoftext" not in panel
    original.stop_reason = rewound.stop_reason = "max_new_tokens"  # cut at the budget: the last token is text
    assert "(end of text)" not in rewind_html(original, rewound, "S2D2")
