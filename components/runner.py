"""From dashboard settings to three decodes: AR (the reference), the baseline and S2D2.

The baseline and S2D2 share the block layout and the diffusion rule, so S2D2
is exactly "the baseline plus a verifier": any difference between the two is
what verification did.

Every setting comes from :data:`s2d2.settings.SETTINGS`, declared once on the
engine's config dataclasses, and is read by the engine's one reader
(:func:`s2d2.config.read_settings`). What the dashboard adds lives in the small
tables below: its own defaults, slider ranges, the baseline rule (which also
sets S2D2's ``s2d2_rule``) and which sections of the config each run reads.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from s2d2.config import COMMIT_RULES, PRESETS, DecodeConfig, config_from_settings, read_settings
from s2d2.decode import Decoder, generate
from s2d2.models import BUNDLED_MODELS, BlockDiffusionModel, load_model
from s2d2.models.catalog import MODEL_CATALOG
from s2d2.settings import SETTINGS, Setting
from s2d2.trace import Trace

RUN_NAMES = ("AR", "Baseline", "S2D2")
MAX_PROMPT_CHARS = 4000
BUNDLED = "bundled"

# The dashboard's choices on top of the engine's defaults: greedy exact acceptance,
# AR-like caching, lookahead and the always-verify score (SDAR config B's c = 0) at B = 16.
DASHBOARD_DEFAULTS = {
    "block_length": 16,
    "threshold": 0.5,
    "acceptance": "greedy",
    "c": 0.0,
    "cache_ver": True,
    "draft_ver": True,
    "lookahead": True,
    "max_new_tokens": 160,  # the bundled model's longest answers (chains) are under 140 tokens
}
# Slider ranges narrower than the engine's bounds (a 1..2²⁰ slider is unusable).
SLIDER_MAX = {"block_length": 64, "tau_span": 64, "max_new_tokens": 256, "max_post_steps": 16}
# Settings the dashboard decides itself: the baseline rule sets the method of the
# baseline run and S2D2's diffusion rule, so they never disagree.
DASHBOARD_OWNED = {"method", "s2d2_rule"}
BASELINE_RULE = ("baseline_method", "dynamic")
BASELINE_SETTING = Setting(
    name=BASELINE_RULE[0],
    section=None,
    kind=str,
    optional=False,
    default=BASELINE_RULE[1],
    label="Baseline rule (also S2D2's rule when it skips verification)",
    help="dynamic: every draft with confidence > τ; static: B / steps per step; "
    "entropy_bounded: the least uncertain drafts within an entropy budget",
    choices=COMMIT_RULES,
    minimum=None,
    maximum=None,
    step=None,
    group="decoding",
)
# Which config sections each run reads (``None`` = DecodeConfig's own fields);
# AR ignores block settings by construction, the baseline never verifies.
RUN_SECTIONS = {"AR": (None, "sampling"), "Baseline": (None, "sampling"), "S2D2": (None, "verify", "sampling")}
PRESET_KEEPS = {"sampling"}  # a preset never changes the sampling group (temperature, seed, budget)


def panel_settings() -> list[Setting]:
    """The settings the panel shows, in declaration order."""
    return [s for s in SETTINGS if s.name not in DASHBOARD_OWNED]


def defaults() -> dict:
    """Every panel value at the dashboard's defaults, plus the baseline rule."""
    values = {s.name: DASHBOARD_DEFAULTS.get(s.name, s.default) for s in panel_settings()}
    return {BASELINE_RULE[0]: BASELINE_RULE[1], **values}


def model_ids() -> list[str]:
    """The public model names: the bundled models' ids and the catalog's hub ids (never a server path)."""
    return [*BUNDLED_MODELS] + [m.hub_id for m in MODEL_CATALOG]


def model_source(model_id: str | None) -> str:
    """Where a public model id loads from; anything else is refused in one line."""
    model_id = (model_id or BUNDLED).strip()
    if model_id in BUNDLED_MODELS:
        return BUNDLED_MODELS[model_id]
    if model_id in model_ids():
        return model_id
    raise ValueError(f"unknown model {model_id!r}; choose one of {', '.join(model_ids())}")


