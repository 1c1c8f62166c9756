"""Validated decoding settings and the paper's configurations as named presets.

Settings are frozen dataclasses checked on construction, so an impossible
combination (block length 0, ``τ_on ≤ τ_off``, ...) fails with a clear
``ValueError`` before any forward runs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from .acceptance import ACCEPTANCE_MODES
from .policies import ESTIMATORS, POLICIES, SCORE_TYPES
from .sampling import SamplingConfig

METHODS = ("ar", "static", "dynamic", "s2d2")
COMMIT_RULES = ("static", "dynamic")


def _check_unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")


@dataclass(frozen=True)
class VerifyConfig:
    """S2D2's verifier: when to verify (policy), how to estimate acceptance, how to accept.

    Defaults follow the paper's configurations: ``soft_entropy_negexp`` with
    ``T = 1``, static score with ``c = 1`` and ``τ_score = 0``.
    """

    policy: str = "score"
    acceptance: str = "stochastic"
    estimator: str = "soft_entropy_negexp"
    entropy_temperature: float = 1.0
    margin: float = 0.05
    confidence_power: float = 0.8
    score: str = "static"
    c: float = 1.0
    tau_score: float = 0.0
    tau_on: float = 1.0
    tau_off: float = -5.0
    tau_span: int = 1
    ucb_beta: float = 1.0
    ucb_bins: tuple[int, int, int] = (2, 2, 2)

    def __post_init__(self) -> None:
        _check_choice("policy", self.policy, POLICIES)
        _check_choice("acceptance mode", self.acceptance, ACCEPTANCE_MODES)
        _check_choice("acceptance estimator", self.estimator, ESTIMATORS)
        _check_choice("score type", self.score, SCORE_TYPES)
        if self.tau_on <= self.tau_off:
            raise ValueError(f"hysteresis needs tau_on > tau_off, got tau_on={self.tau_on}, tau_off={self.tau_off}")
        if self.tau_span < 1:
            raise ValueError(f"tau_span (minimum span) must be >= 1, got {self.tau_span}")
        if self.entropy_temperature <= 0 or self.confidence_power <= 0:
            raise ValueError("estimator temperature and confidence power must be > 0")
        _check_unit("margin", self.margin)
        if self.ucb_beta < 0 or len(self.ucb_bins) != 3 or min(self.ucb_bins) < 1:
            raise ValueError("ucb_beta must be >= 0 and ucb_bins three counts >= 1")


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding method and everything it needs.

    Blocks of ``block_length`` tokens are the unit of the KV cache; inside a
    block, sub-blocks of ``sub_block_length`` (default: the whole block, as in
    SDAR; Fast-dLLM v2 decodes 32-token blocks in sub-blocks of 4 to 32) are
    decoded left to right, each draft forward still seeing the whole block.
    ``steps`` is the number of denoising steps per (sub-)block; the static
    schedule commits ``sub_block_length / steps`` tokens per step and is also
    the per-step minimum of the dynamic rule and of S2D2's fallback.
    ``edit_threshold`` (τ_edit, LLaDA2.x) lets a later draft rewrite an already
    committed answer token of the current block when it is that confident, and
    ``max_post_steps`` editing-only passes may follow once a block is full. ``s2d2_rule`` is the
    diffusion rule S2D2 uses when the router skips verification. AR is block
    size 1 with one step, whatever the block settings say.
    """

    method: str = "s2d2"
    block_length: int = 4
    sub_block_length: int | None = None
    steps: int | None = None
    threshold: float = 0.9
    s2d2_rule: str = "dynamic"
    max_new_tokens: int = 128
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    cache_ver: bool = False
    draft_ver: bool = False
    fuse_commit: bool = True
    edit_threshold: float | None = None
    max_post_steps: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        _check_choice("method", self.method, METHODS)
        _check_choice("S2D2 diffusion rule", self.s2d2_rule, COMMIT_RULES)
        if self.method == "ar":
            for name in ("block_length", "sub_block_length", "steps"):
                object.__setattr__(self, name, 1)
        if self.block_length < 1:
            raise ValueError(f"block length must be >= 1, got {self.block_length}")
        if self.sub_block_length is None:
            object.__setattr__(self, "sub_block_length", self.block_length)
        if self.sub_block_length < 1 or self.block_length % self.sub_block_length:
            raise ValueError(
                f"sub-block length must divide the block length ({self.block_length}), got {self.sub_block_length}"
            )
        if self.steps is None:
            object.__setattr__(self, "steps", self.sub_block_length)
        if not 1 <= self.steps <= self.sub_block_length:
            raise ValueError(
                f"steps must be between 1 and the (sub-)block length ({self.sub_block_length}), got {self.steps}"
            )
        _check_unit("threshold τ", self.threshold)
        if self.max_new_tokens < 1:
            raise ValueError(f"max new tokens must be >= 1, got {self.max_new_tokens}")
        if self.edit_threshold is not None:
            _check_unit("edit threshold τ_edit", self.edit_threshold)
        if self.max_post_steps < 0:
            raise ValueError(f"max post steps must be >= 0, got {self.max_post_steps}")

    @property
    def commit_rule(self) -> str:
        """The diffusion commit rule: what the baseline does, and S2D2 when it skips."""
        if self.method == "s2d2":
            return self.s2d2_rule
        return "dynamic" if self.method == "dynamic" else "static"

    def schedule(self) -> list[int]:
        """Tokens per step of the static schedule: ``B // S``, the remainder first."""
        base, extra = divmod(self.sub_block_length, self.steps)
        return [base + (i < extra) for i in range(self.steps)]

    def replace(self, **changes) -> DecodeConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain JSON data (tuples become lists), as stored in a trace."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: dict) -> DecodeConfig:
        data = dict(data)
        sampling = SamplingConfig(**data.pop("sampling", {}))
        verify = data.pop("verify", {})
        if "ucb_bins" in verify:
            verify = {**verify, "ucb_bins": tuple(verify["ucb_bins"])}
        return cls(sampling=sampling, verify=VerifyConfig(**verify), **data)


