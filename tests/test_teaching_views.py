"""What the page teaches with, from real decodes of the bundled model: right or wrong, the walk-through of one
verification, and the expected speed-up from measured acceptance."""

from __future__ import annotations

import dataclasses
import re

import pytest

from components.bundle import load_bundle_file
from components.grading import grade
from components.guide import guide_html, step_to_walk, walk_parts
from components.ui import DEMO_COMPARISON, examples
from components.views import headline_html, ratio_words
from s2d2 import config_from_settings, generate, load_model
from s2d2.study.tasks import families, recognise
from s2d2.trace import RESAMPLED


@pytest.fixture(scope="module")
def bundled():
    return load_model()


@pytest.mark.parametrize("family", ["arith", "team", "chains"])
def test_every_task_prompt_is_recognised_with_its_own_reference(family):
    tasks = families()[family]
    for problem in tasks.problems("heldout", 200, seed=0) + tasks.problems("train", 200, seed=1):
        read = recognise(problem.prompt)
        assert read is not None and (read.family, read.key) == (problem.family, problem.key), problem.prompt
        assert tasks.score(read, problem.reference), "the family's own reference solves the read problem"


@pytest.mark.parametrize(
    "prompt",
    [
        "Leo has 9 shells. He finds 6 more on the beach. How many shells does Leo have now?",  # not the family's words
        "Write a poem about the sea.",
        "Pick two different players from Ann and Ann. Then cheer for the first one.",
        "",
    ],
)
def test_other_prompts_are_not_graded(prompt):
    assert recognise(prompt) is None


def test_a_typed_prompt_in_the_families_words_is_graded():
    problem = recognise("Leo has 9 shells. He finds 6 more. He sells 2. How many shells does Leo have now?")
    assert problem.meta["answer"] == 13 and problem.reference == "9 + 6 = 15. 15 - 2 = 13. The answer is 13."


def test_the_opening_comparison_says_who_is_right():
    runs = load_bundle_file(DEMO_COMPARISON)
    assert grade(runs["AR"]).correct and grade(runs["S2D2"]).correct and not grade(runs["Baseline"]).correct
    headline = headline_html(runs)
    assert "headline-right" in headline and "Wrong answer from Baseline" in headline and "the answer is 14" in headline


def test_a_wrong_s2d2_answer_never_gets_the_green_headline():
    runs = load_bundle_file(DEMO_COMPARISON)
    wrong = {name: dataclasses.replace(t, text=t.text.replace("answer is 14", "answer is 15")) for name, t in runs.items()}
    headline = headline_html(wrong)
    assert "headline-wrong" in headline and "headline-right" not in headline
    assert "AR is wrong here too" in headline, headline


def test_ratios_are_worded_by_their_direction():
    assert ratio_words(1.4, 1.0, "more", "fewer", "same") == "1.4× more"
    assert ratio_words(0.7, 1.4, "more", "fewer", "same") == "2.0× fewer"
    assert ratio_words(1.02, 1.0, "more", "fewer", "same") == "same"


def _sampling_example(bundled):
    example = next(e for e in examples() if e["shows"] == "sampling-test")
    config = config_from_settings(example["preset"], max_new_tokens=160, trace_top_k=5)
    return generate(bundled, example["prompt"], config)


def test_the_walk_through_goes_from_drafts_to_the_residual_with_the_runs_numbers(bundled):
    trace = _sampling_example(bundled)
    index = step_to_walk(trace)
    step = trace.steps[index]
    rejected = next(p for p in step.positions if p.outcome == RESAMPLED)
    parts = walk_parts(trace, index)
    texts = [re.sub("<[^>]+>", "", part.text) for part in parts]
    assert texts[0].startswith(f"Step {index} works on block {step.block}") and "drafter" in texts[0]
    assert "span" in texts[1] and "verifier" in texts[1] and "min(1, q/p)" in texts[1]
    rejection = next(t for t in texts if t.startswith(f"Position {rejected.position} fails"))
    assert f"u = {rejected.u:.2f} ≥ min(1, q/p) = {rejected.accept_probability:.2f}: rejected" in rejection
    assert "residual (q − p)+" in rejection
    assert parts[texts.index(rejection)].positions == (rejected.position,)
    assert "forward" in texts[-1]
    panel = guide_html(trace, "S2D2", "auto", str(len(parts) - 1))
    assert f'data-step="{index}"' in panel and 'class="guide-now"' in panel and "Next ▶</button>" in panel
    assert f"{rejected.p:.3f}" in panel, "the table carries the step's numbers"


def test_the_walk_through_explains_a_skipped_verification(bundled):
    example = next(e for e in examples() if e["shows"] == "router-skips")
    trace = generate(bundled, example["prompt"], config_from_settings(example["preset"], max_new_tokens=160))
    skipped = next(i for i, s in enumerate(trace.steps) if s.route is not None and not s.route.verify)
    parts = walk_parts(trace, skipped)
    assert len(parts) == 2 and "skipped verification" in parts[1].text


def test_the_speed_up_curve_runs_from_one_correction_to_a_whole_span():
    from components.speedup import constant_curve

    curve = constant_curve(16, forwards=2)
    assert curve[0] == pytest.approx(0.5), "α = 0: each verification commits only its correction"
    assert curve[-1] == pytest.approx(8.0), "α = 1: the whole span of 16 in two forwards"
    assert all(a <= b for a, b in zip(curve, curve[1:])), "more acceptance never costs more"


def test_measured_acceptance_counts_every_verified_draft_once(bundled):
    from components.speedup import acceptance_by_offset, measured, speedup_figure

    trace = _sampling_example(bundled)
    counts = acceptance_by_offset(trace)
    accepted = sum(p.outcome == "accepted" for s in trace.steps if s.accepted is not None for p in s.positions)
    assert sum(a for _, a in counts) == accepted == sum(s.accepted for s in trace.steps if s.accepted is not None)
    assert all(n_next <= n for (n, _), (n_next, _) in zip(counts, counts[1:])), "a draft is tested only after its span's earlier ones"
    numbers = measured(trace)
    assert numbers["spent"] == pytest.approx(trace.summary.generated_tokens / trace.summary.nfe)
    figure = speedup_figure({"S2D2": trace})
    assert figure.data[-1].x[0] == pytest.approx(numbers["alpha"]) and figure.data[-1].y[0] == pytest.approx(numbers["spent"])
