"""Benchmark results to figures and tables: accuracy–cost frontiers and the summary table."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from s2d2.config import DecodeConfig
from s2d2.policies import always_verifies

from .figures import empty_figure, house_layout
from .study import energy_figure, scaling_figure

BASELINE_STYLE = {
    "AR": ("#64748b", "star"),
    "static": ("#f59e0b", "square"),
    "threshold": ("#0891b2", "pentagon"),  # LLaDA2's threshold decoding at the paper's settings
}
# Each dynamic block (or sub-block) size is its own τ sweep, light blue for the smallest to dark for the largest.
DYNAMIC_BLUES = ("#93c5fd", "#60a5fa", "#3b82f6", "#2563eb", "#1e40af")
UNRECORDED_S2D2 = ("#16a34a", "hexagon")  # an S2D2 run whose configuration the summary does not record
# S2D2 configurations: the router picks the colour, the acceptance test the shape, lookahead an open marker.
ROUTER_STYLE = {
    "always": ("always", "#16a34a"),
    "min_span": ("min span", "#db2777"),
    "score": ("score", "#7c3aed"),
    "hysteresis": ("hysteresis", "#92400e"),
    "ucb": ("UCB", "#dc2626"),
}
ACCEPTANCE_SYMBOL = {"stochastic": "diamond", "greedy": "triangle-up"}
AXES = {
    "nfe": ("nfe_per_problem", "forwards (NFE) per problem"),
    "wall": ("wall_per_problem", "wall seconds per problem"),
}


def method_group(name: str) -> str:
    """Marker group of a method: a baseline, one dynamic size's τ sweep (drawn as a line), or S2D2."""
    if name.startswith("dynamic"):
        return name.split(" τ=")[0]
    for group in BASELINE_STYLE:
        if name == group or name.startswith(group + " "):
            return group
    return "S2D2"


def _size(group: str) -> int:
    """The block (or sub-block) size in a dynamic group's name ("dynamic sub-block=16" -> 16)."""
    digits = "".join(c for c in group.rsplit("=", 1)[-1] if c.isdigit())
    return int(digits or 0)


def s2d2_kind(row: dict) -> tuple[str, str, bool] | None:
    """(router, acceptance, lookahead) of an S2D2 row, from the config the benchmark recorded.

    The router is ``always`` whenever the settings verify every span, whatever the policy's name
    (the score router with ``c = 0`` does). ``None`` when the row is not an S2D2 run or has no readable
    config (a summary written by another version of the bench); it is then drawn as plain S2D2.
    """
    try:
        config = DecodeConfig.from_dict(row["config"])
    except (KeyError, TypeError, ValueError):
        return None
    if config.method != "s2d2":
        return None
    verify = config.verify
    router = "always" if always_verifies(verify) else verify.policy
    return router, verify.acceptance, bool(config.lookahead)


def kind_style(router: str, acceptance: str, lookahead: bool) -> tuple[str, dict]:
    """Legend name and marker of one kind of S2D2 configuration."""
    name, color = ROUTER_STYLE[router]
    symbol = ACCEPTANCE_SYMBOL[acceptance] + ("-open" if lookahead else "")
    return f"S2D2 {name}, {acceptance}" + (" + lookahead" if lookahead else ""), dict(color=color, symbol=symbol)


def marker_groups(rows: list[dict]) -> list[tuple[str, dict, list[dict]]]:
    """(legend name, marker, rows) per legend entry: the baselines by group, then S2D2 by kind of configuration."""
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        by_group.setdefault(method_group(r["method"]), []).append(r)
    groups = [(group, dict(color=c, symbol=sym), by_group.get(group, [])) for group, (c, sym) in BASELINE_STYLE.items()]
    dynamic = sorted((g for g in by_group if g.startswith("dynamic")), key=_size)
    for i, group in enumerate(dynamic):
        color = DYNAMIC_BLUES[round((i + 1) * len(DYNAMIC_BLUES) / len(dynamic)) - 1]
        groups.append((group, dict(color=color, symbol="circle"), by_group[group]))
    kinds: dict = {}
    for r in by_group.get("S2D2", []):
        kinds.setdefault(s2d2_kind(r), []).append(r)
    color, symbol = UNRECORDED_S2D2
    groups.append(("S2D2", dict(color=color, symbol=symbol), kinds.pop(None, [])))
    routers, acceptances = list(ROUTER_STYLE), list(ACCEPTANCE_SYMBOL)
    for kind in sorted(kinds, key=lambda k: (routers.index(k[0]), acceptances.index(k[1]), k[2])):
        groups.append((*kind_style(*kind), kinds[kind]))
    return [g for g in groups if g[2]]


