"""The results area is data, the player's protocol has one Python half, and the opening demo teaches the lesson."""

from __future__ import annotations

import re
from itertools import groupby

import gradio as gr

from components import ui
from components.bundle import load_bundle_file
from components.figures import empty_figure
from components.player import CURVES, SCRIPT, trajectory_meta
from components.views import VIEWS, Slot, View
from s2d2.trace import ACCEPTED, RESAMPLED


def _area(monkeypatch=None, views=None):
    if views is not None:
        monkeypatch.setattr(ui, "VIEWS", views)
    with gr.Blocks():
        return ui.results_area()


def test_results_area_makes_one_slot_per_view_with_the_views_ids():
    results = _area()
    assert list(results.slots) == [view.key for view in VIEWS]
    assert [slot.elem_id for slot in results.components()] == [view.slot.elem_id for view in VIEWS]
    kinds = {"html": gr.HTML, "plot": gr.Plot, "table": gr.Dataframe}
    assert all(isinstance(results.slots[v.key], kinds[v.slot.kind]) for v in VIEWS)
    assert [p.elem_id for p in results.inspector_panels()] == ["inspector-baseline", "inspector-s2d2"]


def test_each_results_tab_holds_consecutive_views():
    tabs = [tab for tab, _ in groupby(VIEWS, key=lambda view: view.slot.tab) if tab is not None]
    assert tabs == ["Trajectory", "Residual energy", "Router", "Cost", "Table", "Speed-up"]
    assert [ui.tab_id(tab) for tab in tabs] == ["tab-trajectory", "tab-energy", "tab-router", "tab-cost", "tab-table", "tab-speed-up"]


def test_a_new_figure_is_one_function_and_one_row(monkeypatch):
    """A view added to VIEWS gets its slot with no edit of the layout, and the handlers fill it."""
    extra = View("extra", Slot("plot", "plot-extra", "Extra"), lambda runs: empty_figure(f"{len(runs)} runs"))
    results = _area(monkeypatch, (*VIEWS, extra))
    assert isinstance(results.slots["extra"], gr.Plot) and results.slots["extra"].elem_id == "plot-extra"
    assert len(results.components()) == len(VIEWS) + 1
    monkeypatch.setattr("components.views.VIEWS", (*VIEWS, extra))
    status, *values = ui.replay(str(ui.DEMO_COMPARISON))
    assert len(values) == len(VIEWS) + 1 and values[-1].layout.annotations[0].text == "3 runs"


def test_the_player_script_reads_only_what_the_figures_carry():
    """Every field of ``layout.meta.s2d2`` that assets/player.js reads is one components/player.py writes."""
    script = SCRIPT.read_text()
    traces = load_bundle_file(ui.DEMO_COMPARISON)
    written = set(trajectory_meta(traces["S2D2"], "S2D2", [0], [])["s2d2"]) | {"row_of_step", "shape"}
    read = set(re.findall(r"\bm\.(\w+)", script)) | set(re.findall(r"meta\(\w+\)\.(\w+)", script))
    assert read and read <= written, read - written
    assert set(re.findall(r"m\.curves\.(\w+)", script)) == {"grid", "strip"} <= set(CURVES)


def test_the_trajectory_adds_its_curves_in_the_players_order():
    from components.figures import trajectory_figure

    trace = load_bundle_file(ui.DEMO_COMPARISON)["S2D2"]
    fig = trajectory_figure(trace, "S2D2", "S2D2")
    names = {"strip": "sequence", "grid": "steps", "curtain": "later steps"}
    assert {curve: fig.data[CURVES[curve]].name for curve in names} == names
    assert all(frame["traces"] == [CURVES["strip"], CURVES["curtain"]] for frame in fig.layout.meta["s2d2"]["frames"])


# -- the opening demo ----------------------------------------------------------


def _answer(text: str) -> str:
    return re.findall(r"\d+", text)[-1]


def _first_rejection(trace):
    """(step, position record, drafts accepted before it in that verification) of the first rejected draft."""
    for step in trace.steps:
        for p in step.positions:
            if p.outcome == RESAMPLED:
                before = [q for q in step.positions if q.outcome == ACCEPTED and q.position < p.position]
                return step, p, len(before)
    raise AssertionError("S2D2 rejected no draft")


def test_the_opening_demo_is_a_long_answer_that_s2d2_repairs():
    first = ui.examples()[0]
    traces = load_bundle_file(ui.DEMO_COMPARISON)
    ar, base, s2d2 = traces["AR"], traces["Baseline"], traces["S2D2"]
    assert {t.prompt for t in traces.values()} == {first["prompt"]}
    blocks = len({step.block for step in s2d2.steps})
    assert blocks >= 4 and s2d2.summary.rejections >= 1
    assert base.output_ids != ar.output_ids and s2d2.output_ids == ar.output_ids
    assert _answer(base.text) != _answer(s2d2.text) == _answer(ar.text)


def test_the_opening_lesson_states_what_its_trace_shows():
    """Every claim of "What this example shows" is read back from the saved comparison, so a regenerated
    demo with other numbers fails until its lesson is rewritten."""
    lesson = ui.examples()[0]["lesson"]
    traces = load_bundle_file(ui.DEMO_COMPARISON)
    ar, base, s2d2 = traces["AR"], traces["Baseline"], traces["S2D2"]
    _, rejected, accepted_before = _first_rejection(s2d2)
    draft, repaired = s2d2.text_of(rejected.token).strip(), s2d2.text_of(rejected.committed).strip()
    n, blocks, block_length = len(s2d2.output_ids), len({s.block for s in s2d2.steps}), s2d2.config["block_length"]
    claims = [
        f"{n} tokens over {blocks} blocks of {block_length}",
        f"p = {rejected.p:.2f} for the {draft}",
        f"the baseline writes it and answers {_answer(base.text)}",
        f"q = {rejected.q:.4f}",
        f"accepts the {accepted_before} drafts before it, rejects the {draft}, puts in AR's {repaired}",
        f"S2D2 answers {_answer(s2d2.text)}, AR's text token for token",
        f"It spends {s2d2.summary.nfe} forwards; AR takes {ar.summary.nfe}, the baseline {base.summary.nfe}",
    ]
    assert [claim for claim in claims if claim not in lesson] == []
    assert s2d2.summary.rejections == 1, "the lesson tells of one rejection"
    quoted = re.findall(r'"([^"]+)"', lesson)
    assert quoted and all(q in base.text and q not in s2d2.text for q in quoted), "it quotes the baseline's slip"
    numbers = set(re.findall(r"\d+(?:\.\d+)?", " ".join(claims) + base.text + s2d2.text))
    assert set(re.findall(r"\d+(?:\.\d+)?", lesson)) <= numbers, "every number it states is the trace's"
