"""From dashboard settings to three decodes: AR (the reference), the baseline and S2D2.

The baseline and S2D2 share the block layout and the diffusion rule, so S2D2
is exactly "the baseline plus a verifier": any difference between the two is
what verification did.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from s2d2.config import DecodeConfig, VerifyConfig
from s2d2.decode import generate
from s2d2.models import DEFAULT_MODEL, BlockDiffusionModel, load_model
from s2d2.sampling import SamplingConfig
from s2d2.trace import Trace

RUN_NAMES = ("AR", "Baseline", "S2D2")
MAX_PROMPT_CHARS = 4000


@dataclass(frozen=True)
class Settings:
    """Everything the settings panel holds, as plain values."""

    baseline_method: str = "dynamic"
    block_length: int = 16
    sub_block_length: int = 0
    steps: int = 16
    threshold: float = 0.5
    edit_threshold: float | None = None
    policy: str = "score"
    score: str = "static"
    c: float = 0.0
    tau_score: float = 0.0
    tau_on: float = 1.0
    tau_off: float = -5.0
    tau_span: int = 1
    estimator: str = "soft_entropy_negexp"
    acceptance: str = "greedy"
    cache_ver: bool = True
    draft_ver: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 64


def build_configs(s: Settings) -> dict[str, DecodeConfig]:
    """The three runs' configurations; raises ``ValueError`` on impossible settings."""
    sampling = SamplingConfig(temperature=float(s.temperature), top_p=float(s.top_p))
    shared = dict(sampling=sampling, seed=int(s.seed), max_new_tokens=int(s.max_new_tokens))
    layout = dict(
        block_length=int(s.block_length),
        sub_block_length=int(s.sub_block_length) or None,
        steps=int(s.steps),
        threshold=float(s.threshold),
        edit_threshold=None if s.edit_threshold in (None, "") else float(s.edit_threshold),
    )
    verify = VerifyConfig(
        policy=s.policy,
        score=s.score,
        c=float(s.c),
        tau_score=float(s.tau_score),
        tau_on=float(s.tau_on),
        tau_off=float(s.tau_off),
        tau_span=int(s.tau_span),
        estimator=s.estimator,
        acceptance=s.acceptance,
    )
    return {
        "AR": DecodeConfig(method="ar", **shared),
        "Baseline": DecodeConfig(method=s.baseline_method, **layout, **shared),
        "S2D2": DecodeConfig(
            method="s2d2",
            s2d2_rule=s.baseline_method,
            verify=verify,
            cache_ver=bool(s.cache_ver),
            draft_ver=bool(s.draft_ver),
            **layout,
            **shared,
        ),
    }


def check_prompt(prompt: str) -> str:
    prompt = (prompt or "").strip()
    if not prompt:
        raise ValueError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt)} characters long; the limit is {MAX_PROMPT_CHARS}.")
    return prompt


class ModelCache:
    """Loads each model once, warms it up, and shares it read-only between sessions.

    Decoding state lives in per-run KV sessions, so sharing the weights is safe.
    """

    def __init__(self):
        self._models: dict[str, BlockDiffusionModel] = {}
        self._lock = threading.Lock()

    def get(self, source: str, announce: Callable[[str], None] | None = None) -> BlockDiffusionModel:
        """The loaded model; ``announce`` hears its size and memory estimate before a first load."""
        source = source or DEFAULT_MODEL
        with self._lock:
            if source not in self._models:
                model = load_model(source, announce=announce)
                generate(model, "warm up", DecodeConfig(method="s2d2", block_length=4, max_new_tokens=8))
                self._models[source] = model
            return self._models[source]


def run_all(
    model: BlockDiffusionModel,
    prompt: str,
    configs: dict[str, DecodeConfig],
    should_stop: Callable[[], bool] | None = None,
    on_run: Callable[[str, int, int], None] | None = None,
) -> dict[str, Trace]:
    """Decode ``prompt`` with every configuration, same seed, one after the other."""
    traces = {}
    for name, config in configs.items():

        def progress(done: int, total: int, name=name) -> None:
            if on_run:
                on_run(name, done, total)

        traces[name] = generate(model, prompt, config, should_stop=should_stop, on_progress=progress)
    return traces
