"""Accuracy and cost of decoding methods on held-out task problems.

    python -m s2d2.study.evaluate --problems 500

Runs each method over the same held-out problems of every task family and
prints a table of accuracy, forwards (NFE) per problem, tokens per forward and
wall seconds. This is the bundled model's model-card table; ``s2d2.study.bench``
runs the bigger grid on top of the same functions.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass, field

from ..batch import generate_batch
from ..config import DecodeConfig, VerifyConfig, preset_config
from ..decode import generate
from ..likelihood import ar_logprobs
from ..models import DEFAULT_MODEL, BlockDiffusionModel, load_model
from ..trace import Trace
from .progress import progress_bar
from .tasks import Problem, families


@dataclass
class ProblemResult:
    """One method on one problem."""

    method: str
    family: str
    index: int
    correct: bool
    tokens: int
    nfe: int
    wall_seconds: float
    verifications: int
    verifications_skipped: int
    drafts_verified: int
    drafts_accepted: int
    rejections: int
    output: str
    tokens_fed: int = 0  # tokens the forwards processed (the per-token part of their cost)
    lookaheads_used: int = 0
    lookaheads_discarded: int = 0
    ar_energy: float | None = None  # mean −log q per output token under the model's own AR mode


def ar_energy(model: BlockDiffusionModel, trace: Trace) -> float | None:
    """The AR energy of a run's output: its mean negative log-likelihood per token at block size 1.

    The paper's Figure 2 view: how far a decoding trajectory sits from what the
    verifier (the model run autoregressively) would write. Scored outside the
    timed decode, by one verifier forward; ``None`` for an empty output.
    """
    if not trace.output_ids:
        return None
    return -ar_logprobs(model, trace.prompt_ids, trace.output_ids).logprob / len(trace.output_ids)


def run_problem(
    model: BlockDiffusionModel,
    name: str,
    config: DecodeConfig,
    problem: Problem,
    index: int,
    repeats: int = 1,
    energy: bool = False,
) -> ProblemResult:
    """Decode one problem (seed = its index, so runs are reproducible) and score it.

    With ``repeats > 1`` the decode is repeated and the median wall time kept;
    the output of a fixed seed does not change between repeats. ``energy``
    also scores the output's AR energy (one more forward, not timed). The
    inspector's top-k is not recorded (``trace_top_k`` = 0): outputs are the
    same, and what recording costs stays out of the wall times.
    """
    config = bench_config(config).replace(seed=index)
    traces = [generate(model, problem.prompt, config) for _ in range(repeats)]
    wall = statistics.median(t.summary.wall_seconds for t in traces)
    return scored(model, name, problem, index, traces[0], wall, energy)


def run_batch(
    model: BlockDiffusionModel,
    name: str,
    config: DecodeConfig,
    problems: list[tuple[int, Problem]],
    batch_size: int,
    repeats: int = 1,
    energy: bool = False,
) -> list[ProblemResult]:
    """Decode ``(index, problem)`` pairs many per forward (:func:`s2d2.batch.generate_batch`), each with
    the seed of its index, and score them: the same outputs as :func:`run_problem` one at a time.

    A row's own wall time is its time in a shared batch, so each problem is
    charged the batch's wall time over its problems (the median over
    ``repeats`` batches): what a problem costs when decoded this way.
    """
    config = bench_config(config)
    prompts, seeds = [p.prompt for _, p in problems], [i for i, _ in problems]
    batches = [generate_batch(model, prompts, config, seeds=seeds, batch_size=batch_size) for _ in range(repeats)]
    wall = statistics.median(b.wall_seconds for b in batches) / len(problems)
    return [scored(model, name, p, i, trace, wall, energy) for (i, p), trace in zip(problems, batches[0])]


def bench_config(config: DecodeConfig) -> DecodeConfig:
    """Nobody reads a benchmark run's per-position top-k, and recording it would be timed with the decode."""
    return config.replace(trace_top_k=0)


