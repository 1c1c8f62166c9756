"""Gradio building blocks of the dashboard and the handlers behind them.

``app.py`` lays these out and wires the events; everything that computes lives
in the engine or in the pure view functions, so handlers stay short. The
settings panel is built from :data:`s2d2.settings.SETTINGS`: a new config
field gets its control here without an edit.
"""

from __future__ import annotations

import dataclasses
import html
import json
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

import gradio as gr

from s2d2.config import PRESETS, DecodeConfig, read_settings
from s2d2.decode import DecodeCancelled, generate
from s2d2.forcing import ForcedDraft
from s2d2.rewind import Rewind
from s2d2.settings import Setting
from s2d2.trace import Trace

from .bundle import bundle_json, load_bundle_file
from .guide import guide_html
from .inspector import inspector_hint, inspector_html
from .player import PLOT_IDS
from .runner import (
    BASELINE_RULE,
    BASELINE_SETTING,
    BUNDLED,
    SLIDER_MAX,
    ModelCache,
    Progress,
    build_configs,
    check_prompt,
    defaults,
    panel_settings,
    preset_values,
    resolve,
    stream_all,
)
from .views import UNCHANGED, VIEWS, Slot, View, build_views, live_views
from .whatif import REWIND_FIELDS, rewind_html, what_if_html

ASSETS = Path(__file__).resolve().parents[1] / "assets"
DEMO_COMPARISON = ASSETS / "demo_comparison.json"
RESULTS = ASSETS.parent / "docs" / "results"
# Each bundled model's benchmark grid (scripts/bench_bundled.sh), by the label the Benchmarks tab shows.
BENCHMARK_SUMMARIES = {
    "SDAR (bundled): Table 1": RESULTS / "bundled" / "summary.json",
    "Fast-dLLM v2 (bundled-fast-dllm-v2): Table 2": RESULTS / "bundled-fast-dllm-v2" / "summary.json",
    "LLaDA2.x (bundled-llada2): Table 3": RESULTS / "bundled-llada2" / "summary.json",
}
BENCHMARK_SUMMARY = next(iter(BENCHMARK_SUMMARIES.values()))
BUNDLED_LABELS = {
    "bundled": "bundled SDAR 4.8M (CPU, offline)",
    "bundled-fast-dllm-v2": "bundled Fast-dLLM v2 4.8M (CPU, offline)",
    "bundled-llada2": "bundled LLaDA2.x MoE 6.4M (CPU, offline)",
}
MODELS = ModelCache()
_CANCELS: dict[str, threading.Event] = {}
STREAM_EVERY = 0.3  # seconds between streamed updates: a few per second

BUNDLED_CAN = (
    "**What the bundled models can do.** Three small models trained by this project, one per block-diffusion "
    "family (SDAR, Fast-dLLM v2, LLaDA2.x), on three synthetic tasks only: word problems with + and − "
    "(*Tom has 4 rocks. He buys 8 more. …*), team picks (*Pick two different players from … Then cheer for "
    "the first one.*) and chains, worked answers of 6–8 steps (*Fay has 13 coins. She gives 10 to Ned. …*). They cannot write "
    "open text: other prompts give a word or two of nonsense. Pick a hub model (GPU) for open prompts."
)
SECTIONS = (
    ("decoding", "**Diffusion** — blocks and the confidence rule, shared by the baseline and S2D2."),
    ("verifier", "**S2D2 verifier** — when to verify, and how drafts are accepted."),
    ("sampling", "**Sampling** — shared by all three runs, same seed."),
)


def model_choices() -> list[tuple[str, str]]:
    """(label, public id) pairs for the model picker: the bundled models first, the SDAR one the default."""
    from s2d2.models.catalog import MODEL_CATALOG

    choices = [(label, model_id) for model_id, label in BUNDLED_LABELS.items()]
    choices += [
        (f"{m.hub_id} ({m.parameters_billion:g}B, {m.bf16_gb:.0f} GB bf16, GPU)", m.hub_id) for m in MODEL_CATALOG
    ]
    return choices


