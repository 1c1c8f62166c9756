"""Everything the results area shows, computed from traces alone (live runs and replays alike)."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import plotly.graph_objects as go

from s2d2.config import Exactness
from s2d2.trace import Trace

from .figures import (
    cost_figure,
    empty_figure,
    residual_energy_figure,
    router_figure,
    trajectory_figure,
)
from .grading import grade, grade_badge
from .guide import step_to_walk
from .inspector import inspector_hint
from .player import PLOT_IDS, player_all_html, player_html
from .runner import TIMING_NOTE
from .speedup import speedup_figure, speedup_html
from .tables import stats_table
from .tokens import legend_html, outcomes_in, tokens_html


def ratio_words(ours: float, theirs: float, more: str, fewer: str, same: str) -> str:
    """``ours`` against ``theirs`` worded by its direction: "1.4× more …" or "2.0× fewer …", never "0.7× fewer"."""
    if not ours or not theirs:
        return "—"
    if abs(ours / theirs - 1) < 0.05:
        return same
    return f"{ours / theirs:.1f}× {more}" if ours > theirs else f"{theirs / ours:.1f}× {fewer}"


def _per_token(trace: Trace) -> float:
    """Forwards per generated token: what a decoder pays for each token it writes."""
    return trace.summary.nfe / max(trace.summary.generated_tokens, 1)


def _speed(trace: Trace) -> float:
    return trace.summary.generated_tokens / trace.summary.wall_seconds if trace.summary.wall_seconds else 0.0


def _grades_sentence(runs: dict[str, Trace]) -> tuple[str, bool | None]:
    """Which runs answered right, in words, and whether S2D2 did (``None``: the prompt is not graded)."""
    grades = {name: grade(trace) for name, trace in runs.items()}
    if grades.get("S2D2") is None:
        return "", None
    right = [name for name, g in grades.items() if g is not None and g.correct]
    wrong = [name for name, g in grades.items() if g is not None and not g.correct]
    expected = html.escape(grades["S2D2"].expected)
    if not wrong:
        return f" ✓ Every run's answer is right ({expected}).", True
    said = f" ✗ Wrong answer from {' and '.join(wrong)}"
    said += f"; right from {' and '.join(right)}" if right else " (AR is wrong here too)" if "AR" in wrong else ""
    return said + f": {expected}.", grades["S2D2"].correct


def headline_html(runs: dict[str, Trace]) -> str:
    """One paragraph that says what S2D2 did to this prompt, what it cost against AR, and whether it is right.

    Its colour follows S2D2's answer (green only when right or ungraded): "identical to AR" is a fact
    about exactness, never praise for a wrong answer.
    """
    s2d2, ar, base = runs.get("S2D2"), runs.get("AR"), runs.get("Baseline")
    if s2d2 is None:
        return ""
    s = s2d2.summary
    parts = [
        f"<b>S2D2</b> wrote {s.generated_tokens} tokens in <b>{s.nfe} forwards</b> ({s.tpf:.2f} tokens per forward)"
    ]
    if ar:
        forwards = ratio_words(
            _per_token(s2d2), _per_token(ar), "more forwards per token than AR", "fewer forwards per token than AR",
            "as many forwards per token as AR",
        )  # fmt: skip
        speed = ratio_words(_speed(s2d2), _speed(ar), "faster", "slower", "as fast")
        parts.append(f"<b>{forwards}</b>, {speed} in wall time")
    if base:
        parts.append(
            ratio_words(
                _per_token(s2d2), _per_token(base), "more forwards per token than the baseline",
                "fewer forwards per token than the baseline", "as many forwards per token as the baseline",
            )
        )  # fmt: skip
    sentence = "; ".join(parts) + "."
    if s.verifications:
        rate = f"{s.acceptance_rate:.0%}" if s.acceptance_rate is not None else "—"
        sentence += (
            f" The verifier ran {s.verifications} times and accepted {rate} of the drafts it checked "
            f"(mean accepted length {s.mean_accepted_length:.2f}); it corrected {s.rejections} token(s)"
        )
        sentence += f" and the router skipped {s.verifications_skipped} step(s)." if s.verifications_skipped else "."
    agree = [name for name in ("AR", "Baseline") if name in runs and runs[name].output_ids == s2d2.output_ids]
    if agree:
        sentence += f" Its output is identical to {' and '.join(agree)}."
    graded, s2d2_right = _grades_sentence(runs)
    verdict = {True: "right", False: "wrong", None: "ungraded"}[s2d2_right]
    walk = step_to_walk(s2d2)
    button = (
        ""
        if walk is None
        else f'<button type="button" class="guide-start" data-step="{walk}">Walk me through step {walk}\'s '
        "verification, with its numbers</button>"
    )
    return f'<div class="headline headline-{verdict}">{sentence}{graded}{button}</div>'


def run_caption(trace: Trace) -> str:
    s = trace.summary
    return (
        f'<div class="run-caption">{grade_badge(grade(trace))} {s.generated_tokens} tokens · {s.nfe} forwards · '
        f"{s.tpf:.2f} tok/fwd · {s.wall_seconds:.2f}s</div>"
    )


def exactness_caption(trace: Trace) -> str:
    """Beside an S2D2 run: whether its configuration makes the output the model's own AR output, or why not."""
    if trace.method != "s2d2" or not trace.exactness:
        return ""
    exact = trace.exactness["exact"]
    line = Exactness(tuple(trace.exactness["reasons"])).describe()
    return f'<div class="run-caption run-exactness" data-exact="{str(exact).lower()}">{html.escape(line)}</div>'


