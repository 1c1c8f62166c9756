"""Gradio building blocks of the dashboard and the handlers behind them.

``app.py`` lays these out and wires the events; everything that computes lives
in the engine or in the pure view functions, so handlers stay short.
"""

from __future__ import annotations

import html
import json
import tempfile
import threading
from dataclasses import dataclass, fields
from pathlib import Path

import gradio as gr

from s2d2.config import PRESETS, preset_config
from s2d2.decode import DecodeCancelled
from s2d2.models import DEFAULT_MODEL
from s2d2.policies import ESTIMATORS, POLICIES, SCORE_TYPES

from .bundle import bundle_json, load_bundle
from .runner import (
    RUN_NAMES,
    ModelCache,
    Settings,
    build_configs,
    check_prompt,
    run_all,
)
from .views import build_views

ASSETS = Path(__file__).resolve().parents[1] / "assets"
DEMO_COMPARISON = ASSETS / "demo_comparison.json"
BENCHMARK_SUMMARY = ASSETS.parent / "docs" / "results" / "bundled" / "summary.json"
BUNDLED_LABEL = "bundled 4.8M (CPU, offline)"
MODELS = ModelCache()
_CANCELS: dict[str, threading.Event] = {}


def model_choices() -> list[tuple[str, str]]:
    """(label, source) pairs for the model picker: the bundled model first."""
    from s2d2.models.catalog import MODEL_CATALOG

    choices = [(BUNDLED_LABEL, DEFAULT_MODEL)]
    choices += [
        (f"{m.hub_id} ({m.parameters_billion:g}B, {m.bf16_gb:.0f} GB bf16, GPU)", m.hub_id) for m in MODEL_CATALOG
    ]
    return choices


def examples() -> list[str]:
    return json.loads((ASSETS / "examples.json").read_text())


# -- settings panel ------------------------------------------------------------


@dataclass
class SettingsPanel:
    """The settings components, in the order of :class:`runner.Settings` fields."""

    baseline_method: gr.Radio
    block_length: gr.Slider
    sub_block_length: gr.Slider
    steps: gr.Slider
    threshold: gr.Slider
    edit_threshold: gr.Number
    policy: gr.Dropdown
    score: gr.Radio
    c: gr.Number
    tau_score: gr.Number
    tau_on: gr.Number
    tau_off: gr.Number
    tau_span: gr.Slider
    estimator: gr.Dropdown
    acceptance: gr.Radio
    cache_ver: gr.Checkbox
    draft_ver: gr.Checkbox
    temperature: gr.Slider
    top_p: gr.Slider
    seed: gr.Number
    max_new_tokens: gr.Slider

    def components(self) -> list:
        return [getattr(self, f.name) for f in fields(Settings)]