def examples() -> list[dict]:
    """Each example: a prompt, the bundled model and preset it runs with, and what it shows about S2D2.

    An example without a ``model`` runs on the default (SDAR) bundled model.
    """
    return [{"model": BUNDLED, **e} for e in json.loads((ASSETS / "examples.json").read_text())]


FAMILY_OF_MODEL = {"bundled": "SDAR", "bundled-fast-dllm-v2": "Fast-dLLM v2", "bundled-llada2": "LLaDA2.x"}


def example_labels() -> list[str]:
    """Each example as one chip of the compact list: its model family and its prompt (Gradio cuts a label
    after 60 characters; :func:`example_prompts_html` gives the page the whole prompt for the chip's hover)."""
    return [f"{FAMILY_OF_MODEL.get(e['model'], e['model'])} · {e['prompt']}" for e in examples()]


def example_prompts_html() -> str:
    """Every example's whole prompt and what it shows, in order, for the player script to put on each chip's hover."""
    hovers = [
        f"{e['shows']} ({FAMILY_OF_MODEL.get(e['model'], e['model'])}, {e['preset']}): {e['prompt']}"
        for e in examples()
    ]
    return f'<div class="example-prompts" hidden data-prompts="{html.escape(json.dumps(hovers), quote=True)}"></div>'


def example_picked() -> str:
    """An example's settings are in place but nothing has decoded it yet: say so, and what Run will do."""
    return status_html(
        "Example loaded: press <b>Run</b> to decode it live (a few seconds on this CPU). "
        "The results below are still the previous run's until then.",
        "info",
    )


OWN_PROMPT = "Your own prompt: run it to see what S2D2 does with it (the examples below each say what they show)."


def lesson_for(prompt: str) -> str:
    """What the prompt in the box shows: an example's lesson while the box holds that example's prompt.

    Typing over an example must not leave its lesson describing a prompt that
    is no longer there.
    """
    text = (prompt or "").strip()
    if not text:
        return ""
    return next((e["lesson"] for e in examples() if e["prompt"] == text), OWN_PROMPT)


# -- settings panel ------------------------------------------------------------


def _control(s: Setting, value):
    """The control of one setting, chosen by its kind, choices and bounds."""
    label, info = s.label, s.help
    if s.choices is not None:
        kind = gr.Radio if len(s.choices) <= 3 else gr.Dropdown
        return kind(list(s.choices), value=value, label=label, info=info, elem_id=f"set-{s.name}")
    if s.kind is bool:
        return gr.Checkbox(value=value, label=label, info=info, elem_id=f"set-{s.name}")
    if s.kind is tuple:
        return gr.Textbox(value=" ".join(map(str, value)), label=label, info=info, elem_id=f"set-{s.name}")
    if s.kind is str:
        return gr.Textbox(value=value, label=label, info=info, elem_id=f"set-{s.name}")
    high = SLIDER_MAX.get(s.name, s.maximum)
    if not s.optional and s.minimum is not None and high is not None and high - s.minimum <= 1024:
        step = s.step or (1 if s.kind is int else 0.01)
        return gr.Slider(s.minimum, high, value=value, step=step, label=label, info=info, elem_id=f"set-{s.name}")
    return gr.Number(
        value=value,
        label=label,
        info=info,
        precision=0 if s.kind is int else None,
        minimum=s.minimum,
        maximum=s.maximum,
        elem_id=f"set-{s.name}",
    )


@dataclass
class SettingsPanel:
    """The settings controls by name: the baseline rule first, then every panel setting."""

    controls: dict = field(default_factory=dict)

    def names(self) -> list[str]:
        return list(self.controls)

    def components(self) -> list:
        return list(self.controls.values())


def _by_group() -> dict[str, list[Setting]]:
    by_group: dict[str, list[Setting]] = {}
    for s in panel_settings():
        by_group.setdefault(s.group, []).append(s)
    return by_group


def panel_order() -> list[str]:
    """The settings' names in the order the panel lays out (and the page sends) them."""
    by_group = _by_group()
    order = [BASELINE_RULE[0]] + [s.name for group, _ in SECTIONS for s in by_group.get(group, [])]
    return order + [s.name for g, items in by_group.items() if g not in dict(SECTIONS) for s in items]


