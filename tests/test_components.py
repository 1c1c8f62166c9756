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
from components.runner import build_configs, check_prompt, resolve
from components.tables import stats_table
from components.tokens import tokens_html
from components.views import UNCHANGED, VIEWS, build_views, live_views
from s2d2.trace import OUTCOMES
from helpers import decode_each


@pytest.fixture(scope="module")
def runs(tiny_model):
    settings = resolve(given=dict(block_length=8, steps=8, threshold=0.3, max_new_tokens=24, acceptance="stochastic"))
    saved = tiny_model.stop_token_ids
    tiny_model.stop_token_ids = []
    try:
        return decode_each(tiny_model, "Ann has 3 pens. She buys 2 more.", build_configs(settings))
    finally:
        tiny_model.stop_token_ids = saved


def test_runs_share_prompt_seed_and_length(runs):
    assert list(runs) == ["AR", "Baseline", "S2D2"]
    assert len({tuple(t.prompt_ids) for t in runs.values()}) == 1
    assert all(len(t.output_ids) == 24 for t in runs.values())
    assert runs["S2D2"].summary.verifications > 0


def test_trajectory_figure_carries_its_frames_in_meta(runs):
    trace = runs["S2D2"]
    fig = trajectory_figure(trace, "S2D2", "S2D2")
    strip, grid, curtain = fig.data[0], fig.data[1], fig.data[2]
    assert strip.type == grid.type == "heatmap" and curtain.fill == "toself"
    assert len(grid.z) == len(trace.steps) and len(grid.z[0]) == len(trace.output_ids)
    meta = fig.layout.meta["s2d2"]
    frames = meta["frames"]
    assert meta["run"] == "S2D2" and len(frames) == len(meta["narration"]) == len(trace.steps)
    # Each slider step animates to the frame of its step, so the slider follows Play.
    slider = fig.layout.sliders[0]
    assert [s.args[0][0] for s in slider.steps] == [f["name"] for f in frames]
    assert all(s.method == "animate" for s in slider.steps)
    # A frame restyles the strip (trace 0) and slides the veil (trace 2) to just below its step.
    first, last = frames[0], frames[-1]
    assert first["traces"] == [0, 2] and first["data"][0]["z"] != last["data"][0]["z"]
    assert first["data"][1]["y"][0] == 0.5 and last["data"][1]["y"][0] == len(trace.steps) - 0.5
    assert None not in last["data"][0]["z"][0], "the last frame shows the final sequence"
    assert meta["forwards"] == sorted(meta["forwards"]) and meta["forwards"][-1] == trace.summary.nfe


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
    stacked = [t for t in fig.data if t.type == "bar" and (t.name or "").split(" (")[0] in ("prefill", "draft", "verify", "commit")]
    assert "draft (AR: each forward drafts its one token)" in [t.name for t in stacked]
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
    assert set(classes) <= set(OUTCOMES)
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
    assert "S2D2" in views["headline"] and all(f"text:{name}" in views for name in again)


def test_views_table_drives_render_and_streaming(runs):
    """One ordered table: finished runs fill every slot; while decoding only the run that moved is redrawn."""
    from components import ui

    assert [key for key in build_views(runs)] == [view.key for view in VIEWS]
    assert len(ui.render(runs)) == len(VIEWS) == ui.RESULT_SLOTS
    live = live_views({"S2D2": runs["S2D2"]}, "S2D2")
    assert live["trajectory:Baseline"] is UNCHANGED and live["player:Baseline"] is UNCHANGED
    assert "decoding" in live["trajectory:S2D2"].layout.title.text
    assert "waiting" in live["text:AR"] and "tok" in live["text:S2D2"]
    assert live["table"] is UNCHANGED


def test_bad_dashboard_input_is_refused():
    with pytest.raises(ValueError, match="empty"):
        check_prompt("  ")
    with pytest.raises(ValueError, match="limit"):
        check_prompt("x" * 5000)
    with pytest.raises(ValueError, match="tau_on > tau_off"):
        build_configs(resolve(given={"tau_on": -1, "tau_off": 0}))
    with pytest.raises(ValueError, match="steps"):
        build_configs(resolve(given={"block_length": 4, "steps": 8}))