def scored(
    model: BlockDiffusionModel, name: str, problem: Problem, index: int, trace: Trace, wall: float, energy: bool
) -> ProblemResult:
    """One decoded problem's row: correctness by the family's exact scorer, cost, verifier counts."""
    s = trace.summary
    return ProblemResult(
        method=name,
        family=problem.family,
        index=index,
        correct=families()[problem.family].score(problem, trace.text),
        tokens=s.generated_tokens,
        nfe=s.nfe,
        wall_seconds=wall,
        verifications=s.verifications,
        verifications_skipped=s.verifications_skipped,
        drafts_verified=s.drafts_verified,
        drafts_accepted=s.drafts_accepted,
        rejections=s.rejections,
        output=trace.text,
        tokens_fed=sum(s.tokens_by_kind.values()),
        lookaheads_used=s.lookaheads_used,
        lookaheads_discarded=s.lookaheads_discarded,
        ar_energy=ar_energy(model, trace) if energy else None,
    )


@dataclass
class MethodSummary:
    """Aggregates of one method over all problems."""

    method: str
    problems: int
    accuracy: float
    accuracy_by_family: dict
    nfe_per_problem: float
    tokens_per_forward: float
    wall_per_problem: float
    tokens_per_second: float
    acceptance_rate: float | None
    mean_accepted_length: float | None
    verify_rate: float | None
    tokens_fed_per_forward: float = 0.0
    lookaheads_used_per_problem: float = 0.0
    lookaheads_discarded_per_problem: float = 0.0
    nfe_by_family: dict = field(default_factory=dict)
    wall_by_family: dict = field(default_factory=dict)
    ar_energy: float | None = None  # mean over problems of the output's AR energy per token
    ar_energy_by_family: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_method(name: str, results: list[ProblemResult]) -> MethodSummary:
    n = len(results)
    by_family: dict[str, list[ProblemResult]] = {}
    for r in results:
        by_family.setdefault(r.family, []).append(r)
    tokens, nfe, wall = (sum(getattr(r, k) for r in results) for k in ("tokens", "nfe", "wall_seconds"))
    verified = sum(r.drafts_verified for r in results)
    accepted = sum(r.drafts_accepted for r in results)
    verifications = sum(r.verifications for r in results)
    routed = verifications + sum(r.verifications_skipped for r in results)
    return MethodSummary(
        method=name,
        problems=n,
        accuracy=sum(r.correct for r in results) / n,
        accuracy_by_family={f: sum(r.correct for r in v) / len(v) for f, v in sorted(by_family.items())},
        nfe_per_problem=nfe / n,
        tokens_per_forward=tokens / nfe if nfe else 0.0,
        wall_per_problem=wall / n,
        tokens_per_second=tokens / wall if wall else 0.0,
        acceptance_rate=accepted / verified if verified else None,
        mean_accepted_length=accepted / verifications if verifications else None,
        verify_rate=verifications / routed if routed else None,
        tokens_fed_per_forward=sum(r.tokens_fed for r in results) / nfe if nfe else 0.0,
        lookaheads_used_per_problem=sum(r.lookaheads_used for r in results) / n,
        lookaheads_discarded_per_problem=sum(r.lookaheads_discarded for r in results) / n,
        nfe_by_family={f: sum(r.nfe for r in v) / len(v) for f, v in sorted(by_family.items())},
        wall_by_family={f: sum(r.wall_seconds for r in v) / len(v) for f, v in sorted(by_family.items())},
        ar_energy=mean_energy(results),
        ar_energy_by_family={f: mean_energy(v) for f, v in sorted(by_family.items())},
    )


def mean_energy(results: list[ProblemResult]) -> float | None:
    """Mean AR energy per token over the results that were scored for it."""
    energies = [r.ar_energy for r in results if r.ar_energy is not None]
    return sum(energies) / len(energies) if energies else None