def settings_panel() -> tuple[gr.Dropdown, SettingsPanel]:
    """Preset picker and one control per setting; the ``advanced`` group sits in its own accordion."""
    start = defaults()
    preset = gr.Dropdown(
        choices=[("custom (keep the settings below)", "custom"), ("dashboard defaults", "defaults")]
        + [(f"{p.name}: {p.description}", p.name) for p in PRESETS.values()],
        value="custom",
        label="Paper preset",
        info="Fills in the settings below from one of the paper's configurations.",
        elem_id="preset",
    )
    panel = SettingsPanel()
    by_group = _by_group()
    with gr.Row(equal_height=False, elem_classes=["settings-row"]):
        for group, title in SECTIONS:
            with gr.Column(min_width=240):
                gr.Markdown(title)
                if group == BASELINE_SETTING.group:
                    panel.controls[BASELINE_SETTING.name] = _control(BASELINE_SETTING, start[BASELINE_SETTING.name])
                for s in by_group.get(group, []):
                    panel.controls[s.name] = _control(s, s.shown(start[s.name]))
    with gr.Accordion("Advanced settings", open=False, elem_id="advanced-settings"):
        with gr.Row(equal_height=False, elem_classes=["settings-row"]):
            advanced = [s for g, items in by_group.items() if g not in dict(SECTIONS) for s in items]
            half = (len(advanced) + 1) // 2
            for part in (advanced[:half], advanced[half:]):
                with gr.Column(min_width=240):
                    for s in part:
                        panel.controls[s.name] = _control(s, s.shown(start[s.name]))
    return preset, panel


def preset_panel_values(name: str) -> dict:
    """The panel values a preset sets, by setting name, as the panel's controls hold them; none for ``custom``."""
    values = preset_values(name) if name in PRESETS or name == "defaults" else {}
    by_name = {s.name: s for s in panel_settings()}
    return {n: by_name[n].shown(values[n]) if n in by_name else values[n] for n in panel_order() if n in values}


def apply_preset(name: str) -> list:
    """Settings updates for a preset (``custom`` changes nothing, ``defaults`` restores the dashboard's)."""
    values = preset_panel_values(name)
    return [gr.update(value=values[n]) if n in values else gr.update() for n in panel_order()]


# -- results -------------------------------------------------------------------


@dataclass
class Results:
    """The results area's components, keyed as :data:`components.views.VIEWS` keys its views."""

    slots: dict[str, gr.components.Component]
    inspect_request: gr.Textbox  # written by the page's player script: "run|step|position|nonce"

    def components(self) -> list:
        """The outputs in :data:`VIEWS` order, as :func:`render` and :func:`render_stream` return values."""
        return [self.slots[view.key] for view in VIEWS]

    def inspector_panels(self) -> list:
        """The inspector panels in :data:`PLOT_IDS` order, as :func:`inspect` returns them."""
        return [self.slots[f"inspector:{run}"] for run in PLOT_IDS]


def _make_slot(slot: Slot) -> gr.components.Component:
    """The component of one view's slot, with its note above it."""
    if slot.note:
        gr.Markdown(slot.note, elem_classes=["timing-note"])
    if slot.heading:
        gr.Markdown(slot.heading)
    if slot.kind == "plot":
        return gr.Plot(elem_id=slot.elem_id, show_label=False)
    if slot.kind == "table":
        return gr.Dataframe(elem_id=slot.elem_id, show_label=False, wrap=True)
    value = slot.initial() if slot.initial else None
    return gr.HTML(value, elem_id=slot.elem_id, elem_classes=list(slot.classes))


def _lay_out(views: Iterable[View], slots: dict[str, gr.components.Component]) -> None:
    """One place's views in order: a run of views sharing a ``row`` side by side, the others one under another."""
    for row, side_by_side in groupby(views, key=lambda view: view.slot.row):
        if row is None:
            slots.update((view.key, _make_slot(view.slot)) for view in side_by_side)
            continue
        with gr.Row(equal_height=False):
            for view in side_by_side:
                with gr.Column(scale=view.slot.scale, min_width=view.slot.min_width):
                    slots[view.key] = _make_slot(view.slot)