def frontier_figure(rows: list[dict], axis: str = "nfe", title: str = "") -> go.Figure:
    """Average accuracy against cost, one marker per method, grouped and coloured by kind."""
    if not rows:
        return empty_figure("No benchmark results loaded.")
    key, label = AXES[axis]
    fig = go.Figure()
    groups = marker_groups(rows)
    # AR is drawn last, over the rest (it is the reference every other marker is read against; drawn first, a
    # square hid its star), and keeps its place at the legend's head by its rank.
    for rank, (name, style, members) in sorted(enumerate(groups), key=lambda g: g[1][0] == "AR"):
        members = sorted(members, key=lambda r: r[key])
        is_open = style["symbol"].endswith("-open")
        fig.add_trace(
            go.Scatter(
                x=[r[key] for r in members],
                y=[100 * r["accuracy"] for r in members],
                mode="markers+lines" if name.startswith("dynamic") else "markers",
                line=dict(color=style["color"], width=1, dash="dot"),
                marker=dict(
                    **style,
                    size=16 if name == "AR" else 12,
                    line=dict(color=style["color"], width=2) if is_open else dict(color="white", width=1),
                ),
                name=name,
                legendrank=rank,
                text=[r["method"] for r in members],
                hovertemplate="%{text}<br>accuracy %{y:.1f}%<br>" + label + " %{x:.3g}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text=label, type="log", gridcolor="#e2e8f0", tickvals=log_ticks([r[key] for r in rows]))
    fig.update_yaxes(title_text="accuracy, average over task families (%)", gridcolor="#e2e8f0")
    legend_rows = (len(groups) + 1) // 2
    kinds_shown = any(name.startswith("S2D2 ") for name, _, _ in groups)
    house_layout(fig, title or f"Accuracy against {label}", 400 + 24 * legend_rows)
    fig.update_layout(
        # Two columns keep the legend short under a half-width plot; kinds come in order, lookahead after.
        legend=dict(
            orientation="h",
            entrywidth=0.5,
            entrywidthmode="fraction",
            yanchor="top",
            y=-0.16,
            x=0,
            font=dict(size=11),
            title=dict(
                text="S2D2: router, acceptance test, + lookahead (open marker)" if kinds_shown else "", side="top"
            ),
        ),
    )
    return fig


def log_ticks(values: list[float]) -> list[float]:
    """Tick values 1, 2, 5 × 10^k spanning ``values``: a log axis then reads as round numbers, never as
    Plotly's bare minor digits ("6 7 8 9 10 2 3")."""
    positive = [v for v in values if v and v > 0]
    if not positive:
        return []
    low, high = min(positive), max(positive)
    ticks, decade = [], 10.0 ** math.floor(math.log10(low))
    while decade <= high * 10:
        ticks += [m * decade for m in (1, 2, 5)]
        decade *= 10
    below = max((t for t in ticks if t <= low), default=ticks[0])
    above = min((t for t in ticks if t >= high), default=ticks[-1])
    return [round(t, 12) for t in ticks if below <= t <= above]


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
    """A ``summary.json`` written by ``python -m s2d2.study.bench``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "methods" not in data:
        raise ValueError("not a benchmark summary (expected the summary.json of python -m s2d2.study.bench)")
    return data


def write_figure(fig: go.Figure, out: Path, name: str) -> None:
    """``name.html`` always; ``name.png`` too when a Chrome/Chromium is available to kaleido."""
    browser = shutil.which("chromium") or shutil.which("google-chrome")
    if browser:
        os.environ.setdefault("BROWSER_PATH", browser)
    fig.write_html(out / f"{name}.html", include_plotlyjs="cdn")
    try:
        fig.write_image(out / f"{name}.png", width=1000, height=fig.layout.height or 480, scale=2)
    except Exception as err:  # kaleido needs a browser; the HTML is the primary output
        print(f"note: {name}.png not written ({type(err).__name__}: {err}); the HTML is in {out}")


def write_frontiers(rows: list[dict], out: Path, meta: dict) -> None:
    """The accuracy–cost frontiers, against forwards and against wall time."""
    subtitle = f"{meta.get('problems_per_family')} problems per family · {meta.get('model_name') or Path(str(meta.get('model'))).name} model"
    for axis in AXES:
        write_figure(
            frontier_figure(rows, axis, f"Accuracy against {AXES[axis][1]} ({subtitle})"), Path(out), f"frontier_{axis}"
        )


def write_study(rows: list[dict], meta: dict, out: Path) -> None:
    """Figure 3 (accuracy against block size) and Figure 2 (AR energy), beside the frontiers."""
    families = list(meta.get("families") or [])
    write_figure(scaling_figure(rows, meta, families), Path(out), "scaling")
    write_figure(energy_figure(rows, families), Path(out), "energy")


def main(argv=None) -> None:
    """``python -m components.benchmarks DIR``: draw the frontiers, Figure 3 and Figure 2 of ``DIR/summary.json``
    into ``DIR``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m components.benchmarks", description=main.__doc__)
    parser.add_argument("results", help="a directory holding the summary.json of python -m s2d2.study.bench")
    args = parser.parse_args(argv)
    data = load_summary(Path(args.results) / "summary.json")
    write_frontiers(data["methods"], Path(args.results), data.get("meta", {}))
    write_study(data["methods"], data.get("meta", {}), Path(args.results))


if __name__ == "__main__":
    main()
