"""Validated decoding settings and the paper's configurations as named presets.

Settings are frozen dataclasses checked on construction, so an impossible
combination (block length 0, ``τ_on ≤ τ_off``, ...) fails with a clear
``ValueError`` before any forward runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .acceptance import ACCEPTANCE_MODES
from .fields import Setting, check_declared, setting, settings_of
from .policies import ESTIMATORS, POLICIES, SCORE_TYPES, UCB_ENTROPY_SOURCES, always_verifies
from .rules import COMMIT_RULES
from .sampling import SamplingConfig

METHODS = ("ar", *COMMIT_RULES, "s2d2")
ACCOUNTINGS = ("fused", "official")


@dataclass(frozen=True)
class Exactness:
    """Whether a configuration's output is, by construction, the model's own autoregressive output.

    Exact means token for token when greedy and the same distribution when
    sampling (docs/ALGORITHM.md, "Exactness"). ``reasons`` names every setting
    that breaks it; a configuration is exact when there is none.
    """

    reasons: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        """One line for the CLI and the dashboard."""
        return "exact: output ≡ AR" if self.exact else "not exact: " + "; ".join(self.reasons)

    def to_dict(self) -> dict:
        return {"exact": self.exact, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class VerifyConfig:
    """S2D2's verifier: when to verify (policy), how to estimate acceptance, how to accept.

    Defaults follow the paper's configurations: ``soft_entropy_negexp`` with
    ``T = 1``, static score with ``c = 1`` and ``τ_score = 0``.
    """

    policy: str = setting(
        "score", "Routing policy", "when a verification is worth a forward", choices=POLICIES, group="verifier"
    )
    acceptance: str = setting(
        "stochastic",
        "Acceptance",
        "stochastic: accept with min(1, (q/p)^γ) as in the paper; greedy: accept iff the draft is the AR argmax (exact)",
        choices=ACCEPTANCE_MODES,
        group="verifier",
    )
    estimator: str = setting(
        "soft_entropy_negexp",
        "Acceptance estimator",
        "how the router guesses α_i, the chance a draft is accepted",
        choices=ESTIMATORS,
        group="verifier",
    )
    entropy_temperature: float = setting(
        1.0, "Entropy temperature T", "soft_entropy_negexp: α = exp(−T·H/log V)", minimum=1e-6, group="advanced"
    )
    margin: float = setting(
        0.05, "Margin m", "hard_margin: α = 1[top1 − top2 > m]", minimum=0.0, maximum=1.0, group="advanced"
    )
    margin_coef: float = setting(
        1.0,
        "Margin coefficient",
        "soft_clipped_linear_margin: α = clip(k·(top1 − top2))",
        minimum=0.0,
        group="advanced",
    )
    confidence_power: float = setting(
        0.8, "Confidence power k", "soft_confidence: α = p(x)^k", minimum=1e-6, group="advanced"
    )
    entropy_threshold: float = setting(
        0.1,
        "Entropy threshold",
        "hard_entropy_threshold: α = 1[H/log V < threshold]",
        minimum=0.0,
        maximum=1.0,
        group="advanced",
    )
    score: str = setting(
        "static", "Score", "static: s = E[K] − c; dynamic: s = E[K] − c·n_high", choices=SCORE_TYPES, group="verifier"
    )
    c: float = setting(1.0, "c (penalty)", "the score's penalty coefficient", group="verifier")
    tau_score: float = setting(0.0, "τ_score", "score policy: verify iff s ≥ τ_score", group="verifier")
    tau_on: float = setting(
        1.0, "τ_on", "hysteresis: OFF→ON when s > τ_on (strict, as in the official experiments)", group="verifier"
    )
    tau_off: float = setting(-5.0, "τ_off", "hysteresis: ON→OFF when s < τ_off", group="verifier")
    tau_span: int = setting(
        1,
        "τ_span (minimum span)",
        "min_span policy: verify iff the span has ≥ τ_span masks",
        minimum=1,
        maximum=1024,
        group="verifier",
    )
    ucb_beta: float = setting(1.0, "UCB β", "exploration bonus of the UCB router", minimum=0.0, group="advanced")
    ucb_bins: tuple[int, int, int] = setting(
        (2, 2, 2), "UCB bins", "bins for span length, block progress, entropy", group="advanced"
    )
    ucb_entropy_source: str = setting(
        "span",
        "UCB entropy source",
        "the UCB context's entropy: of the span, or of every masked position",
        choices=UCB_ENTROPY_SOURCES,
        group="advanced",
    )
    allow_resample: bool = setting(
        True,
        "Resample on rejection",
        "off: a rejected draft is not replaced by a (q − p)+ sample (the span's own draft is committed, or, "
        "for Fast-dLLM v2, the diffusion rule decides)",
        group="advanced",
    )
    ratio_tempering: float = setting(
        1.0,
        "Ratio tempering γ",
        "accept with min(1, (q/p)^γ); γ < 1 accepts more (no longer exact)",
        minimum=0.0,
        maximum=10.0,
        group="advanced",
    )
    ratio_threshold: float | None = setting(
        None,
        "Ratio threshold",
        "also commit drafts after the first rejection whose q/p ratio reaches this (empty = off)",
        minimum=0.0,
        group="advanced",
    )
    threshold_all_spans: bool = setting(
        False,
        "Ratio threshold on all spans",
        "apply the ratio threshold to every masked position of the block, not just the span",
        group="advanced",
    )
    always_check_high_confidence: bool = setting(
        False,
        "Commit confident drafts outside the span",
        "after verifying, also commit every remaining draft whose confidence exceeds τ",
        group="advanced",
    )

    def __post_init__(self) -> None:
        check_declared(self)
        if self.tau_on <= self.tau_off:
            raise ValueError(f"hysteresis needs tau_on > tau_off, got tau_on={self.tau_on}, tau_off={self.tau_off}")
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

    ``accounting`` says how finished blocks are stored: ``fused`` (the default)
    rides the commit on the next forward, so AR costs one forward per token;
    ``official`` spends forwards and checks stop tokens exactly as each family's
    official code does (docs/ALGORITHM.md).
    """

    method: str = setting("s2d2", "Method", "ar, a diffusion baseline, or S2D2", choices=METHODS, group="method")
    block_length: int = setting(
        4, "Block length B", "tokens per block (the unit of the KV cache)", minimum=1, maximum=1024, step=1
    )
    sub_block_length: int | None = setting(
        None,
        "Sub-block length",
        "decode blocks in sub-blocks of this size (Fast-dLLM v2); empty = the whole block",
        minimum=1,
        maximum=1024,
        step=1,
    )
    steps: int | None = setting(
        None,
        "Steps per (sub-)block",
        "denoising steps; the static rule commits B / steps tokens per step (empty = B)",
        minimum=1,
        maximum=1024,
        step=1,
    )
    threshold: float = setting(
        0.9,
        "Confidence threshold τ",
        "dynamic rule: commit every draft with confidence > τ",
        minimum=0.0,
        maximum=1.0,
        step=0.05,
    )
    eb_threshold: float = setting(
        0.35,
        "Entropy budget",
        "entropy_bounded rule: commit the least uncertain drafts while their summed entropy stays within this budget",
        minimum=0.0,
        step=0.05,
    )
    s2d2_rule: str = setting(
        "dynamic",
        "S2D2 diffusion rule",
        "what S2D2 commits when it skips verification",
        choices=COMMIT_RULES,
        group="method",
    )
    max_new_tokens: int = setting(
        128, "Max new tokens", "generation budget", minimum=1, maximum=1 << 20, step=8, group="sampling"
    )
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    cache_ver: bool = setting(
        False, "cache_ver (causal KV)", "store committed blocks with a causal mask (AR-like)", group="verifier"
    )
    draft_ver: bool = setting(
        False, "draft_ver", "committed rows of the current block attend causally while drafting", group="verifier"
    )
    lookahead: bool = setting(
        False,
        "Lookahead",
        "a verification that may finish the block also carries its commit and the next block's first draft: "
        "used when everything is accepted, discarded otherwise (same outputs, fewer forwards; off under official "
        "accounting)",
        group="verifier",
    )
    lookahead_threshold: float = setting(
        0.0,
        "Lookahead threshold",
        "carry a lookahead only when the router's estimate that the whole span is accepted (Π α_i) reaches this: "
        "where a token costs much (a CPU) a discarded lookahead wastes B tokens; 0 = always",
        minimum=0.0,
        maximum=1.0,
        step=0.05,
        group="advanced",
    )
    accounting: str = setting(
        "fused",
        "Forward accounting",
        "fused: commits ride on the next forward; official: the official code's forwards and stops",
        choices=ACCOUNTINGS,
        group="advanced",
    )
    use_block_cache: bool = setting(
        True,
        "Block cache (Fast-dLLM v2, official)",
        "under official accounting, Fast-dLLM v2 drafts each sub-block against KV of its block cached at the "
        "block's first draft, as its official script does (use_block_cache); no effect elsewhere",
        group="advanced",
    )
    edit_threshold: float | None = setting(
        None,
        "Edit threshold τ_edit",
        "LLaDA2.x: rewrite a committed token when a later draft is this confident (empty = no editing)",
        minimum=0.0,
        maximum=1.0,
    )
    max_post_steps: int = setting(
        0, "Post-edit steps", "editing-only passes after a block is full", minimum=0, maximum=1024, group="advanced"
    )
    seed: int = setting(
        0, "Seed", "random seed (sampling and stochastic acceptance)", minimum=0, maximum=2**63 - 1, group="sampling"
    )
    trace_top_k: int = setting(
        5,
        "Trace top-k",
        "record the k most likely tokens of p, q and the residual at every drafted position, with u and the "
        "acceptance probability: what the dashboard's inspector and --inspect show (0 = off)",
        minimum=0,
        maximum=100,
        group="advanced",
    )

    def __post_init__(self) -> None:
        check_declared(self)
        if self.method == "ar":
            for name in ("block_length", "sub_block_length", "steps"):
                object.__setattr__(self, name, 1)
        if self.sub_block_length is None:
            object.__setattr__(self, "sub_block_length", self.block_length)
        if self.block_length % self.sub_block_length:
            raise ValueError(
                f"sub-block length must divide the block length ({self.block_length}), got {self.sub_block_length}"
            )
        if self.accounting == "official":
            # The official codes spend the forwards a lookahead saves; like AR's block settings, it is normalised.
            object.__setattr__(self, "lookahead", False)
        if self.lookahead and self.edit_threshold is not None:
            raise ValueError(
                "lookahead cannot carry the draft rows of committed tokens that editing reads; "
                "turn off lookahead or edit_threshold"
            )
        if self.steps is None:
            object.__setattr__(self, "steps", self.sub_block_length)
        if not 1 <= self.steps <= self.sub_block_length:
            raise ValueError(
                f"steps must be between 1 and the (sub-)block length ({self.sub_block_length}), got {self.steps}"
            )

    @property
    def verifies(self) -> bool:
        """Whether S2D2's verifier runs (the baselines and AR commit without one)."""
        return self.method == "s2d2"

    @property
    def commit_rule(self) -> str:
        """The diffusion commit rule: what the baseline does, and S2D2 when it skips."""
        if self.method == "s2d2":
            return self.s2d2_rule
        return self.method if self.method in COMMIT_RULES else "static"

    def schedule(self) -> list[int]:
        """Tokens per step of the static schedule: ``B // S``, the remainder first."""
        base, extra = divmod(self.sub_block_length, self.steps)
        return [base + (i < extra) for i in range(self.steps)]

    def exactness(self) -> Exactness:
        """Every reason this configuration's output may differ from the model's own AR output.

        AR is exact by definition. Block size 1 runs every method at block size 1,
        so only editing, which rewrites committed tokens, can break it there.
        """
        v, reasons = self.verify, []
        if self.edit_threshold is not None:
            reasons.append("editing (τ_edit) rewrites committed tokens")
        if self.method == "ar" or self.block_length == 1:
            return Exactness(tuple(reasons))
        if self.method != "s2d2":
            return Exactness((f"the {self.method} baseline commits drafts without verifying them", *reasons))
        if not self.cache_ver:
            reasons.append("cache_ver off: committed blocks are cached with in-block bidirectional attention")
        if not always_verifies(v):
            reasons.append(f"the {v.policy} router may skip verification (skipped steps commit unverified drafts)")
        most = max(self.schedule())
        if most > 1:
            reasons.append(f"fallback commits: {self.steps} steps for {self.sub_block_length} positions commit "
                           f"up to {most} per step, beyond what a verification accepts")  # fmt: skip
        if v.ratio_threshold is not None:
            reasons.append("a ratio threshold commits drafts after the first rejection")
        if v.always_check_high_confidence:
            reasons.append("threshold commits outside the verified span (always_check_high_confidence)")
        if not v.allow_resample:
            reasons.append("allow_resample off: a rejected draft is not replaced by the verifier's correction")
        if v.ratio_tempering != 1.0:
            reasons.append(f"ratio tempering γ = {v.ratio_tempering:g} ≠ 1 changes the acceptance probability")
        if v.acceptance == "greedy" and not self.sampling.greedy:
            reasons.append("greedy acceptance of drafts sampled at temperature "
                           f"{self.sampling.temperature:g}: the verifier commits its argmax, not a sample")  # fmt: skip
        if v.acceptance == "stochastic" and self.sampling.greedy:
            reasons.append("stochastic acceptance of greedy drafts: drafts at temperature 0, "
                           "verifier sampled at temperature 1")  # fmt: skip
        return Exactness(tuple(reasons))

    def replace(self, **changes) -> DecodeConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain JSON data (tuples become lists), as stored in a trace."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: dict) -> DecodeConfig:
        """The config of :meth:`to_dict`'s data (a trace's, a results file's), read by :func:`read_settings`."""
        return config_of(read_settings(flat_settings(data)))