def tab_id(tab: str) -> str:
    """A results tab's id, from the last word of its label ("Residual energy" -> "tab-energy")."""
    return "tab-" + tab.split()[-1].lower()


def results_area() -> Results:
    """One slot per view of :data:`VIEWS`, in its order: the views above the tabs, then one tab per ``tab``."""
    slots: dict[str, gr.components.Component] = {}
    _lay_out((view for view in VIEWS if view.slot.tab is None), slots)
    with gr.Tabs():
        tabbed = (view for view in VIEWS if view.slot.tab is not None)
        for tab, views in groupby(tabbed, key=lambda view: view.slot.tab):
            with gr.Tab(tab, id=tab_id(tab)):
                _lay_out(views, slots)
    request = gr.Textbox(elem_id="inspect-request", elem_classes=["inspect-request"], show_label=False, container=False)
    return Results(slots, request)


RESULT_SLOTS = len(VIEWS)
# The runs each page session shows, for its inspector. Kept here, not in a gr.State: a State makes every
# page hold a heartbeat stream open. The oldest sessions are forgotten first.
_SHOWN: OrderedDict[str, dict[str, Trace]] = OrderedDict()
MAX_SESSIONS = 64


def session_key(request: gr.Request | None) -> str:
    """The page session a request comes from (``local`` outside a page): the key of its runs and its cancel."""
    return getattr(request, "session_hash", None) or "local"


def remember(request: gr.Request | None, traces: dict[str, Trace]) -> None:
    """Keep the runs a session shows, so its inspector can answer without the page sending them back."""
    key = session_key(request)
    _SHOWN[key] = dict(traces)
    _SHOWN.move_to_end(key)
    while len(_SHOWN) > MAX_SESSIONS:
        _SHOWN.popitem(last=False)


def render(traces: dict) -> list:
    """Values for :meth:`Results.components`, in order."""
    return list(build_views(traces).values())


def render_stream(shown: dict[str, Trace], changed: str) -> list:
    """Values while decoding: every run's text so far, the trajectory of the run that moved."""
    return [gr.update() if value is UNCHANGED else value for value in live_views(shown, changed).values()]


def inspect(asked: str, request: gr.Request = None) -> list:
    """The inspector panels for a request from the page: ``run|step|position|nonce`` opens one,
    ``run|close|nonce`` closes it, ``run|guide|step|part|nonce`` shows the walk-through of a step
    (``step`` may be ``auto``), ``run|whatif|step|position|token|nonce`` decodes the run again with that
    draft forced, ``run|rewind|step|position|method|acceptance|policy|threshold|nonce`` decodes it again
    with those settings from that step; the other panel stays as it is."""
    run, *rest = (asked or "").split("|")
    updates = {name: gr.update() for name in PLOT_IDS}
    if run not in PLOT_IDS:
        return list(updates.values())
    trace = _SHOWN.get(session_key(request), {}).get(run)
    if rest[:1] == ["guide"] and len(rest) >= 3:
        updates[run] = guide_html(trace, run, rest[1], rest[2])
        return list(updates.values())
    if rest[:1] == ["whatif"] and len(rest) >= 4:
        updates[run] = what_if(trace, run, rest[1], rest[2], rest[3])
        return list(updates.values())
    if rest[:1] == ["rewind"] and len(rest) >= 3 + len(REWIND_FIELDS):
        updates[run] = rewind(trace, run, rest[1], rest[2], dict(zip(REWIND_FIELDS, rest[3:])))
        return list(updates.values())
    try:
        step, position = int(rest[0]), int(rest[1])
    except (IndexError, ValueError):
        updates[run] = inspector_hint(run)
    else:
        updates[run] = inspector_html(trace, run, step, position)
    return list(updates.values())