def test_narration_says_what_each_step_did(runs):
    from components.narration import forwards_after, narrate

    for trace in runs.values():
        sentences = narrate(trace)
        spent = forwards_after(trace)
        assert len(sentences) == len(trace.steps)
        assert spent[-1] == trace.summary.nfe
        for i, sentence in enumerate(sentences):
            lead = rf"step {i}: " if trace.method == "ar" else rf"step {i} \(block {trace.steps[i].block}\): "
            assert re.match(lead, sentence) and f"{spent[i]} forward" in sentence, sentence
    s2d2 = runs["S2D2"]
    for i, step in enumerate(s2d2.steps):
        if step.accepted is not None:
            accepted = sum(p.outcome == "accepted" and p.position < len(s2d2.output_ids) for p in step.positions)
            assert f"the verifier accepted {accepted}" in narrate(s2d2)[i]
    assert "one forward at block size 1 predicted" in narrate(runs["AR"])[0]


def test_tokens_show_text_never_tokenizer_markers():
    from components.explainer import diagram_svg
    from components.palette import display_token

    assert display_token("▁6") == " 6" and display_token("Ġthe") == " the" and display_token("<|eot|>") == "⟨eot⟩"
    assert "▁" not in diagram_svg() and ">\u00a06<" not in diagram_svg() and "> 6<" in diagram_svg()


def test_tokens_carry_their_step_and_forward_count(runs):
    trace = runs["S2D2"]
    steps = [int(v) for v in re.findall(r'data-step="(\d+)"', tokens_html(trace))]
    spent = [int(v) for v in re.findall(r'data-f="(\d+)"', tokens_html(trace))]
    assert len(steps) == len(spent) == len(trace.output_ids)
    assert max(spent) <= trace.summary.nfe and max(steps) < len(trace.steps)


def test_settings_panel_is_derived_from_the_settings_table():
    from components.runner import DASHBOARD_OWNED, defaults, panel_settings
    from s2d2.settings import SETTINGS

    names = [s.name for s in panel_settings()]
    assert names == [s.name for s in SETTINGS if s.name not in DASHBOARD_OWNED]
    for official in ("allow_resample", "ratio_tempering", "ratio_threshold", "threshold_all_spans",
                     "always_check_high_confidence", "ucb_entropy_source", "accounting", "eb_threshold"):  # fmt: skip
        assert official in names
    assert set(defaults()) == {"baseline_method", *names}


def test_settings_by_name_give_one_line_messages():
    from components.runner import resolve

    cases = [
        ({"seed": "abc"}, "seed must be int"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"seed": -1}, "seed (Seed) must be in"),
        ({"seed": 10**30}, "seed (Seed) must be in"),
        ({"threshold": float("nan")}, "must be a number, got NaN"),
        ({"threshold": "nan"}, "must be a number, got NaN"),
        ({"blocklength": 4}, "unknown setting 'blocklength'"),
        ({"baseline_method": "magic"}, "unknown baseline_method"),
    ]
    for given, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            build_configs(resolve(given=given))
    with pytest.raises(ValueError, match="unknown preset 'sdar-z'"):
        resolve("sdar-z")
    assert resolve("sdar-a")["block_length"] == 4 and resolve("sdar-a")["max_new_tokens"] == 160


def test_bad_files_get_a_message_that_names_the_problem(tmp_path, runs):
    import json

    from components.bundle import MAX_BYTES, load_bundle, load_bundle_file

    cases = [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (json.dumps({"schema_version": 999, "runs": {"AR": {}}}), "schema version 999"),
        (json.dumps({**runs["AR"].to_dict(), "schema_version": 999}), "schema version 999"),
        (json.dumps({"runs": {"AR": 5}}), "run 'AR' is not a trace"),
        (
            json.dumps({"runs": {"AR": {**runs["AR"].to_dict(), "steps": [{"bad": 1}]}}}),
            "run 'AR' is not a valid trace",
        ),
        ("[1, 2]", "expected a JSON object"),
        ("{oops", "not valid JSON"),
    ]
    for text, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            load_bundle(text)
    big = tmp_path / "big.json"
    big.write_text(" " * (MAX_BYTES + 1))
    with pytest.raises(ValueError, match="limited to 20 MB"):
        load_bundle_file(big)


