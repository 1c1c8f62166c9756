"""Benchmark results to figures and tables: accuracy–cost frontiers and the summary table."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from .figures import FONT, empty_figure

GROUP_STYLE = {
    "AR": ("#64748b", "star"),
    "static": ("#f59e0b", "square"),
    "dynamic B=4": ("#93c5fd", "circle"),
    "dynamic B=16": ("#2563eb", "circle"),
    "dynamic": ("#3b82f6", "circle"),
    "S2D2": ("#16a34a", "diamond"),
}
AXES = {
    "nfe": ("nfe_per_problem", "forwards (NFE) per problem"),
    "wall": ("wall_per_problem", "wall seconds per problem"),
}


def method_group(name: str) -> str:
    """Marker group of a method; each dynamic block size is its own τ sweep, drawn as a line."""
    for group in GROUP_STYLE:
        if name == group or name.startswith(group + " ") or (group == "dynamic" and name.startswith("dynamic")):
            return group
    return "S2D2"


def frontier_figure(rows: list[dict], axis: str = "nfe", title: str = "") -> go.Figure:
    """Average accuracy against cost, one marker per method, grouped and coloured by kind."""
    if not rows:
        return empty_figure("No benchmark results loaded.")
    key, label = AXES[axis]
    fig = go.Figure()
    for group, (color, symbol) in GROUP_STYLE.items():
        members = sorted((r for r in rows if method_group(r["method"]) == group), key=lambda r: r[key])
        if not members:
            continue
        fig.add_trace(
            go.Scatter(
                x=[r[key] for r in members],
                y=[100 * r["accuracy"] for r in members],
                mode="markers+lines" if group.startswith("dynamic") else "markers",
                line=dict(color=color, width=1, dash="dot"),
                marker=dict(color=color, symbol=symbol, size=12, line=dict(color="white", width=1)),
                name=group,
                text=[r["method"] for r in members],
                hovertemplate="%{text}<br>accuracy %{y:.1f}%<br>" + label + " %{x:.3g}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text=label, type="log", gridcolor="#e2e8f0")
    fig.update_yaxes(title_text="accuracy, average over task families (%)", gridcolor="#e2e8f0")
    fig.update_layout(
        title=dict(text=title or f"Accuracy against {label}", x=0.01, font=dict(size=15)),
        height=460,
        font=FONT,
        paper_bgcolor="white",
        plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.18, x=0),
        margin=dict(l=60, r=20, t=60, b=40),
    )
    return fig


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    """The summary as a table for the dashboard."""

    def maybe(x, digits=2):
        return None if x is None else round(x, digits)

    return pd.DataFrame(
        [
            {
                "method": r["method"],
                "accuracy %": round(100 * r["accuracy"], 1),
                **{f"{f} %": round(100 * v, 1) for f, v in r["accuracy_by_family"].items()},
                "NFE / problem": round(r["nfe_per_problem"], 1),
                "tokens / forward": round(r["tokens_per_forward"], 2),
                "wall s / problem": round(r["wall_per_problem"], 3),
                "speedup vs AR (NFE)": maybe(r.get("speedup_nfe_vs_ar")),
                "speedup vs AR (wall)": maybe(r.get("speedup_wall_vs_ar")),
                "vs best dynamic (NFE)": maybe(r.get("speedup_nfe_vs_best_dynamic")),
                "acceptance": maybe(r.get("acceptance_rate")),
            }
            for r in rows
        ]
    )


def load_summary(path: str | Path) -> dict:
    """A ``summary.json`` written by ``python -m s2d2.bench``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "methods" not in data:
        raise ValueError("not a benchmark summary (expected the summary.json of python -m s2d2.bench)")
    return data


def write_frontiers(rows: list[dict], out: Path, meta: dict) -> None:
    """HTML always; PNG too when a Chrome/Chromium is available to kaleido."""
    out = Path(out)
    subtitle = f"{meta.get('problems_per_family')} problems per family · {meta.get('model_name') or Path(str(meta.get('model'))).name} model"
    browser = shutil.which("chromium") or shutil.which("google-chrome")
    if browser:
        os.environ.setdefault("BROWSER_PATH", browser)
    for axis in AXES:
        fig = frontier_figure(rows, axis, f"Accuracy against {AXES[axis][1]} ({subtitle})")
        fig.write_html(out / f"frontier_{axis}.html", include_plotlyjs="cdn")
        try:
            fig.write_image(out / f"frontier_{axis}.png", width=1000, height=520, scale=2)
        except Exception as err:  # kaleido needs a browser; the HTML is the primary output
            print(f"note: PNG not written for {axis} ({type(err).__name__}: {err}); the HTML is in {out}")


def main(argv=None) -> None:
    """``python -m components.benchmarks DIR``: draw the frontiers of ``DIR/summary.json`` into ``DIR``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m components.benchmarks", description=main.__doc__)
    parser.add_argument("results", help="a directory holding the summary.json of python -m s2d2.bench")
    args = parser.parse_args(argv)
    data = load_summary(Path(args.results) / "summary.json")
    write_frontiers(data["methods"], Path(args.results), data.get("meta", {}))


if __name__ == "__main__":
    main()
