"""Everything the results area shows, computed from traces alone (live runs and replays alike)."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd
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
from .narration import narrate
from .tables import stats_table
from .tokens import tokens_html


@dataclass
class Views:
    headline: str
    texts: dict[str, str]
    player_all: str
    player_baseline: str
    player_s2d2: str
    trajectory_baseline: go.Figure
    trajectory_s2d2: go.Figure
    energy: go.Figure
    router: go.Figure
    cost: go.Figure
    table: pd.DataFrame


def _times(a: float, b: float) -> str:
    return f"{a / b:.1f}×" if b else "—"


def headline_html(runs: dict[str, Trace]) -> str:
    """One paragraph that says what S2D2 did to this prompt and what it saved."""
    s2d2, ar, base = runs.get("S2D2"), runs.get("AR"), runs.get("Baseline")
    if s2d2 is None:
        return ""
    s = s2d2.summary
    parts = [
        f"<b>S2D2</b> wrote {s.generated_tokens} tokens in <b>{s.nfe} forwards</b> ({s.tpf:.2f} tokens per forward)"
    ]
    if ar:
        parts.append(
            f"<b>{_times(s.tpf, ar.summary.tpf)}</b> fewer forwards per token than AR "
            f"and {_times(s.generated_tokens / s.wall_seconds, ar.summary.generated_tokens / ar.summary.wall_seconds)} its speed in wall time"
        )
    if base:
        parts.append(f"{_times(s.tpf, base.summary.tpf)} the baseline's tokens per forward")
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
    return f'<div class="headline">{sentence}</div>'


def run_caption(trace: Trace) -> str:
    s = trace.summary
    return (
        f'<div class="run-caption">{s.generated_tokens} tokens · {s.nfe} forwards · '
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


PLOT_IDS = {"Baseline": "plot-trajectory-baseline", "S2D2": "plot-trajectory-s2d2"}


def player_html(trace: Trace | None, run: str) -> str:
    """▶ Play / ❚❚ Pause for one trajectory and the sentence of the step shown (the last one at first).

    The buttons do nothing on the server: the page's player script
    (``assets/player.js``) animates the plot named in ``data-plot``.
    """
    if trace is None or not trace.steps:
        return ""
    sentence = html.escape(narrate(trace)[-1])
    return (
        f'<div class="player" data-run="{run}" data-plot="{PLOT_IDS[run]}">'
        f'<button type="button" class="play-button" aria-label="Play the {run} trajectory">▶ Play</button>'
        f'<p class="narration" aria-live="polite">{sentence}</p></div>'
    )


def player_all_html(runs: dict[str, Trace]) -> str:
    """One control that replays every run in lockstep, one forward at a time, so cheaper runs finish first."""
    if not runs:
        return ""
    spent = " · ".join(f"{html.escape(name)} {t.summary.nfe}" for name, t in runs.items())
    return (
        '<div class="player player-all"><button type="button" class="play-all-button">▶ Play all runs by forward</button>'
        f'<p class="clock" aria-live="polite">forwards per run: {spent}</p></div>'
    )


def build_views(runs: dict[str, Trace]) -> Views:
    base, s2d2 = runs.get("Baseline"), runs.get("S2D2")
    missing = empty_figure("No such run in this comparison.")
    return Views(
        headline=headline_html(runs),
        texts={name: text_panel(runs, name) for name in ("AR", "Baseline", "S2D2")},
        player_all=player_all_html(runs),
        player_baseline=player_html(base, "Baseline"),
        player_s2d2=player_html(s2d2, "S2D2"),
        trajectory_baseline=(
            trajectory_figure(base, f"Baseline ({base.method}) trajectory", "Baseline") if base else missing
        ),
        trajectory_s2d2=trajectory_figure(s2d2, "S2D2 trajectory", "S2D2") if s2d2 else missing,
        energy=residual_energy_figure(s2d2) if s2d2 else missing,
        router=router_figure(s2d2) if s2d2 else missing,
        cost=cost_figure(runs),
        table=stats_table(runs),
    )