def test_cost_figure_shows_lookahead_forwards_when_recorded(runs):
    from components.figures import lookahead_counts

    s = runs["S2D2"].summary
    assert lookahead_counts(runs["S2D2"]) == {
        k: v for k, v in (("used", s.lookaheads_used), ("discarded", s.lookaheads_discarded)) if v
    }
    assert lookahead_counts(runs["AR"]) == {}
    trace = load_bundle(bundle_json({"S2D2": runs["S2D2"]}))["S2D2"]
    for i, f in enumerate(trace.forwards):
        f.lookahead = "used" if i % 2 else "discarded"
    names = [t.name for t in cost_figure({"S2D2": trace}).data]
    assert "of those verifies: with lookahead, used" in names and "of those verifies: with lookahead, discarded" in names


def test_stream_yields_partial_traces_then_the_result(tiny_model):
    from components.runner import Progress, stream_all

    configs = build_configs(resolve(given=dict(block_length=4, max_new_tokens=12)))
    items = list(stream_all(tiny_model, "Ann has 3 pens.", configs, every=0.0))
    partial, final = items[:-1], items[-1]
    assert set(final) == {"AR", "Baseline", "S2D2"}
    assert partial and all(isinstance(p, Progress) for p in partial)
    assert partial[-1] == Progress("", None), "the stream says when timing starts"
    assert {p.name for p in partial[:-1]} == {"AR", "Baseline", "S2D2"}
    for item in partial[:-1]:
        views = tokens_html(item.trace)
        assert "tok" in views
        done = final[item.name]
        assert item.trace.steps == done.steps[: len(item.trace.steps)], "a partial trace is a prefix of the run"
        committed = {p.position: p.committed for s in item.trace.steps for p in s.committed}
        assert all(done.output_ids[i] == t for i, t in committed.items() if 0 <= i < len(done.output_ids))
        if item.name != "AR":
            figure = trajectory_figure(item.trace, "partial", item.name)
            if item.trace.output_ids:  # one grid row per step so far, one column per position so far
                assert len(figure.data[1].z) == len(item.trace.steps)
                assert len(figure.data[1].z[0]) == len(item.trace.output_ids)