@dataclass(frozen=True)
class Preset:
    """A named configuration, with where it comes from."""

    name: str
    description: str
    settings: dict


# The paper's configurations (docs/ALGORITHM.md), all with soft_entropy_negexp;
# "hysteresis" and "min-span" are the Fast-dLLM v2 routers at the bundled model's B=16; "exact" is this project's
# exact configuration (DecodeConfig.exactness) at the same B.
# Lookahead is on where it is exact (no editing) and the blocks are whole (Fast-dLLM's sub-blocks need draft_ver).
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
                lookahead=True,
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
                lookahead=True,
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
                lookahead=True,
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
                lookahead=True,
                verify=dict(policy="min_span", tau_span=8),
            ),
        ),
        Preset(
            "exact",
            "Exact S2D2: B=16, always verify, greedy acceptance, causal cache (cache_ver, draft_ver), lookahead; "
            "the output is the model's own greedy AR output.",
            dict(
                method="s2d2",
                block_length=16,
                steps=16,
                cache_ver=True,
                draft_ver=True,
                lookahead=True,
                verify=dict(policy="always", acceptance="greedy"),
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


# -- settings by name: the one reader ------------------------------------------------------------------

SECTIONS = {"verify": VerifyConfig, "sampling": SamplingConfig}  # DecodeConfig's nested sections, by field name
SETTINGS: tuple[Setting, ...] = tuple(
    settings_of(DecodeConfig, None) + [s for name, cls in SECTIONS.items() for s in settings_of(cls, name)]
)
BY_NAME = {s.name: s for s in SETTINGS}


def read_settings(
    given: Mapping[str, object],
    what: str = "setting",
    declared: Mapping[str, Setting] = BY_NAME,
    others: Iterable[str] = (),
) -> dict:
    """The one reader of settings by name: ``{name: value}`` to checked, typed values.

    Whoever sends them (the CLI, lm-eval's ``model_args``, the dashboard's
    panel, its API, a YAML file), an unknown name is one error naming ``what``
    was given and the known names (``others``: names the caller takes itself),
    and every value is read by its declaration (:meth:`~s2d2.fields.Setting.coerce`:
    text parsed, typed values checked). ``declared`` defaults to every decoding
    setting; the dashboard passes its own panel.
    """
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join([*others, *declared])
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))}; known settings: {known}")
    return {name: declared[name].coerce(value) for name, value in given.items()}