@dataclass(frozen=True)
class Preset:
    """A named configuration, with where it comes from."""

    name: str
    description: str
    settings: dict


# The paper's configurations (spec section 7), all with soft_entropy_negexp;
# "hysteresis" and "min-span" are the Fast-dLLM v2 routers at the bundled model's B=16.
PRESETS = {
    p.name: p
    for p in (
        Preset(
            "sdar-a",
            "Paper config A: B=4, 4 steps, dynamic τ=0.85; verify iff E[K] − 1 ≥ 0; AR-like caching.",
            dict(
                method="s2d2",
                block_length=4,
                steps=4,
                threshold=0.85,
                s2d2_rule="dynamic",
                cache_ver=True,
                draft_ver=True,
                verify=dict(policy="score", score="static", c=1.0, tau_score=0.0),
            ),
        ),
        Preset(
            "sdar-b",
            "Paper config B: B=16, 16 steps, dynamic τ=0.85; c=0, so it always verifies; AR-like caching.",
            dict(
                method="s2d2",
                block_length=16,
                steps=16,
                threshold=0.85,
                s2d2_rule="dynamic",
                cache_ver=True,
                draft_ver=True,
                verify=dict(policy="score", score="static", c=0.0, tau_score=0.0),
            ),
        ),
        Preset(
            "hysteresis",
            "Fast-dLLM v2 style router at B=16: hysteresis τ_on=1, τ_off=−5 on the dynamic score with c=1, τ=0.9.",
            dict(
                method="s2d2",
                block_length=16,
                steps=16,
                threshold=0.9,
                s2d2_rule="dynamic",
                verify=dict(policy="hysteresis", score="dynamic", c=1.0, tau_on=1.0, tau_off=-5.0),
            ),
        ),
        Preset(
            "min-span",
            "Minimum-span router: B=16, verify only spans of at least 8 masked positions (Fast-dLLM v2 config C).",
            dict(
                method="s2d2",
                block_length=16,
                steps=16,
                threshold=0.9,
                s2d2_rule="dynamic",
                verify=dict(policy="min_span", tau_span=8),
            ),
        ),
        Preset(
            "fastdllm-a",
            "Fast-dLLM v2 config A: block 32, sub-block 4, τ=0.9; hysteresis τ_on=1, τ_off=−5 on the dynamic score, c=1.",
            dict(
                method="s2d2",
                block_length=32,
                sub_block_length=4,
                steps=4,
                threshold=0.9,
                verify=dict(policy="hysteresis", score="dynamic", c=1.0, tau_on=1.0, tau_off=-5.0),
            ),
        ),
        Preset(
            "fastdllm-b",
            "Fast-dLLM v2 config B: as A with sub-block 16.",
            dict(
                method="s2d2",
                block_length=32,
                sub_block_length=16,
                steps=16,
                threshold=0.9,
                verify=dict(policy="hysteresis", score="dynamic", c=1.0, tau_on=1.0, tau_off=-5.0),
            ),
        ),
        Preset(
            "fastdllm-c",
            "Fast-dLLM v2 config C: block and sub-block 32, τ=0.9; verify spans of at least 8.",
            dict(method="s2d2", block_length=32, steps=32, threshold=0.9, verify=dict(policy="min_span", tau_span=8)),
        ),
        Preset(
            "llada2-conservative",
            "LLaDA2.1-mini conservative: block 32, τ_mask=0.95, τ_edit=0.9; τ_score=−5 on E[K] − 4.",
            dict(
                method="s2d2",
                block_length=32,
                steps=32,
                threshold=0.95,
                edit_threshold=0.9,
                verify=dict(policy="score", score="static", c=4.0, tau_score=-5.0),
            ),
        ),
        Preset(
            "llada2-quality",
            "LLaDA2.1-mini quality: block 32, τ_mask=0.7, τ_edit=0.5; τ_score=0 on E[K] − 4.",
            dict(
                method="s2d2",
                block_length=32,
                steps=32,
                threshold=0.7,
                edit_threshold=0.5,
                verify=dict(policy="score", score="static", c=4.0, tau_score=0.0),
            ),
        ),
    )
}


