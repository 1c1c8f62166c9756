"""The trajectory of one decoding run, as plain data with a JSON round-trip.

The same record feeds the dashboard, the benchmark and the tests, and a saved
trace replays without the model: everything a figure needs (token strings
included) is in here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass

from .policies import RouteRecord  # a policy's decision, recorded as it made it

SCHEMA_VERSION = 6
# Version 2 had no ``exactness``; it is derived from the stored config when such a trace is read.
# Version 3 had no decision detail (top-k of p, q and the residual, u, the rule's threshold): it reads as it is,
# keeping its version, so the inspector can say the detail was never recorded.
# Versions 2-4 had no ``forced`` (the what-if run's forced draft): nothing was forced in them.
# Versions 2-5 had no ``rewound`` (a run that switched settings at one step): none of them did.
READABLE_VERSIONS = (2, 3, 4, 5, 6)
DETAIL_VERSION = 4  # the first version whose traces record the decision at each position

FORWARD_KINDS = ("prefill", "draft", "verify", "commit")

# How a generated token got committed.
ACCEPTED = "accepted"  # drafted by diffusion, accepted by the AR verifier
RESAMPLED = "resampled"  # draft rejected by the verifier, replaced from the residual
THRESHOLD = "threshold"  # committed by the diffusion rule (confidence threshold or static count)
FALLBACK = "fallback"  # committed by the diffusion rule after a verification committed too few
CARRIED = "carried"  # a block's first token, from the row of the forward before it (Fast-dLLM v2)
KEPT = "kept"  # draft rejected by the verifier and committed as it is (no resampling)
RATIO = "ratio"  # draft after the first rejection whose acceptance ratio reached the ratio threshold
CONFIDENT = "confident"  # draft outside the verified span committed for its confidence (always_check_high_confidence)
OUTCOMES = (THRESHOLD, ACCEPTED, RESAMPLED, FALLBACK, CARRIED, KEPT, RATIO, CONFIDENT)


LOOKAHEAD_USED = "used"  # the verification accepted everything: its extra rows were the next draft (and commit)
LOOKAHEAD_DISCARDED = "discarded"  # something was rejected, or decoding stopped: the extra rows were thrown away


@dataclass
class ForwardRecord:
    """One model call: what it was for, how many tokens went in, how long it took.

    ``lookahead`` is set on a verification that carried a lookahead: ``used``
    or ``discarded``.
    """

    index: int
    kind: str
    tokens: int
    seconds: float
    block: int
    step: int
    lookahead: str | None = None


@dataclass
class PositionRecord:
    """One block position in one step: its draft and, if verified, the verifier's view.

    ``position`` counts generated tokens from 0. ``q``, ``ratio``, ``energy`` and
    ``residual_mass`` are set only where the verifier looked; ``outcome`` only
    where this step committed the position (``committed`` is then the token
    that went in, which differs from ``token`` after a rejection).

    The decision itself, recorded when ``trace_top_k`` > 0: ``p_top`` and
    ``q_top`` are the k most likely ``[token, probability]`` of the drafter and
    the verifier, ``residual_top`` those of the normalised ``(q − p)+`` at a
    rejected position (the distribution a replacement is drawn from), ``u`` the
    uniform draw of the stochastic test and ``accept_probability`` the
    ``min(1, (q/p)^γ)`` it was compared with.
    """

    position: int
    token: int
    p: float
    q: float | None = None
    ratio: float | None = None
    energy: float | None = None
    residual_mass: float | None = None
    outcome: str | None = None
    committed: int | None = None
    p_top: list | None = None
    q_top: list | None = None
    residual_top: list | None = None
    u: float | None = None
    accept_probability: float | None = None


@dataclass
class EditRecord:
    """A committed token rewritten by a later draft (editing, τ_edit)."""

    position: int
    old: int
    new: int
    confidence: float


@dataclass
class StepRecord:
    """One denoising step of one block.

    ``rule`` is the diffusion rule this step would commit with (a baseline's
    every commit, S2D2's skips and fallbacks): ``{"rule", "minimum"}`` plus the
    dynamic rule's confidence ``threshold`` or the entropy rule's ``budget``.
    """

    block: int
    step: int
    block_start: int
    forwards: list[int]
    positions: list[PositionRecord]
    route: RouteRecord | None = None
    accepted: int | None = None
    edits: list[EditRecord] = field(default_factory=list)
    rule: dict | None = None

    @property
    def committed(self) -> list[PositionRecord]:
        return [p for p in self.positions if p.outcome is not None]


@dataclass
class Summary:
    """Cost and acceptance statistics (docs/ALGORITHM.md, "Accounting")."""

    generated_tokens: int
    nfe: int
    nfe_by_kind: dict
    tokens_by_kind: dict
    tpf: float
    wall_seconds: float
    forward_seconds: float
    overhead_share: float
    committed_by_outcome: dict
    verifications: int
    verifications_skipped: int
    drafts_verified: int
    drafts_accepted: int
    rejections: int
    acceptance_rate: float | None
    mean_accepted_length: float | None
    edits: int = 0
    lookaheads_used: int = 0
    lookaheads_discarded: int = 0


@dataclass
class Trace:
    """Everything one run did, from prompt ids to summary."""

    method: str
    config: dict
    model: str
    prompt: str
    prompt_ids: list[int]
    output_ids: list[int]
    output_tokens: list[str]
    text: str
    stop_reason: str
    forwards: list[ForwardRecord]
    steps: list[StepRecord]
    summary: Summary
    token_text: dict = field(default_factory=dict)
    exactness: dict = field(default_factory=dict)  # DecodeConfig.exactness(): {"exact": bool, "reasons": [...]}
    forced: dict | None = None  # a what-if run's forced draft (s2d2.forcing): block, step, position, token, drafted
    rewound: dict | None = None  # a rewound run's switch (s2d2.rewind): block, step, changed {name: {before, after}}
    schema_version: int = SCHEMA_VERSION

    def text_of(self, token_id: int) -> str:
        """The text of any token id the run drafted or committed."""
        return self.token_text.get(str(token_id), f"<{token_id}>")

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        """The trace as JSON, the same text as ``json.dumps(self.to_dict())``: the records are written from
        their own fields, without the deep copy ``asdict`` makes of each (a server writing one trace per
        request pays for it in its scheduler)."""
        return json.dumps(self, default=_fields_of, indent=indent)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def from_dict(cls, data: dict) -> Trace:
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            readable = ", ".join(map(str, READABLE_VERSIONS))
            raise ValueError(f"trace schema version {version!r} is not supported (this build reads {readable})")
        if version == 2:
            data = {**data, "exactness": _exactness_of(data.get("config")), "schema_version": 3}
        if data["schema_version"] < 5:  # before what-if runs nothing was forced; the version stays
            data = {**data, "forced": None}
        if data["schema_version"] < 6:  # before rewinds no run switched settings; the version stays
            data = {**data, "rewound": None}
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise ValueError(f"not an S2D2 trace: missing {', '.join(missing)}")
        steps = [
            StepRecord(
                **{
                    **s,
                    "positions": [PositionRecord(**p) for p in s["positions"]],
                    "route": RouteRecord(**s["route"]) if s.get("route") else None,
                    "edits": [EditRecord(**e) for e in s.get("edits", [])],
                }
            )
            for s in data["steps"]
        ]
        return cls(
            **{
                **data,
                "forwards": [ForwardRecord(**f) for f in data["forwards"]],
                "steps": steps,
                "summary": Summary(**data["summary"]),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Trace:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise ValueError("not an S2D2 trace: expected a JSON object")
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str) -> Trace:
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read())


def _fields_of(record) -> dict:
    """A record's fields, for :func:`json.dumps` (anything else is not JSON, as ``asdict`` would say too)."""
    if is_dataclass(record) and not isinstance(record, type):
        return vars(record)
    raise TypeError(f"{type(record).__name__} is not JSON serializable")


def _exactness_of(config) -> dict:
    """The exactness of a stored config (an older trace did not record it)."""
    from .config import DecodeConfig  # this data module sits below the config; only old traces need it

    if not isinstance(config, dict):
        return {}
    return DecodeConfig.from_dict(config).exactness().to_dict()


def summarize(forwards: list[ForwardRecord], steps: list[StepRecord], generated: int, wall_seconds: float) -> Summary:
    """Derive the summary from the records, so it can never disagree with them."""
    nfe_by_kind = {k: 0 for k in FORWARD_KINDS}
    tokens_by_kind = {k: 0 for k in FORWARD_KINDS}
    for f in forwards:
        nfe_by_kind[f.kind] += 1
        tokens_by_kind[f.kind] += f.tokens
    by_outcome = {o: 0 for o in OUTCOMES}
    for s in steps:
        for p in s.committed:
            if p.position < generated:
                by_outcome[p.outcome] += 1
    routed = [s.route for s in steps if s.route is not None]
    verified_steps = [s for s in steps if s.accepted is not None]
    # Drafts past the end of the output (padding after a stop token) do not count.
    drafts_verified = sum(p.q is not None and p.position < generated for s in verified_steps for p in s.positions)
    drafts_accepted = sum(p.outcome == ACCEPTED and p.position < generated for s in verified_steps for p in s.positions)
    forward_seconds = sum(f.seconds for f in forwards)
    nfe = len(forwards)
    return Summary(
        generated_tokens=generated,
        nfe=nfe,
        nfe_by_kind=nfe_by_kind,
        tokens_by_kind=tokens_by_kind,
        tpf=generated / nfe if nfe else 0.0,
        wall_seconds=wall_seconds,
        forward_seconds=forward_seconds,
        overhead_share=max(0.0, 1.0 - forward_seconds / wall_seconds) if wall_seconds > 0 else 0.0,
        committed_by_outcome=by_outcome,
        verifications=len(verified_steps),
        verifications_skipped=sum(not r.verify for r in routed),
        drafts_verified=drafts_verified,
        drafts_accepted=drafts_accepted,
        rejections=sum(s.accepted < s.route.span_length for s in verified_steps),
        acceptance_rate=drafts_accepted / drafts_verified if drafts_verified else None,
        mean_accepted_length=drafts_accepted / len(verified_steps) if verified_steps else None,
        edits=sum(e.position < generated for s in steps for e in s.edits),
        lookaheads_used=sum(f.lookahead == LOOKAHEAD_USED for f in forwards),
        lookaheads_discarded=sum(f.lookahead == LOOKAHEAD_DISCARDED for f in forwards),
    )


_ORDER_MARKS = {
    THRESHOLD: "t",
    ACCEPTED: "a",
    RESAMPLED: "r",
    FALLBACK: "f",
    CARRIED: "c",
    KEPT: "k",
    RATIO: "x",
    CONFIDENT: "h",
}


def forward_stats(trace: Trace) -> str:
    """The decoding order, per block: which positions each step committed and how.

    Like the official ``--forward_stats`` printout, in words: one line per
    block, steps separated by ``|``, each commit as ``position+mark`` (marks
    below), and ``[v]`` before a step that ran the verifier. Positions count
    generated tokens from 0.
    """
    legend = ", ".join(f"{mark} {outcome}" for outcome, mark in _ORDER_MARKS.items())
    lines = [f"decoding order ({legend}; [v] = verified step)"]
    blocks: dict[int, list[str]] = {}
    for s in trace.steps:
        commits = " ".join(f"{p.position}{_ORDER_MARKS[p.outcome]}" for p in s.committed if p.position >= 0)
        edits = " ".join(f"{e.position}e" for e in s.edits)
        prefix = "[v] " if s.accepted is not None else ""
        blocks.setdefault(s.block, []).append(prefix + " ".join(filter(None, [commits, edits])) or "-")
    for block, steps in blocks.items():
        lines.append(f"block {block}: " + " | ".join(steps))
    per_kind = ", ".join(f"{k} {v}" for k, v in trace.summary.nfe_by_kind.items() if v)
    lines.append(f"forwards: {trace.summary.nfe} ({per_kind})")
    return "\n".join(lines)
