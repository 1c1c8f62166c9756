"""The paper's two study figures from a benchmark summary: scaling with block size and the energy view.

- Figure 3: accuracy against block size for the dynamic baseline (its τ chosen
  per block size on the development split), config B and exact S2D2. Plain
  diffusion decoding loses accuracy as blocks grow; verification keeps it.
- Figure 2: the AR energy (mean −log q per output token under the model run at
  block size 1) of each method's outputs. AR's own outputs sit lowest; an
  aggressive parallel setting drifts far above; S2D2 is pulled back to AR's.

Pure functions (summary rows in, figure out); ``python -m components.benchmarks DIR``
draws both as PNG (and HTML) next to ``DIR/summary.json``, beside the frontiers.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from s2d2.study.results import AGGRESSIVE_DYNAMIC, SCALING_BLOCKS, scaling_series

from .figures import empty_figure, house_layout

SERIES_STYLE = {
    "dynamic (best τ on dev)": ("#2563eb", "circle", "dot"),
    "S2D2 config B (stochastic)": ("#16a34a", "diamond", "solid"),
    "S2D2 exact (greedy) + lookahead": ("#7c3aed", "star", "dash"),
}
ENERGY_METHODS = (
    ("AR", "#64748b"),
    ("dynamic B=16 τ=0.9", "#93c5fd"),
    (AGGRESSIVE_DYNAMIC, "#2563eb"),
    ("S2D2 B=16 always (c=0)", "#16a34a"),
    ("S2D2 B=16 exact + lookahead", "#7c3aed"),
)


def _study_layout(fig: go.Figure, title: str) -> go.Figure:
    """The house look, with the legend under the plot and a light grid."""
    fig = house_layout(fig, title, 420).update_layout(legend=dict(orientation="h", y=-0.22, x=0))
    return fig.update_yaxes(gridcolor="#e2e8f0")


def scaling_figure(rows: list[dict], meta: dict, families: list[str]) -> go.Figure:
    """Figure 3: accuracy against block size (Fast-dLLM v2: sub-block size), one panel per task family, one line
    per decoder."""
    choice = {int(B): name for B, name in (meta.get("dynamic_best_tau") or {}).items()}
    unit = meta.get("scaling_unit", "B")
    panels = {
        family: {
            label: [p for p in points if p["accuracy"] is not None]
            for label, points in scaling_series(rows, choice, family, unit).items()
        }
        for family in families
    }
    panels = {family: series for family, series in panels.items() if any(series.values())}
    if not panels:
        return empty_figure("No block-size sweep in this benchmark.")
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels), shared_yaxes=True)
    ar = next((r for r in rows if r["method"] == "AR"), None)
    for col, (family, series) in enumerate(panels.items(), 1):
        for label, points in series.items():
            if not points:
                continue
            color, symbol, dash = SERIES_STYLE[label]
            fig.add_trace(
                go.Scatter(
                    x=[p["block_length"] for p in points],
                    y=[100 * p["accuracy"] for p in points],
                    mode="markers+lines",
                    name=label,
                    legendgroup=label,
                    showlegend=col == 1,
                    line=dict(color=color, width=2, dash=dash),
                    marker=dict(color=color, symbol=symbol, size=11, line=dict(color="white", width=1)),
                    text=[
                        p["method"] if p["nfe"] is None else f"{p['method']}<br>{p['nfe']:.1f} forwards / problem"
                        for p in points
                    ],
                    hovertemplate=family + ": %{text}<br>accuracy %{y:.1f}%<extra></extra>",
                ),
                row=1,
                col=col,
            )
        if ar and ar["accuracy_by_family"].get(family) is not None:
            level = 100 * ar["accuracy_by_family"][family]
            # The label sits under the line, at the panel's left: above it, at 100% it ran into the panel's title.
            fig.add_hline(
                y=level,
                line=dict(color="#64748b", dash="dot"),
                annotation=dict(text=f"AR {level:.1f}%", font=dict(size=11, color="#475569")),
                annotation_position="bottom left",
                row=1,
                col=col,
            )
    fig.update_xaxes(
        title_text="block size B" if unit == "B" else f"{unit} size (inside 32-token blocks)",
        type="log",
        tickvals=list(SCALING_BLOCKS),
        range=[0.5, 1.6],
        gridcolor="#e2e8f0",
    )
    fig.update_yaxes(range=accuracy_range(fig))
    fig.update_yaxes(title_text="accuracy (%)", row=1, col=1)
    return _study_layout(fig, "Accuracy against block size (Figure 3): plain diffusion decoding against S2D2")


def accuracy_range(fig: go.Figure) -> list[float]:
    """A y range from a little under the lowest accuracy drawn to just over 100%: a fixed 0–100% axis
    flattened the 95–100% where the methods differ."""
    ys = [y for trace in fig.data for y in (trace.y or ()) if y is not None]
    ys += [shape.y0 for shape in fig.layout.shapes if shape.y0 is not None]
    low = min(ys, default=0.0)
    return [max(0.0, 5 * math.floor((low - 3) / 5)), 101.5]


def energy_figure(rows: list[dict], families: list[str]) -> go.Figure:
    """Figure 2: mean AR energy per output token of each method's outputs, grouped by task family."""
    by_name = {r["method"]: r for r in rows}
    shown = [(name, color) for name, color in ENERGY_METHODS if by_name.get(name, {}).get("ar_energy") is not None]
    if not shown:
        return empty_figure("This benchmark scored no AR energies (run s2d2.study.bench from this version).")
    fig = go.Figure()
    for name, color in shown:
        energies = by_name[name].get("ar_energy_by_family", {})
        fig.add_trace(
            go.Bar(
                x=families,
                y=[energies.get(f) for f in families],
                name=name,
                marker_color=color,
                hovertemplate=name + "<br>%{x}: %{y:.3f} nats / token<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="AR energy (−log q per token, nats)")
    fig.update_layout(barmode="group")
    return _study_layout(fig, "How far each trajectory sits from AR's (Figure 2: AR energy of the outputs)")