def what_if(trace: Trace | None, run: str, step: str, position: str, token: str) -> str:
    """The run decoded again with one draft forced (:mod:`s2d2.forcing`), set beside the original; a forcing
    that cannot be made, or a model that cannot load (a replayed hub run offline), is said in the panel."""
    try:
        index, at, forced_token = int(step), int(position), int(token)
        if trace is None or not 0 <= index < len(trace.steps):
            raise ValueError("there is no such step in this page's run")
        record = trace.steps[index]
        forced = ForcedDraft(record.block, record.step, at, forced_token)
        model = MODELS.get(trace.model)
        again = generate(model, trace.prompt_ids, DecodeConfig.from_dict(trace.config), forced=forced)
    except (ValueError, OSError) as err:
        return _cannot(run, "this what-if", err)
    return what_if_html(trace, again, run)


def rewind(trace: Trace | None, run: str, step: str, position: str, settings: dict[str, str]) -> str:
    """The run decoded again from one step with other settings (:mod:`s2d2.rewind`), set beside the
    original; settings that cannot be read or switched mid-run are said in the panel."""
    try:
        index, at = int(step), int(position)
        if trace is None or not 0 <= index < len(trace.steps):
            raise ValueError("there is no such step in this page's run")
        original = DecodeConfig.from_dict(trace.config)
        given = read_settings(settings)
        verify = dataclasses.replace(original.verify, acceptance=given["acceptance"], policy=given["policy"])
        config = dataclasses.replace(original, method=given["method"], threshold=given["threshold"], verify=verify)
        record = trace.steps[index]
        model = MODELS.get(trace.model)
        again = generate(model, trace.prompt_ids, original, rewind=Rewind(record.block, record.step, config))
    except (ValueError, OSError) as err:
        return _cannot(run, "this rewind", err)
    return rewind_html(trace, again, run, at)


def _cannot(run: str, what: str, err: Exception) -> str:
    return (
        f'<div class="inspector" data-run="{run}"><p class="insp-note">Cannot decode {what}: '
        f"{html.escape(str(err))}</p></div>"
    )


def status_html(message: str, kind: str = "info") -> str:
    return f'<div class="status status-{kind}">{message}</div>' if message else ""


def _export_file(traces: dict) -> str:
    path = Path(tempfile.mkdtemp(prefix="s2d2-")) / "s2d2-comparison.json"
    path.write_text(bundle_json(traces))
    return str(path)


def _new_cancel_event(request: gr.Request | None) -> threading.Event:
    """A fresh event per run, so a cancelled run still winding down never sees the next run's clear."""
    event = _CANCELS[session_key(request)] = threading.Event()
    return event


def _drop_cancel_event(request: gr.Request | None, event: threading.Event) -> None:
    """Forget a finished run's event (unless a newer run of the session has replaced it), so the table
    holds only runs in progress instead of one entry per session that ever ran."""
    key = session_key(request)
    if _CANCELS.get(key) is event:
        del _CANCELS[key]


def run_comparison(request: gr.Request, model_id: str, prompt: str, preset: str, *values) -> Iterator[list]:
    """Decode with AR, the baseline and S2D2, streaming each run's text and trajectory as blocks commit.

    ``request`` comes first because Gradio fills a ``gr.Request`` only into a
    positional parameter: after ``*values`` it would always be ``None``, and
    every page's run would be remembered (and cancelled) under one key.

    ``values`` are the panel's settings in :func:`panel_order`; a picked preset
    (anything but ``custom``) overrides the ones it sets (:func:`~components.runner.resolve`
    with ``preset_wins``), so the run matches the preset the page shows even when
    the picker's panel update has not arrived yet. Editing a setting by hand sets
    the picker back to ``custom`` in the page.
    Yields status, results and the export file. Bad input or a model that
    cannot load leaves the previous results in place and says why.
    """
    cancel = _new_cancel_event(request)
    given = dict(zip(panel_order(), values))
    try:
        yield from _run_comparison(model_id, prompt, preset, given, request, cancel)
    finally:
        # Gradio's ``cancels=`` only drops this generator: the decode thread behind it stops on the event.
        cancel.set()
        _drop_cancel_event(request, cancel)