def flat_settings(nested: Mapping[str, object]) -> dict:
    """Settings by flat name from a nested mapping (``verify`` and ``sampling`` as sections, as presets and
    :meth:`DecodeConfig.to_dict` write them)."""
    flat: dict = {}
    for key, value in nested.items():
        flat.update(value if key in SECTIONS else {key: value})
    return flat


def config_of(values: Mapping[str, object]) -> DecodeConfig:
    """The :class:`DecodeConfig` of read settings; a setting not given keeps its declared default (derived
    fields such as the sub-block length and the steps stay unset, so they follow the block length)."""
    sections: dict[str | None, dict] = {None: {}, **{name: {} for name in SECTIONS}}
    for name, value in values.items():
        sections[BY_NAME[name].section][name] = value
    nested = {name: cls(**sections[name]) for name, cls in SECTIONS.items()}
    return DecodeConfig(**nested, **sections[None])


def preset_settings(name: str) -> dict:
    """The settings a preset declares, by flat name."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return flat_settings(PRESETS[name].settings)


def config_from_settings(preset: str | None = None, **settings) -> DecodeConfig:
    """A :class:`DecodeConfig` from flat setting names (``block_length=16, acceptance="greedy",
    temperature=0.7``), read by :func:`read_settings` and applied on top of ``preset`` (or the defaults):
    where presets meet given settings."""
    values = read_settings(settings)
    if preset is not None:
        values = {**preset_settings(preset), **values}
    return config_of(values)


def preset_config(name: str, **overrides) -> DecodeConfig:
    """The :class:`DecodeConfig` of a preset, with ``overrides`` applied on top.

    ``verify`` and ``sampling`` overrides are merged field by field.
    """
    return config_from_settings(name, **flat_settings(overrides))