def preset_config(name: str, **overrides) -> DecodeConfig:
    """The :class:`DecodeConfig` of a preset, with ``overrides`` applied on top.

    ``verify`` and ``sampling`` overrides are merged field by field.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    settings = {k: dict(v) if isinstance(v, dict) else v for k, v in PRESETS[name].settings.items()}
    for key in ("verify", "sampling"):
        if key in overrides:
            settings[key] = {**settings.get(key, {}), **overrides.pop(key)}
    settings.update(overrides)
    return DecodeConfig.from_dict(settings)


def config_from_settings(preset: str | None = None, **settings) -> DecodeConfig:
    """A :class:`DecodeConfig` from flat setting names (``block_length=16, acceptance="greedy",
    temperature=0.7``): each name is a field of :class:`DecodeConfig`, :class:`VerifyConfig`
    or :class:`SamplingConfig`, applied on top of ``preset`` (or the defaults)."""
    sections = {"verify": VerifyConfig, "sampling": SamplingConfig}
    owner = {f.name: key for key, cls in sections.items() for f in dataclasses.fields(cls)}
    top = {f.name for f in dataclasses.fields(DecodeConfig)} - set(sections)
    grouped: dict = {"verify": {}, "sampling": {}}
    flat: dict = {}
    for name, value in settings.items():
        if name in owner:
            grouped[owner[name]][name] = value
        elif name in top:
            flat[name] = value
        else:
            raise ValueError(f"unknown setting {name!r}")
    if preset is not None:
        return preset_config(preset, **flat, **{k: v for k, v in grouped.items() if v})
    base = DecodeConfig().to_dict()
    base.update(flat)
    for key, values in grouped.items():
        base[key] = {**base[key], **values}
    return DecodeConfig.from_dict(base)