def settings_panel() -> tuple[gr.Dropdown, SettingsPanel]:
    """Preset picker plus baseline, S2D2 and sampling settings, defaults from :class:`Settings`."""
    d = Settings()
    preset = gr.Dropdown(
        choices=[("custom", "custom")] + [(f"{p.name}: {p.description}", p.name) for p in PRESETS.values()],
        value="custom",
        label="Paper preset",
        info="Fills in the settings below from one of the paper's configurations.",
    )
    with gr.Row(equal_height=False):
        with gr.Column(min_width=260):
            gr.Markdown("**Baseline** — block diffusion with a confidence rule. S2D2 uses the same blocks and rule.")
            baseline_method = gr.Radio(
                ["dynamic", "static"],
                value=d.baseline_method,
                label="Baseline rule",
                info="dynamic: commit every draft with confidence > τ; static: a fixed count per step",
            )
            block_length = gr.Slider(1, 32, value=d.block_length, step=1, label="Block length B")
            sub_block_length = gr.Slider(
                0,
                32,
                value=d.sub_block_length,
                step=1,
                label="Sub-block length",
                info="0 = the whole block; Fast-dLLM v2 decodes 32-token blocks in sub-blocks",
            )
            steps = gr.Slider(
                1,
                32,
                value=d.steps,
                step=1,
                label="Steps per (sub-)block",
                info="static commits B / steps tokens per step",
            )
            threshold = gr.Slider(0.0, 1.0, value=d.threshold, step=0.05, label="Confidence threshold τ")
            edit_threshold = gr.Number(
                value=d.edit_threshold,
                minimum=0,
                maximum=1,
                label="Edit threshold τ_edit (empty = no editing)",
                info="LLaDA2.x: rewrite a committed token when a later draft is this confident",
            )
        with gr.Column(min_width=260):
            gr.Markdown("**S2D2 verifier** — when to verify, and how drafts are accepted.")
            policy = gr.Dropdown(list(POLICIES), value=d.policy, label="Routing policy")
            with gr.Row():
                score = gr.Radio(
                    list(SCORE_TYPES), value=d.score, label="Score", info="static: E[K] − c; dynamic: E[K] − c·n_high"
                )
                c = gr.Number(value=d.c, label="c (penalty)")
            with gr.Row():
                tau_score = gr.Number(value=d.tau_score, label="τ_score")
                tau_on = gr.Number(value=d.tau_on, label="τ_on")
                tau_off = gr.Number(value=d.tau_off, label="τ_off")
            tau_span = gr.Slider(1, 32, value=d.tau_span, step=1, label="τ_span (minimum span)")
            estimator = gr.Dropdown(list(ESTIMATORS), value=d.estimator, label="Acceptance estimator")
            acceptance = gr.Radio(
                ["stochastic", "greedy"],
                value=d.acceptance,
                label="Acceptance",
                info="stochastic: min(1, q/p) as in the paper; greedy: exact AR argmax",
            )
            with gr.Row():
                cache_ver = gr.Checkbox(value=d.cache_ver, label="cache_ver (causal KV)")
                draft_ver = gr.Checkbox(value=d.draft_ver, label="draft_ver")
        with gr.Column(min_width=220):
            gr.Markdown("**Sampling** — shared by all three runs, same seed.")
            temperature = gr.Slider(
                0.0, 2.0, value=d.temperature, step=0.05, label="Temperature", info="0 = greedy drafts"
            )
            top_p = gr.Slider(0.05, 1.0, value=d.top_p, step=0.05, label="Top-p")
            seed = gr.Number(value=d.seed, precision=0, label="Seed")
            max_new_tokens = gr.Slider(8, 192, value=d.max_new_tokens, step=8, label="Max new tokens")
    panel = SettingsPanel(
        baseline_method, block_length, sub_block_length, steps, threshold, edit_threshold, policy, score, c, tau_score, tau_on, tau_off, tau_span,
        estimator, acceptance, cache_ver, draft_ver, temperature, top_p, seed, max_new_tokens,
    )  # fmt: skip
    return preset, panel


def apply_preset(name: str) -> list:
    """Settings updates for a preset (``custom`` changes nothing); sampling stays as it is."""
    keys = [f.name for f in fields(Settings)]
    if name not in PRESETS:
        return [gr.update() for _ in keys]
    c = preset_config(name)
    v = c.verify
    values = {
        "baseline_method": c.s2d2_rule,
        "block_length": c.block_length,
        "sub_block_length": 0 if c.sub_block_length == c.block_length else c.sub_block_length,
        "steps": c.steps,
        "threshold": c.threshold,
        "edit_threshold": c.edit_threshold,
        "cache_ver": c.cache_ver,
        "draft_ver": c.draft_ver,
        **{
            k: getattr(v, k)
            for k in ("policy", "score", "c", "tau_score", "tau_on", "tau_off", "tau_span", "estimator", "acceptance")
        },
    }
    return [gr.update(value=values[k]) if k in values else gr.update() for k in keys]


# -- results -------------------------------------------------------------------


@dataclass
class Results:
    headline: gr.HTML
    texts: dict
    trajectory_baseline: gr.Plot
    trajectory_s2d2: gr.Plot
    energy: gr.Plot
    router: gr.Plot
    cost: gr.Plot
    table: gr.Dataframe

    def components(self) -> list:
        return [
            self.headline,
            *self.texts.values(),
            self.trajectory_baseline,
            self.trajectory_s2d2,
            self.energy,
            self.router,
            self.cost,
            self.table,
        ]


def results_area() -> Results:
    from .tokens import legend_html

    headline = gr.HTML(elem_id="headline")
    gr.HTML(legend_html(), elem_id="legend")
    texts = {}
    with gr.Row(equal_height=False):
        for name in RUN_NAMES:
            with gr.Column(min_width=240):
                gr.Markdown(f"### {name}")
                texts[name] = gr.HTML(elem_id=f"text-{name.lower()}", elem_classes=["run-text"])
    with gr.Tabs():
        with gr.Tab("Trajectory", id="tab-trajectory"):
            trajectory_s2d2 = gr.Plot(elem_id="plot-trajectory-s2d2", show_label=False)
            trajectory_baseline = gr.Plot(elem_id="plot-trajectory-baseline", show_label=False)
        with gr.Tab("Residual energy", id="tab-energy"):
            energy = gr.Plot(elem_id="plot-energy", show_label=False)
        with gr.Tab("Router", id="tab-router"):
            router = gr.Plot(elem_id="plot-router", show_label=False)
        with gr.Tab("Cost", id="tab-cost"):
            cost = gr.Plot(elem_id="plot-cost", show_label=False)
        with gr.Tab("Table", id="tab-table"):
            table = gr.Dataframe(elem_id="stats-table", show_label=False, wrap=True)
    return Results(headline, texts, trajectory_baseline, trajectory_s2d2, energy, router, cost, table)