def test_frontier_gives_each_kind_of_s2d2_configuration_its_own_legend_entry():
    from components.benchmarks import frontier_figure
    from s2d2.config import DecodeConfig, VerifyConfig

    def row(method, nfe, config=None, **verify):
        config = config or DecodeConfig(method="s2d2", verify=VerifyConfig(**verify))
        return {
            "method": method,
            "accuracy": 0.9,
            "nfe_per_problem": nfe,
            "wall_per_problem": 0.1,
            "config": config.to_dict(),
        }

    always = DecodeConfig(method="s2d2", verify=VerifyConfig(policy="score", c=0.0))
    rows = [
        row("AR", 20, DecodeConfig(method="ar")),
        row("S2D2 B=4 always (c=0)", 6, always),
        row("S2D2 B=16 always (c=0)", 5, always.replace(block_length=16)),
        row("S2D2 B=4 always (c=0) + lookahead", 5.5, always.replace(lookahead=True)),
        row(
            "S2D2 B=4 always, greedy acceptance",
            6.2,
            always.replace(verify=VerifyConfig(policy="score", c=0.0, acceptance="greedy")),
        ),
        row("S2D2 B=4 score c=1", 7, policy="score", c=1.0),
        row("S2D2 B=4 min span 2", 8, policy="min_span", tau_span=2),
        row("S2D2 B=4 hysteresis", 9, policy="hysteresis"),
        {"method": "S2D2 from an older summary", "accuracy": 0.8, "nfe_per_problem": 4, "wall_per_problem": 0.1},
        row("threshold B=32 quality + editing", 8, DecodeConfig(method="dynamic", edit_threshold=0.5)),
        row("dynamic B=32 τ=0.7", 5, DecodeConfig(method="dynamic")),
        row("dynamic B=8 τ=0.9", 9, DecodeConfig(method="dynamic")),
        row("dynamic B=8 τ=0.5", 7, DecodeConfig(method="dynamic")),
    ]
    fig = frontier_figure(rows, "nfe")
    assert fig.data[-1].name == "AR"  # drawn over the other markers
    by_name = {t.name: t for t in sorted(fig.data, key=lambda t: t.legendrank)}
    assert list(by_name) == [
        "AR",
        "threshold",
        "dynamic B=8",
        "dynamic B=32",
        "S2D2",
        "S2D2 always, stochastic",
        "S2D2 always, stochastic + lookahead",
        "S2D2 always, greedy",
        "S2D2 min span, stochastic",
        "S2D2 score, stochastic",
        "S2D2 hysteresis, stochastic",
    ]
    # c = 0 verifies every span, so those runs are "always" whatever the router's name; B=4 and B=16 share a marker.
    assert list(by_name["S2D2 always, stochastic"].text) == ["S2D2 B=16 always (c=0)", "S2D2 B=4 always (c=0)"]
    assert list(by_name["S2D2"].text) == ["S2D2 from an older summary"]  # no config: drawn as before
    # LLaDA2's threshold settings are a baseline, and each dynamic size is its own τ sweep (a line).
    assert list(by_name["dynamic B=8"].text) == ["dynamic B=8 τ=0.5", "dynamic B=8 τ=0.9"]
    assert by_name["dynamic B=8"].mode == "markers+lines" and by_name["threshold"].mode == "markers"
    markers = {name: (t.marker.color, t.marker.symbol) for name, t in by_name.items()}
    assert len(set(markers.values())) == len(markers)  # a reader can tell every legend entry apart
    assert markers["S2D2 always, stochastic + lookahead"] == ("#16a34a", "diamond-open")
    assert markers["S2D2 always, greedy"][1] == "triangle-up"
    assert fig.layout.legend.title.text.startswith("S2D2: router, acceptance test")


def test_every_router_has_a_colour_and_every_acceptance_test_a_marker():
    from components.benchmarks import ACCEPTANCE_SYMBOL, ROUTER_STYLE
    from s2d2.acceptance import ACCEPTANCE_MODES
    from s2d2.policies import POLICIES

    assert set(ROUTER_STYLE) == set(POLICIES)
    assert set(ACCEPTANCE_SYMBOL) == set(ACCEPTANCE_MODES)
    assert len({color for _, color in ROUTER_STYLE.values()}) == len(ROUTER_STYLE)


def test_benchmark_table_headers_break_only_between_words():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    css = (root / "assets" / "style.css").read_text(encoding="utf-8")
    rules = dict(re.findall(r"(#bench-table[^{]*)\{([^}]*)\}", css))
    header = rules["#bench-table .header-cell .header "]
    assert "word-break: normal !important" in header and "overflow-wrap: normal !important" in header
    assert "width: 16rem" in rules["#bench-table .header-cell.first-column "]  # the method column wraps its names
    assert 'elem_id="bench-table"' in (root / "app.py").read_text(encoding="utf-8")


