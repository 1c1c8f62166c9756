"""The page's player, Python half: what figures carry for ``assets/player.js`` and the buttons it drives.

Gradio draws a ``gr.Plot`` with ``Plotly.react``, which drops a figure's
``frames``. So a trajectory figure carries its replay in
``layout.meta["s2d2"]`` (one frame per shown step, with the step's forward
count and sentence) and the script adds the frames with ``Plotly.addFrames``;
the residual-energy figure carries which of its rows to outline at each step.
Both halves of that protocol are kept here and in the script beside it, so a
change to one is made next to the other.
"""

from __future__ import annotations

import html
from pathlib import Path

from s2d2.trace import Trace

from .narration import forwards_after, narrate

SCRIPT = Path(__file__).resolve().parents[1] / "assets" / "player.js"
META_KEY = "s2d2"  # layout.meta[META_KEY] is what the script reads
MAX_SLIDER_STEPS = 160
# The trajectory figure's traces, in the order it adds them: the script tells a click on the grid from one
# on the sequence strip by these numbers, and frames restyle the strip, the veil and the edit rings.
CURVES = {"strip": 0, "grid": 1, "curtain": 2, "edits": 3}
PLOT_IDS = {"Baseline": "plot-trajectory-baseline", "S2D2": "plot-trajectory-s2d2"}


def script() -> str:
    """The page's player script, for ``gr.Blocks.launch(js=...)``."""
    return SCRIPT.read_text(encoding="utf-8")


def replay_steps(steps: int) -> list[int]:
    """The steps the replay stops at: all of them, or an even sample of long runs."""
    if steps <= MAX_SLIDER_STEPS:
        return list(range(steps))
    return sorted({round(i * (steps - 1) / (MAX_SLIDER_STEPS - 1)) for i in range(MAX_SLIDER_STEPS)})


def frame(step: int, changes: dict[str, dict]) -> dict:
    """One replay frame: the new data of the named curves (see :data:`CURVES`) at ``step``."""
    return dict(name=str(step), traces=[CURVES[name] for name in changes], data=list(changes.values()))


def trajectory_meta(trace: Trace, run: str, shown: list[int], frames: list[dict]) -> dict:
    """The trajectory's ``layout.meta``: its frames, and each shown step's forward count and sentence."""
    spent, sentences = forwards_after(trace), narrate(trace)
    return {
        META_KEY: {
            "kind": "trajectory",
            "run": run,
            "curves": CURVES,
            "positions": len(trace.output_ids),  # the inspector's arrow keys stay inside the grid
            "total_steps": len(trace.steps),
            "steps": shown,
            "forwards": [spent[k] for k in shown],
            "narration": [sentences[k] for k in shown],
            "frames": frames,
        }
    }


def energy_meta(row_of_step: list[int], shape: int) -> dict:
    """The residual-energy figure's ``layout.meta``: the script moves outline ``shape`` to the verification at
    (or last before) the step the S2D2 trajectory shows, ``row_of_step[step]``."""
    return {META_KEY: {"kind": "energy", "run": "S2D2", "row_of_step": row_of_step, "shape": shape}}


def replay_slider(shown: list[int]) -> dict:
    """Slider steps that animate to the step's frame (so the slider also follows Play)."""
    jump = dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))
    return dict(
        active=len(shown) - 1,
        steps=[dict(method="animate", label=str(k), args=[[str(k)], jump]) for k in shown],
        currentvalue=dict(prefix="step ", font=dict(size=12)),
        pad=dict(t=36, b=4),
        len=1.0,
        x=0,
        y=0,
        yanchor="top",
    )


def player_html(trace: Trace | None, run: str) -> str:
    """▶ Play / ❚❚ Pause for one trajectory and the sentence of the step shown (the last one at first).

    The buttons do nothing on the server: the script animates the plot named in ``data-plot``.
    """
    if trace is None or not trace.steps:
        return ""
    sentence = html.escape(narrate(trace)[-1])
    walk = (
        '<button type="button" class="guide-start" data-step="auto">Walk me through a verification</button>'
        if trace.method == "s2d2" and trace.summary.verifications
        else ""
    )
    return (
        f'<div class="player" data-run="{run}" data-plot="{PLOT_IDS[run]}">'
        f'<button type="button" class="play-button" aria-label="Play the {run} trajectory">▶ Play</button>{walk}'
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