def model_card_methods(max_new_tokens: int = 160) -> dict[str, DecodeConfig]:
    """The model card's methods: AR, two static, a dynamic τ sweep and the S2D2 presets."""
    common = dict(max_new_tokens=max_new_tokens)
    methods = {
        "AR": DecodeConfig(method="ar", **common),
        "static B=4 (4 steps)": DecodeConfig(method="static", block_length=4, steps=4, **common),
        "static B=16 (16 steps)": DecodeConfig(method="static", block_length=16, steps=16, **common),
    }
    for tau in (0.5, 0.7, 0.9):
        methods[f"dynamic B=16 τ={tau}"] = DecodeConfig(method="dynamic", block_length=16, threshold=tau, **common)
    for name in ("sdar-a", "sdar-b", "hysteresis", "min-span"):
        methods[f"S2D2 {name}"] = preset_config(name, **common)
    methods["S2D2 ucb B=16"] = DecodeConfig(
        method="s2d2", block_length=16, threshold=0.9, verify=VerifyConfig(policy="ucb"), **common
    )
    return methods


def heldout_problems(n: int, family_names: list[str] | None = None, seed: int = 2026) -> list[Problem]:
    """``n`` held-out problems per family, fixed for a seed."""
    table = families()
    names = family_names or list(table)
    return [p for name in names for p in table[name].problems("heldout", n, seed)]


def batch_size(text: str) -> int:
    """``--batch-size``: problems decoded per forward, at least 1."""
    size = int(text)
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {size}")
    return size


def add_batch_size_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size",
        type=batch_size,
        default=1,
        help="problems decoded per forward (s2d2.generate_batch), each charged the batch's wall time over its "
        "problems; 1: one at a time",
    )


def warm_up(model: BlockDiffusionModel, config: DecodeConfig, problem: Problem) -> None:
    """One untimed decode so lazy initialisation never lands in a measurement."""
    generate(model, problem.prompt, config)


def evaluate(
    model: BlockDiffusionModel,
    methods: dict[str, DecodeConfig],
    problems: list[Problem],
    progress=None,
    batch_size: int = 1,
) -> dict[str, list[ProblemResult]]:
    """Every method on every problem; ``batch_size`` > 1 decodes that many problems per forward."""
    results = {}
    for name, config in methods.items():
        warm_up(model, config, problems[0])
        if batch_size > 1:
            results[name] = run_batch(model, name, config, list(enumerate(problems)), batch_size)
            if progress:
                progress(name, len(problems), len(problems))
            continue
        results[name] = []
        for index, problem in enumerate(problems):
            results[name].append(run_problem(model, name, config, problem, index))
            if progress:
                progress(name, index + 1, len(problems))
    return results


def markdown_table(summaries: list[MethodSummary], families_shown: list[str]) -> str:
    head = (
        "| method | "
        + " | ".join(f"{f} acc." for f in families_shown)
        + " | NFE / problem | tokens / forward | wall s / problem | acceptance |"
    )
    rule = "|---|" + "---:|" * (len(families_shown) + 4)
    rows = [head, rule]
    for s in summaries:
        acc = " | ".join(f"{100 * s.accuracy_by_family.get(f, 0):.1f}%" for f in families_shown)
        rate = "—" if s.acceptance_rate is None else f"{100 * s.acceptance_rate:.0f}%"
        rows.append(
            f"| {s.method} | {acc} | {s.nfe_per_problem:.1f} | {s.tokens_per_forward:.2f} | {s.wall_per_problem:.3f} | {rate} |"
        )
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m s2d2.study.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--problems", type=int, default=500, help="held-out problems per family")
    parser.add_argument("--families", default=",".join(families()))
    parser.add_argument("--methods", default="", help="comma-separated subset of the method names (default: all)")
    parser.add_argument("--device", default=None)
    add_batch_size_argument(parser)
    args = parser.parse_args(argv)
    model = load_model(args.model, device=args.device)
    names = args.families.split(",")
    problems = heldout_problems(args.problems, names)
    methods = model_card_methods()
    if args.methods:
        methods = {k: v for k, v in methods.items() if k in args.methods.split(",")}
    bar = progress_bar(len(methods) * len(problems), "evaluate")
    done = {}

    def advance(name: str, finished: int, total: int) -> None:
        bar.update(finished - done.get(name, 0))
        done[name] = finished

    results = evaluate(model, methods, problems, progress=advance, batch_size=args.batch_size)
    bar.close()
    print(markdown_table([summarize_method(name, r) for name, r in results.items()], names))


if __name__ == "__main__":
    main()
