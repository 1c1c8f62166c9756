"""Figure, table and token builders on real traces from a tiny random model."""

from __future__ import annotations

import re

import pytest

from components.bundle import bundle_json, load_bundle
from components.figures import (
    CATEGORIES,
    _category_colors,
    cost_figure,
    residual_energy_figure,
    router_figure,
    trajectory_figure,
)
from components.runner import Settings, build_configs, check_prompt, run_all
from components.tables import stats_table
from components.tokens import tokens_html
from components.views import build_views
from s2d2.trace import OUTCOMES


@pytest.fixture(scope="module")
def runs(tiny_model):
    settings = Settings(block_length=8, steps=8, threshold=0.3, max_new_tokens=24, acceptance="stochastic")
    saved = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = []
    try:
        return run_all(tiny_model, "Ann has 3 pens. She buys 2 more.", build_configs(settings))
    finally:
        tiny_model.stop_token_ids = saved


def test_runs_share_prompt_seed_and_length(runs):
    assert list(runs) == ["AR", "Baseline", "S2D2"]
    assert len({tuple(t.prompt_ids) for t in runs.values()}) == 1
    assert all(len(t.output_ids) == 24 for t in runs.values())
    assert runs["S2D2"].summary.verifications > 0


def test_trajectory_figure_replays_with_slider_steps(runs):
    trace = runs["S2D2"]
    fig = trajectory_figure(trace, "S2D2")
    strip, grid = fig.data[0], fig.data[1]
    assert strip.type == grid.type == "heatmap"
    assert len(grid.z) == len(trace.steps) and len(grid.z[0]) == len(trace.output_ids)
    slider = fig.layout.sliders[0]
    assert len(slider.steps) == len(trace.steps)
    # Each slider step restyles the strip (trace 0) and moves the curtain shape.
    first, last = slider.steps[0], slider.steps[-1]
    assert first.method == "update" and list(first.args[2]) == [0]
    assert first.args[0]["z"] != last.args[0]["z"]
    curtain_key = next(iter(first.args[1]))
    assert re.fullmatch(r"shapes\[\d+\]\.y0", curtain_key)
    assert first.args[1][curtain_key] == 0.5 and last.args[1][curtain_key] == len(trace.steps) - 0.5
    # The strip at the last slider step is the final sequence: every position committed.
    assert None not in last.args[0]["z"][0][0]


def test_one_colour_per_outcome():
    colors = _category_colors("s2d2")
    assert len(colors) == len(CATEGORIES) == 1 + 2 * len(OUTCOMES)
    assert len(set(colors)) == len(colors)


def test_residual_energy_figure_marks_rejections(runs):
    trace = runs["S2D2"]
    fig = residual_energy_figure(trace)
    energy, mass = fig.data[0], fig.data[1]
    verified = [s for s in trace.steps if any(p.q is not None for p in s.positions)]
    assert len(energy.z) == len(mass.z) == len(verified)
    crosses = fig.data[2]
    rejected = sum(
        p.outcome == "resampled" for s in trace.steps for p in s.positions if p.position < len(trace.output_ids)
    )
    assert len(crosses.x) == rejected == trace.summary.rejections
    for row, step in enumerate(verified):
        for p in step.positions:
            if p.q is not None:
                assert energy.z[row][p.position] == pytest.approx(p.energy)
                assert mass.z[row][p.position] == pytest.approx(p.residual_mass)


def test_router_figure_has_one_decision_per_step(runs):
    trace = runs["S2D2"]
    fig = router_figure(trace)
    decisions = [t for t in fig.data if t.type == "bar" and "committed" in t.name][0]
    assert len(decisions.x) == len(trace.steps)
    assert sum(decisions.y) == len(trace.output_ids)
    assert "no router" in router_figure(runs["AR"]).layout.annotations[0].text


def test_cost_figure_and_table_match_summaries(runs):
    fig = cost_figure(runs)
    stacked = [t for t in fig.data if t.type == "bar" and t.name in ("prefill", "draft", "verify", "commit")]
    totals = [sum(t.y[i] for t in stacked) for i in range(3)]
    assert totals == [t.summary.nfe for t in runs.values()]
    table = stats_table(runs)
    assert list(table["run"]) == ["AR", "Baseline", "S2D2"]
    assert list(table["NFE"]) == totals
    ar = table.set_index("run").loc["AR"]
    assert ar["speedup vs AR (forwards)"] == 1.0
    s2d2 = table.set_index("run").loc["S2D2"]
    assert s2d2["rejections"] == runs["S2D2"].summary.rejections
    assert s2d2["speedup vs AR (forwards)"] == round(runs["S2D2"].summary.tpf / runs["AR"].summary.tpf, 2)


def test_tokens_html_colours_every_token_by_outcome(runs):
    trace = runs["S2D2"]
    page = tokens_html(trace)
    classes = re.findall(r'class="tok tok-(\w+)[ "]', page)
    assert len(classes) == len(trace.output_ids)
    assert set(classes) <= {"threshold", "accepted", "resampled", "fallback"}
    assert classes.count("resampled") == trace.summary.rejections
    assert "q (verifier)" in page and "residual energy" in page
    assert set(re.findall(r'class="tok tok-(\w+)[ "]', tokens_html(runs["AR"]))) == {"ar"}


def test_comparison_bundle_round_trips(runs):
    again = load_bundle(bundle_json(runs))
    assert again == runs
    single = load_bundle(runs["S2D2"].to_json())
    assert list(single) == ["S2D2"]
    with pytest.raises(ValueError):
        load_bundle('{"hello": 1}')
    views = build_views(again)
    assert "S2D2" in views.headline and len(views.texts) == 3


def test_bad_dashboard_input_is_refused():
    with pytest.raises(ValueError, match="empty"):
        check_prompt("  ")
    with pytest.raises(ValueError, match="limit"):
        check_prompt("x" * 5000)
    with pytest.raises(ValueError, match="tau_on > tau_off"):
        build_configs(Settings(tau_on=-1, tau_off=0))
    with pytest.raises(ValueError, match="steps"):
        build_configs(Settings(block_length=4, steps=8))