RESULT_SLOTS = 1 + len(RUN_NAMES) + 6  # headline, one text per run, five figures, the table


def render(traces: dict) -> list:
    """Values for :meth:`Results.components`, in order."""
    v = build_views(traces)
    return [
        v.headline,
        *(v.texts[n] for n in RUN_NAMES),
        v.trajectory_baseline,
        v.trajectory_s2d2,
        v.energy,
        v.router,
        v.cost,
        v.table,
    ]


def status_html(message: str, kind: str = "info") -> str:
    return f'<div class="status status-{kind}">{message}</div>' if message else ""


def _export_file(traces: dict) -> str:
    path = Path(tempfile.mkdtemp(prefix="s2d2-")) / "s2d2-comparison.json"
    path.write_text(bundle_json(traces))
    return str(path)


def _cancel_event(request: gr.Request | None) -> threading.Event:
    key = getattr(request, "session_hash", None) or "local"
    return _CANCELS.setdefault(key, threading.Event())


def run_comparison(model_source: str, prompt: str, *values, request: gr.Request = None, progress=gr.Progress()):
    """Decode with AR, the baseline and S2D2; returns status, results, export file.

    Bad input or a model that cannot load leaves the previous results in place
    and says why in the status line.
    """
    cancel = _cancel_event(request)
    cancel.clear()
    keep = [gr.update()] * RESULT_SLOTS
    try:
        prompt = check_prompt(prompt)
        configs = build_configs(Settings(*values))
        model = MODELS.get(model_source, announce=lambda line: progress(0.0, desc=line))

        def on_run(name: str, done: int, total: int) -> None:
            index = RUN_NAMES.index(name)
            progress((index + done / total) / len(RUN_NAMES), desc=f"{name}: {done}/{total} tokens")

        traces = run_all(model, prompt, configs, should_stop=cancel.is_set, on_run=on_run)
    except DecodeCancelled:
        return [status_html("Cancelled.", "warn"), *keep, gr.update()]
    except ValueError as err:
        return [status_html(html.escape(str(err)), "error"), *keep, gr.update()]
    return [status_html(""), *render(traces), gr.update(value=_export_file(traces), visible=True)]


def cancel_run(request: gr.Request = None) -> str:
    _cancel_event(request).set()
    return status_html("Cancelling…", "warn")


def replay(file) -> list:
    """Render a saved comparison (or single trace) with no model at all."""
    keep = [gr.update()] * RESULT_SLOTS
    if file is None:
        return [status_html(""), *keep]
    try:
        traces = load_bundle(Path(file if isinstance(file, str) else file.name).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as err:
        return [status_html(f"Cannot replay this file: {html.escape(str(err))}", "error"), *keep]
    return [
        status_html(f"Replaying a saved comparison ({', '.join(traces)}): no model was run.", "info"),
        *render(traces),
    ]


def startup() -> list:
    """Open on a saved comparison of the first example: the page is never empty and costs no compute."""
    status, *views = replay(str(DEMO_COMPARISON))
    note = "Showing a saved run of the first example (no model was run). Pick a prompt and press Run to decode live."
    return [status_html(note, "info"), *views]


# -- benchmarks tab -------------------------------------------------------------


def benchmark_views(path: str | None = None) -> list:
    """Status, frontiers (forwards and wall time) and table of a saved ``summary.json``."""
    from .benchmarks import frontier_figure, load_summary, summary_frame

    source = Path(path) if path else BENCHMARK_SUMMARY
    try:
        data = load_summary(source)
    except (OSError, ValueError) as err:
        empty = frontier_figure([])
        return [status_html(f"No benchmark loaded: {html.escape(str(err))}", "warn"), empty, empty, None]
    meta, rows = data.get("meta", {}), data["methods"]
    note = (
        f"{html.escape(str(meta.get('command', '')))} — {meta.get('problems_per_family')} problems per family, "
        f"{meta.get('processes', 1)} process(es) on {html.escape(str(meta.get('machine', '?')))}, {meta.get('seconds', '?')} s"
    )
    return [status_html(note, "info"), frontier_figure(rows, "nfe"), frontier_figure(rows, "wall"), summary_frame(rows)]