def preset_values(name: str | None) -> dict:
    """The panel values a preset sets (all but the sampling group): nothing for ``custom``, the dashboard's
    defaults for ``defaults``."""
    if not name or name == "custom":
        return {}
    if name == "defaults":
        return defaults()
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of custom, defaults, {', '.join(PRESETS)}")
    config = config_from_settings(preset=name)
    sections = {None: config, "verify": config.verify, "sampling": config.sampling}
    values = {s.name: getattr(sections[s.section], s.name) for s in panel_settings() if s.group not in PRESET_KEEPS}
    return {BASELINE_RULE[0]: config.s2d2_rule, **values}


def resolve(preset: str | None = None, given: dict | None = None, preset_wins: bool = False) -> dict:
    """Dashboard defaults, then the preset and the settings ``given`` by name, read by the engine's reader.

    ``given`` wins over the preset (the API: a preset, then the settings one
    sends), unless ``preset_wins`` (the page: the picked preset sets the panel,
    and a Run clicked before the panel has refilled must decode the preset the
    page shows, not the panel's previous values).
    """
    declared = {BASELINE_SETTING.name: BASELINE_SETTING, **{s.name: s for s in panel_settings()}}
    read = read_settings(given or {}, declared=declared)
    layers = (read, preset_values(preset)) if preset_wins else (preset_values(preset), read)
    return {**defaults(), **layers[0], **layers[1]}


def build_configs(values: dict) -> dict[str, DecodeConfig]:
    """The three runs' configurations from resolved values; raises ``ValueError`` on impossible settings."""
    rule = values[BASELINE_RULE[0]]
    methods = {"AR": dict(method="ar"), "Baseline": dict(method=rule), "S2D2": dict(method="s2d2", s2d2_rule=rule)}
    configs = {}
    for name, sections in RUN_SECTIONS.items():
        flat = {s.name: values[s.name] for s in panel_settings() if s.section in sections and s.name in values}
        configs[name] = config_from_settings(**flat, **methods[name])
    return configs


def check_prompt(prompt: str) -> str:
    prompt = (prompt or "").strip()
    if not prompt:
        raise ValueError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt)} characters long; the limit is {MAX_PROMPT_CHARS}.")
    return prompt


class ModelCache:
    """Loads each model once and shares it read-only between sessions.

    Decoding state lives in per-run KV sessions, so sharing the weights is safe.
    """

    def __init__(self):
        self._models: dict[str, BlockDiffusionModel] = {}
        self._lock = threading.Lock()

    def get(self, model_id: str | None, announce: Callable[[str], None] | None = None) -> BlockDiffusionModel:
        """The loaded model of a public id; ``announce`` hears its size and memory estimate before a first load."""
        source = model_source(model_id)
        with self._lock:
            if source not in self._models:
                self._models[source] = load_model(source, announce=announce)
                if source in BUNDLED_MODELS.values() and self._models[source].device.type == "cpu":
                    # A bundled model's forwards are tiny: one thread is as fast, and on a shared
                    # 2-core machine far steadier (S2D2's wall speedup over AR on one example, 4 runs
                    # at load 5.8: 2.45–2.69 with one thread, 0.18–6.24 with two).
                    torch.set_num_threads(1)
            return self._models[source]


TIMED_ROUNDS = 3
ROUND_BUDGET_S = 2.0  # more rounds only when one is this quick (the bundled model), never for a slow hub model
TIMING_NOTE = (
    "How times were taken: every run is first decoded once untimed on the loaded model (a full warm-up "
    f"with its own settings); then the three runs are timed one after the other, and, when a round takes under "
    f"{ROUND_BUDGET_S:g} s, {TIMED_ROUNDS - 1} more rounds follow in rotated order and each run reports the "
    "round with its median time. Wall time covers the decode loop only, not loading, streaming or drawing."
)