def test_sub_blocks_are_named_in_the_narration_and_marked_in_the_trajectory(family_models):
    """Fast-dLLM v2 decodes a block in sub-blocks: each step says which one it drafted, and the figure draws
    a light line where each sub-block starts inside a block."""
    from components.narration import narrate
    from s2d2 import DecodeConfig, generate

    model = family_models["fast_dllm_v2"]
    config = DecodeConfig(method="dynamic", block_length=32, sub_block_length=8, steps=8, threshold=0.9,
                          max_new_tokens=48)  # fmt: skip
    saved, model.stop_token_ids = model.stop_token_ids, []
    try:
        trace = generate(model, "Ann has 3 pens. She buys 2 more.", config)
    finally:
        model.stop_token_ids = saved
    named = set()
    for step, sentence in zip(trace.steps, narrate(trace)):
        drafted = [p.position for p in step.positions if p.outcome != "carried"]
        if drafted:
            which = (min(drafted) - step.block_start) // 8 + 1
            assert f"(block {step.block}, sub-block {which} of 4)" in sentence, sentence
            named.add((step.block, which))
    assert len(named) >= 6, "every sub-block of the answer was drafted and named"
    figure = trajectory_figure(trace, "Baseline trajectory")
    light = sorted(shape.x0 + 0.5 for shape in figure.layout.shapes if shape.line.color == "#94a3b8")
    inside = {s.block_start + k for s in trace.steps for k in (8, 16, 24)}
    assert light and light == sorted(p for p in inside if 0 < p < len(trace.output_ids))
    assert "sub-blocks of 8" in figure.layout.title.text


def test_edits_are_ringed_in_the_trajectory_and_appear_with_their_step():
    """LLaDA2.x's editing pass rewrites tokens the grid already shows as committed: each rewrite gets a ring
    at (position, step), and the replay's frame for step k shows only the edits made by then."""
    from components.palette import display_token
    from components.runner import build_configs, resolve
    from components.ui import MODELS, examples

    example = next(e for e in examples() if e["shows"] == "edit-overrides-verifier")
    traces = decode_each(MODELS.get(example["model"]), example["prompt"], build_configs(resolve(example["preset"])))
    for trace in traces.values():
        edits = [(e.position, k) for k, step in enumerate(trace.steps) for e in step.edits]
        figure = trajectory_figure(trace, "trajectory")
        rings = [t for t in figure.data if t.name == "rewritten by the editing pass (τ_edit)"]
        frames = figure.layout.meta["s2d2"]["frames"]
        if not edits:
            assert not rings and all(f["traces"] == [0, 2] for f in frames)
            continue
        assert figure.data[3] is rings[0] and sorted(zip(rings[0].x, rings[0].y)) == sorted(edits)
        for frame in frames:
            k = int(frame["name"])
            assert frame["traces"] == [0, 2, 3]
            assert sorted(zip(frame["data"][2]["x"], frame["data"][2]["y"])) == sorted(e for e in edits if e[1] <= k)
        final_strip = figure.data[0].text[0]
        assert [final_strip[i] for i, _ in edits] == [display_token(trace.output_tokens[i]) for i, _ in edits]


def test_benchmark_axes_read_as_round_numbers_and_figure_3_shows_the_top_of_the_scale():
    """A log axis ticks 1-2-5 values spanning the data (not Plotly's bare minor digits); Figure 3's y axis
    starts under its lowest point rather than at 0, and the AR label sits under its line (above it, at 100%,
    it ran into the panel's title)."""
    from components.benchmarks import log_ticks
    from components.study import scaling_figure

    assert log_ticks([6.3, 9.0, 27.5]) == [5.0, 10.0, 20.0, 50.0]
    assert log_ticks([1.0, 100.0]) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    assert log_ticks([]) == []
    rows = [
        {"method": "AR", "accuracy_by_family": {"chains": 1.0}, "nfe_by_family": {"chains": 30.0}},
        *(
            {"method": f"dynamic B={B} τ=0.9", "accuracy_by_family": {"chains": a}, "nfe_by_family": {"chains": 9.0}}
            for B, a in ((4, 0.99), (16, 0.97), (32, 0.955))
        ),
    ]
    meta = {"dynamic_best_tau": {str(B): f"dynamic B={B} τ=0.9" for B in (4, 16, 32)}}
    fig = scaling_figure(rows, meta, ["chains"])
    low, high = fig.layout.yaxis.range
    assert 85 <= low <= 95.5 - 3 and high > 100
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("AR ")]
    assert label.text == "AR 100.0%" and label.yanchor == "top"