def text_panel(runs: dict[str, Trace], name: str) -> str:
    if name not in runs:
        return f'<div class="run-missing">No {html.escape(name)} run in this file.</div>'
    trace = runs[name]
    return run_caption(trace) + exactness_caption(trace) + tokens_html(trace)


# -- the results area as one ordered table ---------------------------------------

UNCHANGED = object()  # a live view's answer for "leave this output as it is"


@dataclass(frozen=True)
class Slot:
    """Where a view shows on the page and as what: the component ``components.ui.results_area`` makes for it.

    ``kind`` is ``html``, ``plot`` or ``table``. ``tab`` names the results tab
    holding it (``None``: above the tabs); views of one tab are consecutive in
    :data:`VIEWS`. Consecutive views sharing a ``row`` sit side by side, each in
    a column of ``scale`` and ``min_width``, under its ``heading``. ``note`` is
    a line of Markdown above the component; ``initial`` its value before any run.
    """

    kind: Literal["html", "plot", "table"]
    elem_id: str
    tab: str | None = None
    row: str | None = None
    scale: int = 1
    min_width: int = 240
    heading: str = ""
    note: str = ""
    initial: Callable[[], object] | None = None
    classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class View:
    """One output of the results area: its key, its slot, and how to fill it.

    ``build`` renders it from finished runs; ``live`` updates it while
    decoding, from the runs so far and the name of the run that just moved
    (``None``: it waits for the finished runs). A new figure is one function
    and one row of :data:`VIEWS`: the page makes its slot from ``slot``.
    """

    key: str
    slot: Slot
    build: Callable[[dict[str, Trace]], object]
    live: Callable[[dict[str, Trace], str], object] | None = None


MISSING = "No such run in this comparison."
# While decoding, the last run's headline would describe other runs: it waits for the new ones instead.
DECODING_HEADLINE = '<div class="headline headline-ungraded">Decoding… the summary comes when all three runs are done.</div>'


def _text_view(name: str) -> View:
    def live(shown: dict[str, Trace], changed: str) -> str:
        return text_panel(shown, name) if name in shown else '<div class="run-missing">waiting…</div>'

    slot = Slot("html", f"text-{name.lower()}", row="texts", heading=f"### {name}", classes=("run-text",))
    return View(f"text:{name}", slot, lambda runs: text_panel(runs, name), live)


def _trajectory_views(run: str) -> tuple[View, View, View]:
    """The run's ▶ Play control, its trajectory figure and, beside it, its inspector; while decoding, the
    figure follows the run."""

    def figure(runs: dict[str, Trace]) -> go.Figure:
        trace = runs.get(run)
        if trace is None:
            return empty_figure(MISSING)
        title = f"Baseline ({trace.method}) trajectory" if run == "Baseline" else f"{run} trajectory"
        return trajectory_figure(trace, title, run)

    def live_player(shown: dict[str, Trace], changed: str) -> object:
        return "" if changed == run else UNCHANGED

    def live_figure(shown: dict[str, Trace], changed: str) -> object:
        return trajectory_figure(shown[run], f"{run} trajectory (decoding…)", run) if changed == run else UNCHANGED

    tab, beside = "Trajectory", f"trajectory:{run}"
    player = View(
        f"player:{run}",
        Slot("html", f"player-{run.lower()}", tab),
        lambda runs: player_html(runs.get(run), run),
        live_player,
    )
    plot = View(beside, Slot("plot", PLOT_IDS[run], tab, beside, scale=3, min_width=320), figure, live_figure)
    hint = Slot(
        "html", f"inspector-{run.lower()}", tab, beside, scale=2, min_width=280, initial=lambda: inspector_hint(run)
    )
    return player, plot, View(f"inspector:{run}", hint, lambda runs: inspector_hint(run))


def _legend(runs: dict[str, Trace]) -> str:
    """The legend of the colours these runs use, and the editing outline only where an edit happened."""
    edited = any(step.edits for trace in runs.values() for step in trace.steps)
    return legend_html(outcomes_in(runs), edited)


def _of_s2d2(make: Callable[[Trace], go.Figure]) -> Callable[[dict[str, Trace]], go.Figure]:
    return lambda runs: make(runs["S2D2"]) if "S2D2" in runs else empty_figure(MISSING)


VIEWS: tuple[View, ...] = (
    View("headline", Slot("html", "headline"), headline_html, lambda shown, changed: DECODING_HEADLINE),
    View("legend", Slot("html", "legend", initial=legend_html), _legend),
    View("player_all", Slot("html", "player-all"), player_all_html),
    *(_text_view(name) for name in ("AR", "Baseline", "S2D2")),
    *(view for run in ("S2D2", "Baseline") for view in _trajectory_views(run)),
    View("energy", Slot("plot", "plot-energy", "Residual energy"), _of_s2d2(residual_energy_figure)),
    View("router", Slot("plot", "plot-router", "Router"), _of_s2d2(router_figure)),
    View("cost", Slot("plot", "plot-cost", "Cost", note=TIMING_NOTE), cost_figure),
    View("table", Slot("table", "stats-table", "Table", note=TIMING_NOTE), stats_table),
    View("speedup_text", Slot("html", "speedup-text", "Speed-up"), speedup_html),
    View("speedup", Slot("plot", "plot-speedup", "Speed-up"), speedup_figure),
)


def build_views(runs: dict[str, Trace]) -> dict[str, object]:
    """Every view of finished runs, by key, in :data:`VIEWS` order."""
    return {view.key: view.build(runs) for view in VIEWS}


def live_views(shown: dict[str, Trace], changed: str) -> dict[str, object]:
    """Every view while decoding, by key: the new value, or :data:`UNCHANGED`."""
    return {view.key: view.live(shown, changed) if view.live else UNCHANGED for view in VIEWS}
