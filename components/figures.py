"""Plotly figures built from traces: pure functions, trace in, figure out.

Nothing here runs a model or touches Gradio, so the dashboard, the benchmark
and the tests all draw the same pictures from the same records.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from s2d2.trace import FORWARD_KINDS, KEPT, OUTCOMES, RESAMPLED, Trace

from .narration import sub_blocks
from .palette import (
    DRAFTED,
    EDITED,
    KIND_COLORS,
    LOOKAHEAD_COLORS,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    RUN_COLORS,
    display_outcome,
    display_token,
    pale,
)
from .player import energy_meta, frame, replay_slider, replay_steps, trajectory_meta

FONT = dict(family="Inter, system-ui, sans-serif", size=12, color="#1e293b")


def house_layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    """The look every figure of the dashboard shares: title at the left, white paper, the house font."""
    fig.update_layout(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=15)),
        height=height,
        margin=dict(l=60, r=20, t=60, b=40),
        paper_bgcolor="white",
        plot_bgcolor="white",
        font=FONT,
        hoverlabel=dict(font=dict(family="ui-monospace, monospace", size=12)),
    )
    return fig


def empty_figure(message: str, height: int = 260) -> go.Figure:
    """A blank figure that says why it is blank."""
    fig = go.Figure()
    fig.add_annotation(
        text=message, showarrow=False, font=dict(size=14, color="#64748b"), x=0.5, y=0.5, xref="paper", yref="paper"
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return house_layout(fig, "", height)


# -- trajectory ------------------------------------------------------------

# Cell categories of the trajectory grid. Committed cells use the outcome's
# colour in the step that committed them and a pale tint afterwards.
CATEGORIES = ["drafted"] + list(OUTCOMES) + [f"earlier:{o}" for o in OUTCOMES]


def _category_colors(method: str) -> list[str]:
    colors = [DRAFTED]
    colors += [OUTCOME_COLORS[display_outcome(method, o)] for o in OUTCOMES]
    colors += [pale(OUTCOME_COLORS[display_outcome(method, o)]) for o in OUTCOMES]
    return colors


def _discrete_colorscale(colors: list[str]) -> list[list]:
    """A colorscale mapping the integer ``i`` (with ``zmin=0, zmax=len-1``) to ``colors[i]``."""
    n = len(colors)
    scale = []
    for i, color in enumerate(colors):
        scale += [[i / n, color], [(i + 1) / n, color]]
    return scale


def trajectory_grid(trace: Trace) -> tuple[list[list[float | None]], list[list[str]], list[str]]:
    """Step × position grid of categories (``None`` = not in play), hover texts, row labels."""
    n = len(trace.output_ids)
    committed: dict[int, str] = {}
    z, hover, labels = [], [], []
    for step in trace.steps:
        row: list[float | None] = [None] * n
        text = [""] * n
        for position, outcome in committed.items():
            row[position] = CATEGORIES.index(f"earlier:{outcome}")
            text[position] = f"pos {position}: {display_token(trace.output_tokens[position])!r} (committed earlier)"
        for p in step.positions:
            if p.position >= n:
                continue
            category = p.outcome or "drafted"
            row[p.position] = CATEGORIES.index(category)
            verb = OUTCOME_LABELS[display_outcome(trace.method, p.outcome)] if p.outcome else "drafted, still masked"
            detail = f"p={p.p:.3f}" + ("" if p.q is None else f" q={p.q:.3f} e={p.energy:+.2f}")
            shown = display_token(trace.text_of(p.committed if p.outcome else p.token))
            text[p.position] = f"pos {p.position}: {shown!r}<br>{verb}<br>{detail}"
            if p.outcome:
                committed[p.position] = p.outcome
        z.append(row)
        hover.append(text)
        labels.append(step_label(len(labels), step))
    return z, hover, labels


def step_label(index: int, step) -> str:
    """A step as every view numbers it: its index in the run from 0, with the block it worked on."""
    return f"{index} (b{step.block})"


def _sequence_at(trace: Trace, upto: int) -> tuple[list[float | None], list[str]]:
    """The sequence after step ``upto``: committed tokens by outcome (as edited by then), current drafts in grey."""
    n = len(trace.output_ids)
    z: list[float | None] = [None] * n
    text = [""] * n
    for index, step in enumerate(trace.steps[: upto + 1]):
        for p in step.positions:
            if p.position >= n:
                continue
            if p.outcome:
                z[p.position] = CATEGORIES.index(p.outcome if index == upto else f"earlier:{p.outcome}")
                text[p.position] = display_token(trace.text_of(p.committed))
            elif index == upto:
                z[p.position] = 0
                text[p.position] = display_token(trace.text_of(p.token))
        for e in step.edits:  # a rewrite replaces the committed token from its step on
            if e.position < n:
                text[e.position] = display_token(trace.text_of(e.new))
    return z, text


def _curtain(k: int, n: int, steps: int) -> dict:
    """A white veil over the grid rows after step ``k``: a filled scatter, so it slides smoothly."""
    top = k + 0.5
    return dict(x=[-0.5, n - 0.5, n - 0.5, -0.5, -0.5], y=[top, top, steps - 0.5, steps - 0.5, top])


def _edit_marks(trace: Trace, upto: int) -> dict:
    """Rings on the grid where the editing pass rewrote a committed token, up to step ``upto``.

    An edit changes a token the grid already shows as committed, so without a mark of its own the
    rewrite would be invisible in the figure (LLaDA2.x's τ_edit)."""
    n = len(trace.output_ids)
    x, y, text = [], [], []
    for index, step in enumerate(trace.steps[: upto + 1]):
        for e in step.edits:
            if e.position < n:
                old, new = display_token(trace.text_of(e.old)), display_token(trace.text_of(e.new))
                x.append(e.position)
                y.append(index)
                text.append(
                    f"pos {e.position}: {old!r} rewritten as {new!r}<br>by the editing pass (τ_edit),"
                    f"<br>the new draft {e.confidence:.2f} sure"
                )
    return dict(x=x, y=y, text=text)


READABLE_CELLS = 40  # positions the token band labels; a 100-token run's cells are ~6 px wide


def trajectory_figure(trace: Trace, title: str, run: str = "") -> go.Figure:
    """The decoding replayed: which position was drafted and committed at each step.

    Bottom: one row per step, one column per generated position, blocks marked
    (dark dotted lines), and sub-blocks inside them (light).
    Top: the sequence as it stood after the step chosen on the slider or by
    the page's ▶ Play, with a veil over later steps. The replay's frames
    travel in the layout's meta (:mod:`components.player` says why and how);
    the slider's steps animate to those frames, so the slider follows Play.
    The traces are added in :data:`components.player.CURVES` order.
    """
    n, steps = len(trace.output_ids), len(trace.steps)
    if n == 0 or steps == 0:
        return empty_figure("No tokens were generated.")
    z, hover, labels = trajectory_grid(trace)
    colors = _category_colors(trace.method)
    scale = _discrete_colorscale(colors)
    zmax = len(CATEGORIES) - 1
    grid_height = min(560, max(160, 14 * steps))
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        row_heights=[70 / (70 + grid_height), grid_height / (70 + grid_height)],
    )
    strip_z, strip_text = _sequence_at(trace, steps - 1)
    # A cell narrower than a short word cannot hold its token: past READABLE_CELLS positions the band is
    # colour only, and each token is in its hover (and in the run's text above the figure).
    band_text = "%{text}" if n <= READABLE_CELLS else ""
    common = dict(colorscale=scale, zmin=-0.5, zmax=zmax + 0.5, showscale=False, xgap=1, ygap=1)
    fig.add_trace(
        go.Heatmap(
            z=[strip_z],
            text=[strip_text],
            texttemplate=band_text,
            textfont=dict(size=10),
            hovertemplate="%{text}<extra></extra>",
            name="sequence",
            **common,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=z,
            text=hover,
            x=list(range(n)),
            y=list(range(steps)),
            hovertemplate="%{text}<extra></extra>",
            name="steps",
            **common,
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            **_curtain(steps - 1, n, steps),
            mode="lines",
            fill="toself",
            fillcolor="rgba(255,255,255,0.88)",
            line=dict(width=0),
            hoverinfo="skip",
            showlegend=False,
            name="later steps",
        ),
        row=2,
        col=1,
    )
    if any(step.edits for step in trace.steps):
        fig.add_trace(
            go.Scatter(
                **_edit_marks(trace, steps - 1),
                mode="markers",
                marker=dict(symbol="circle-open", size=10, color=EDITED, line=dict(width=2.5)),
                hovertemplate="%{text}<extra></extra>",
                name="rewritten by the editing pass (τ_edit)",
            ),
            row=2,
            col=1,
        )
    for category, color in zip(CATEGORIES[: 1 + len(OUTCOMES)], colors):
        if category != "drafted" and not any(p.outcome == category for s in trace.steps for p in s.positions):
            continue
        label = (
            "drafted, not committed"
            if category == "drafted"
            else OUTCOME_LABELS[display_outcome(trace.method, category)]
        )
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker=dict(size=11, color=color, symbol="square"),
                name=label,
                showlegend=True,
            )
        )
    for b in sorted({s.block_start for s in trace.steps if 0 < s.block_start < n}):
        fig.add_vline(x=b - 0.5, line=dict(color="#0f172a", width=1, dash="dot"), row=2, col=1)
    sub_starts = sub_block_starts(trace)
    for b in sub_starts:
        fig.add_vline(x=b - 0.5, line=dict(color="#94a3b8", width=1, dash="dot"), row=2, col=1)
    if sub_starts:
        title += f" · {trace.config['block_length']}-token blocks in sub-blocks of {trace.config['sub_block_length']}"
    fig.update_yaxes(
        autorange="reversed",
        tickmode="array",
        tickvals=list(range(steps)),
        ticktext=labels,
        title_text="step",
        row=2,
        col=1,
        showgrid=False,
    )
    if steps > 30:
        stride = math.ceil(steps / 30)
        fig.update_yaxes(tickvals=list(range(0, steps, stride)), ticktext=labels[::stride], row=2, col=1)
    fig.update_yaxes(visible=False, row=1, col=1)
    fig.update_xaxes(title_text="generated position", row=2, col=1, showgrid=False, range=[-0.5, n - 0.5])
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    shown = replay_steps(steps)
    fig.update_layout(
        sliders=[replay_slider(shown)],
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0, xanchor="left", font=dict(size=11)),
        meta=trajectory_meta(trace, run, shown, _frames(trace, shown)),
    )
    height = 70 + grid_height + 250
    # Room above the plot for a legend that wraps onto two or three lines on a phone.
    fig = house_layout(fig, title, height)
    return fig.update_layout(margin=dict(t=100), title=dict(y=1.0, yref="container", yanchor="top", pad=dict(t=8)))