def _run_comparison(
    model_id: str, prompt: str, preset: str, given: dict, request, cancel: threading.Event
) -> Iterator[list]:
    keep = [gr.update()] * RESULT_SLOTS
    try:
        prompt = check_prompt(prompt)
        configs = build_configs(resolve(preset, given, preset_wins=True))
        lines: list[str] = []
        model = MODELS.get(model_id, announce=lines.append)
        shown: dict[str, Trace] = {}
        for item in stream_all(model, prompt, configs, should_stop=cancel.is_set, every=STREAM_EVERY):
            if isinstance(item, Progress) and item.trace is None:
                note = "Every run is decoded; timing them now (untimed warm-ups done)…"
                yield [status_html(note, "info"), *keep, gr.update()]
            elif isinstance(item, Progress):
                shown[item.name] = item.trace
                remember(request, shown)
                n = item.trace.summary.generated_tokens
                note = f"Decoding {item.name}: {n} token{'' if n == 1 else 's'} so far…"
                yield [status_html(note, "info"), *render_stream(shown, item.name), gr.update()]
            else:
                traces = item
    except DecodeCancelled:
        yield [
            status_html("Cancelled: decoding stopped; the results below are from before.", "warn"),
            *keep,
            gr.update(),
        ]
        return
    except ValueError as err:
        yield [status_html(html.escape(str(err)), "error"), *keep, gr.update()]
        return
    remember(request, traces)
    yield [status_html(""), *render(traces), gr.update(value=_export_file(traces), visible=True)]


def cancel_run(request: gr.Request = None) -> str:
    event = _CANCELS.get(session_key(request))
    if event is not None:
        event.set()
    return status_html("Cancelled: decoding stopped; the results below are from before.", "warn")


def replay(file, request: gr.Request = None) -> list:
    """Render a saved comparison (or single trace) with no model at all."""
    keep = [gr.update()] * RESULT_SLOTS
    if file is None:
        return [status_html(""), *keep]
    try:
        traces = load_bundle_file(file if isinstance(file, str) else file.name)
    except (OSError, ValueError) as err:
        return [status_html(f"Cannot replay this file: {html.escape(str(err))}", "error"), *keep]
    remember(request, traces)
    return [
        status_html(f"Replaying a saved comparison ({', '.join(traces)}): no model was run.", "info"),
        *render(traces),
    ]


def startup(request: gr.Request = None) -> list:
    """Open on a saved comparison of the first example, its prompt and lesson in place: no compute."""
    status, *views = replay(str(DEMO_COMPARISON), request)
    first = examples()[0]
    note = (
        "Showing a saved run of the first example (no model was run). Press ▶ Play to watch it, or Run to decode live."
    )
    return [status_html(note, "info"), *views, first["prompt"], first["lesson"]]


# -- benchmarks tab -------------------------------------------------------------


def bundled_benchmark_views(label: str) -> list:
    """The Benchmarks tab for one bundled model's grid, by its label in :data:`BENCHMARK_SUMMARIES`."""
    return benchmark_views(str(BENCHMARK_SUMMARIES[label]))


def benchmark_views(path: str | None = None) -> list:
    """Status, frontiers (forwards and wall time), Figure 3 and Figure 2, and the table of a saved ``summary.json``."""
    from .benchmarks import frontier_figure, load_summary, summary_frame
    from .study import energy_figure, scaling_figure

    source = Path(path) if path else BENCHMARK_SUMMARY
    try:
        data = load_summary(source)
    except (OSError, ValueError) as err:
        empty = frontier_figure([])
        return [status_html(f"No benchmark loaded: {html.escape(str(err))}", "warn"), empty, empty, empty, empty, None]
    meta, rows = data.get("meta", {}), data["methods"]
    note = (
        f"{html.escape(str(meta.get('command', '')))} — {meta.get('problems_per_family')} problems per family, "
        f"{meta.get('processes', 1)} process(es) on {html.escape(str(meta.get('machine', '?')))}, {meta.get('seconds', '?')} s"
    )
    families = list(meta.get("families") or [])
    return [
        status_html(note, "info"),
        frontier_figure(rows, "nfe"),
        frontier_figure(rows, "wall"),
        scaling_figure(rows, meta, families),
        energy_figure(rows, families),
        summary_frame(rows),
    ]