def warm_up(
    model: BlockDiffusionModel,
    prompt: str,
    config: DecodeConfig,
    should_stop: Callable[[], bool] | None = None,
    watch: Callable[[str, Decoder | None], None] | None = None,
    name: str = "",
) -> Trace:
    """One full untimed decode with ``config``, so no timed run pays first-call costs.

    Full length, not a short one: every new KV length is a first call to some
    kernel, and a two-token AR warm-up left AR's first timed run 3.7× slower
    than its second on the bundled model (1.06 s against 0.29 s). Being
    untimed, it is also the decode the page streams: ``watch`` hears the
    decoder before it runs and after each block.
    """
    decoder = Decoder(model, config, should_stop, watch and (lambda done, total: watch(name, decoder)))
    if watch:
        watch(name, decoder)
    return decoder.run(model.chat_prompt(prompt), prompt)


@dataclass
class Progress:
    """A run in flight, as the stream shows it: the partial trace so far (``None`` once timing starts)."""

    name: str
    trace: Trace | None


def _median(traces: list[Trace]) -> Trace:
    return sorted(traces, key=lambda t: t.summary.wall_seconds)[len(traces) // 2]


def run_all(
    model: BlockDiffusionModel,
    prompt: str,
    configs: dict[str, DecodeConfig],
    should_stop: Callable[[], bool] | None = None,
    watch: Callable[[str, Decoder | None], None] | None = None,
) -> dict[str, Trace]:
    """Decode ``prompt`` with every configuration, same seed, timed fairly (see :data:`TIMING_NOTE`).

    Every configuration is warmed up first (``watch`` sees those decodes, then
    ``watch("", None)`` when timing starts); the timed rounds rotate the order,
    so no run always goes first, and do nothing but decode. Repeats of a run
    commit the same tokens (same seed), only their clocks differ.
    """
    for name, config in configs.items():
        warm_up(model, prompt, config, should_stop, watch, name)
    if watch:
        watch("", None)
    names = list(configs)
    timed: dict[str, list[Trace]] = {name: [] for name in names}
    for round_index in range(TIMED_ROUNDS):
        started = time.perf_counter()
        for name in names[round_index:] + names[:round_index]:
            timed[name].append(generate(model, prompt, configs[name], should_stop))
        if time.perf_counter() - started > ROUND_BUDGET_S:
            break
    return {name: _median(timed[name]) for name in names}


def stream_all(
    model: BlockDiffusionModel,
    prompt: str,
    configs: dict[str, DecodeConfig],
    should_stop: Callable[[], bool] | None = None,
    every: float = 0.3,
) -> Iterator[Progress | dict[str, Trace]]:
    """:func:`run_all` in a worker thread, yielding the warm-up decodes as they grow, at most every ``every`` s.

    The decode thread only signals after each block (a queue put) and only
    while warming up; drawing happens here, and the timed rounds run with no
    display work at all. ``Progress("", None)`` says the timing started; the
    finished ``{name: trace}`` comes last; an error in the worker is raised here.
    """
    events: queue.Queue = queue.Queue()
    result: dict = {}

    def watch(name: str, decoder: Decoder | None) -> None:
        events.put((name, decoder, time.perf_counter()))

    def work() -> None:
        try:
            result["traces"] = run_all(model, prompt, configs, should_stop, watch)
        except BaseException as err:  # handed to the consumer, which raises it
            result["error"] = err
        events.put(None)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    last, previous, started = 0.0, None, {}
    while (event := events.get()) is not None:
        name, decoder, now = event
        started.setdefault(name, now)
        if previous and previous[0] != name:  # a run just finished: show its last state, unthrottled
            yield Progress(
                previous[0], previous[1].recorder.snapshot(model, previous[1].config, prompt, started[previous[0]])
            )
        previous = (name, decoder)
        if decoder is None:
            yield Progress("", None)  # every run is decoded; the timed rounds follow
        elif time.perf_counter() - last >= every:
            last = time.perf_counter()
            yield Progress(name, decoder.recorder.snapshot(model, decoder.config, prompt, started[name]))
    worker.join()
    if "error" in result:
        raise result["error"]
    yield result["traces"]