def sub_block_starts(trace: Trace) -> list[int]:
    """Generated positions where a sub-block starts inside a block (Fast-dLLM v2's sub-block decoding)."""
    layout = sub_blocks(trace)
    if layout is None:
        return []
    sub, count = layout
    starts = {s.block_start + k * sub for s in trace.steps for k in range(1, count)}
    return sorted(p for p in starts if 0 < p < len(trace.output_ids))


def _frames(trace: Trace, shown: list[int]) -> list[dict]:
    """One frame per shown step: the sequence strip and the veil at that step, and the edit rings made by then."""
    n, steps = len(trace.output_ids), len(trace.steps)
    edited = any(step.edits for step in trace.steps)
    frames = []
    for k in shown:
        strip_z, strip_text = _sequence_at(trace, k)
        changes = {"strip": dict(z=[strip_z], text=[strip_text]), "curtain": _curtain(k, n, steps)}
        if edited:
            changes["edits"] = _edit_marks(trace, k)
        frames.append(frame(k, changes))
    return frames


# -- residual energy ---------------------------------------------------------


def residual_energy_figure(trace: Trace) -> go.Figure:
    """Residual energy ``e = log p − log q`` of every verified draft, and the residual mass.

    Rows are verifications, columns generated positions. Positive energy: the
    drafter was more confident than the AR verifier; rejected drafts are crossed.
    The right panel is the residual mass ``Σ(q − p)+``, the probability that a
    draft from ``p`` is rejected.
    """
    n = len(trace.output_ids)
    verified = [s for s in trace.steps if any(p.q is not None for p in s.positions)]
    if not verified or n == 0:
        return empty_figure(
            "No verification happened in this run (the router skipped every step, or this is not S2D2)."
        )
    energy = [[None] * n for _ in verified]
    mass = [[None] * n for _ in verified]
    hover = [[""] * n for _ in verified]
    rejected_x, rejected_y = [], []
    for row, step in enumerate(verified):
        for p in step.positions:
            if p.q is None or p.position >= n:
                continue
            energy[row][p.position] = p.energy
            mass[row][p.position] = p.residual_mass
            status = OUTCOME_LABELS[p.outcome] if p.outcome else "not reached (after a rejection)"
            hover[row][p.position] = (
                f"pos {p.position} draft {display_token(trace.text_of(p.token))!r}<br>p={p.p:.3f} q={p.q:.3f} ratio={p.ratio:.2f}<br>"
                f"e={p.energy:+.2f}  mass={p.residual_mass:.2f}<br>{status}"
            )
            if p.outcome in (RESAMPLED, KEPT):
                rejected_x.append(p.position)
                rejected_y.append(row)
    bound = max(1.0, max((abs(e) for r in energy for e in r if e is not None), default=1.0))
    index_of = {id(step): i for i, step in enumerate(trace.steps)}
    labels = [step_label(index_of[id(s)], s) for s in verified]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.62, 0.38],
        horizontal_spacing=0.09,
        subplot_titles=("residual energy e = log p − log q", "residual mass Σ(q − p)+"),
    )
    fig.add_trace(
        go.Heatmap(
            z=energy,
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            colorscale="RdBu_r",
            zmid=0,
            zmin=-bound,
            zmax=bound,
            xgap=1,
            ygap=1,
            colorbar=dict(title="e", x=0.56, len=0.9, thickness=12),
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=mass,
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            colorscale="Oranges",
            zmin=0,
            zmax=1,
            xgap=1,
            ygap=1,
            colorbar=dict(title="mass", x=1.0, len=0.9, thickness=12),
        ),
        row=1,
        col=2,
    )
    for col in (1, 2):
        fig.add_trace(
            go.Scatter(
                x=rejected_x,
                y=rejected_y,
                mode="markers",
                marker=dict(symbol="x-thin", size=12, line=dict(width=2.5, color="#0f172a")),
                name="rejected draft",
                showlegend=col == 1,
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )
    fig.update_yaxes(
        autorange="reversed",
        tickmode="array",
        tickvals=list(range(len(verified))),
        ticktext=labels,
        title_text="verification",
        row=1,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", showticklabels=False, row=1, col=2)
    fig.update_xaxes(title_text="generated position", range=[-0.5, n - 0.5])
    latest, row_of_step = -1, []
    for step in trace.steps:
        if latest + 1 < len(verified) and step is verified[latest + 1]:
            latest += 1
        row_of_step.append(latest)
    last = len(verified) - 1
    fig.add_shape(
        type="rect", xref="paper", yref="y", x0=0, x1=1, y0=last - 0.5, y1=last + 0.5,
        line=dict(color="#0f172a", width=2), fillcolor="rgba(0,0,0,0)",
    )  # fmt: skip
    fig.update_layout(
        legend=dict(orientation="h", y=-0.18, x=0),
        meta=energy_meta(row_of_step, shape=0),
    )
    fig = house_layout(fig, "Where the verifier disagreed with the drafter", min(640, 200 + 22 * len(verified)))
    return fig.update_layout(margin=dict(t=90))


# -- router ------------------------------------------------------------------


def router_figure(trace: Trace) -> go.Figure:
    """Per step: expected accepted tokens, the score and its thresholds, verify or skip."""
    routed = [(i, s) for i, s in enumerate(trace.steps) if s.route is not None]
    if not routed:
        return empty_figure("This run has no router (only S2D2 routes).")
    x = [i for i, _ in routed]
    labels = [step_label(i, s) for i, s in routed]
    routes = [s.route for _, s in routed]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.07)

    def series(values: list, name: str, color: str, short: str) -> go.Scatter:
        return go.Scatter(
            x=x,
            y=values,
            mode="lines+markers",
            name=name,
            line=dict(color=color),
            customdata=labels,
            hovertemplate="%{customdata}: " + short + "=%{y:.2f}<extra></extra>",
        )

    fig.add_trace(
        series([r.expected_accepted for r in routes], "E[K] expected accepted", "#0ea5e9", "E[K]"), row=1, col=1
    )
    spans = [r.span_length for r in routes]
    fig.add_trace(
        go.Bar(x=x, y=spans, name="span length", marker_color="#cbd5e1", opacity=0.6, customdata=labels,
               hovertemplate="%{customdata}: span %{y}<extra></extra>"),
        row=1,
        col=1,
    )  # fmt: skip
    if any(r.score is not None for r in routes):
        fig.add_trace(series([r.score for r in routes], "score s", "#f59e0b", "s"), row=1, col=1)
    for name, value in routes[0].thresholds.items():
        label = f"{name.replace('tau_', 'τ_')} = {value:g}"
        fig.add_hline(
            y=value,
            line=dict(dash="dash", color="#475569", width=1),
            annotation_text=label,
            annotation_position="top left",
            row=1,
            col=1,
        )
    n = len(trace.output_ids)
    committed = [sum(p.position < n for p in s.committed) for _, s in routed]
    fig.add_trace(
        go.Bar(
            x=x,
            y=committed,
            marker_color=["#16a34a" if r.verify else "#94a3b8" for r in routes],
            name="tokens committed (green: verified, grey: skipped)",
            customdata=[
                [lbl, "verify" if r.verify else "skip", r.state or "—", r.n_high] for lbl, r in zip(labels, routes)
            ],
            hovertemplate="%{customdata[0]}: %{customdata[1]}, %{y} committed<br>hysteresis state %{customdata[2]}<br>n_high %{customdata[3]}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    if any(r.state for r in routes):
        for xi, r in zip(x, routes):
            if r.state == "on":
                fig.add_vrect(x0=xi - 0.5, x1=xi + 0.5, fillcolor="#bbf7d0", opacity=0.35, line_width=0, row=1, col=1)
    fig.update_yaxes(title_text="tokens / score", row=1, col=1)
    fig.update_yaxes(title_text="committed", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="step (S2D2 run)", row=2, col=1)
    stride = max(1, len(x) // 24)
    fig.update_xaxes(tickmode="array", tickvals=x[::stride], ticktext=labels[::stride])
    fig.update_layout(legend=dict(orientation="h", y=-0.2, x=0), barmode="overlay")
    return house_layout(fig, f"Router: {routes[0].policy} policy", 460)


# -- cost --------------------------------------------------------------------


def lookahead_counts(trace: Trace) -> dict[str, int]:
    """Verifications that carried a lookahead, by what became of it (``used``/``discarded``)."""
    counts: dict[str, int] = {}
    for f in trace.forwards:
        if f.lookahead:
            counts[f.lookahead] = counts.get(f.lookahead, 0) + 1
    return counts


def kind_name(kind: str, runs: dict[str, Trace]) -> str:
    """A forward kind's legend name; AR's forwards are drafts of a one-token block, which the legend says
    when an AR run is drawn (a bare "draft" read as if AR drafted and never verified)."""
    if kind == "draft" and any(trace.config.get("method") == "ar" for trace in runs.values()):
        return "draft (AR: each forward drafts its one token)"
    return kind


def cost_figure(runs: dict[str, Trace]) -> go.Figure:
    """Forwards by kind and decode wall time, one bar per run; lookahead forwards beside them when present."""
    names = list(runs)
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("forwards by kind (NFE)", "decode wall time (s)"), horizontal_spacing=0.12
    )
    for kind in FORWARD_KINDS:
        counts = [runs[n].summary.nfe_by_kind[kind] for n in names]
        if any(counts):
            fig.add_trace(
                go.Bar(
                    x=names,
                    y=counts,
                    name=kind_name(kind, runs),
                    marker_color=KIND_COLORS[kind],
                    offsetgroup="nfe",
                    hovertemplate=f"{kind}: %{{y}}<extra></extra>",
                ),
                row=1,
                col=1,
            )
    lookahead = {n: lookahead_counts(runs[n]) for n in names}
    for outcome, color in LOOKAHEAD_COLORS.items():
        counts = [lookahead[n].get(outcome, 0) for n in names]
        if any(counts):
            fig.add_trace(
                go.Bar(
                    x=names,
                    y=counts,
                    name=f"of those verifies: with lookahead, {outcome}",
                    marker=dict(color=color, pattern=dict(shape="/")),
                    offsetgroup="lookahead",
                    hovertemplate=f"lookahead {outcome}: %{{y}}<extra></extra>",
                ),
                row=1,
                col=1,
            )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[runs[n].summary.wall_seconds for n in names],
            marker_color=[RUN_COLORS.get(n, "#64748b") for n in names],
            text=[f"{runs[n].summary.wall_seconds:.2f}s" for n in names],
            textposition="outside",
            showlegend=False,
            hovertemplate="%{x}: %{y:.3f}s<extra></extra>",
        ),
        row=1,
        col=2,
    )
    totals = [runs[n].summary.nfe for n in names]
    fig.add_trace(
        go.Scatter(
            x=names,
            y=totals,
            mode="text",
            text=[str(t) for t in totals],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )
    fig.update_layout(barmode="stack", legend=dict(orientation="h", y=-0.15, x=0))
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, max(totals) * 1.18 + 1], row=1, col=1)
    fig.update_yaxes(range=[0, max(runs[n].summary.wall_seconds for n in names) * 1.25 + 1e-3], row=1, col=2)
    return house_layout(fig, "What each run cost", 380)
