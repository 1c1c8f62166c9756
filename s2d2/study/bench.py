"""The paper's accuracy–speed study: methods × settings × task sets.

    python -m s2d2.study.bench --problems 500 --out results/bundled
    accelerate launch --multi_gpu --num_processes 2 -m s2d2.study.bench --problems 500 --tune --out results/bundled

Every method decodes the same held-out problems (seed = problem index). Per
method it reports accuracy (exact match), forwards per problem, tokens per
forward, wall seconds (after a warm-up, ``--repeats`` for the median), the
speedup against AR and against the best dynamic-threshold baseline at matched
accuracy, acceptance statistics and router decisions. Outputs in ``--out``:

- ``runs.csv``: one row per (method, problem);
- ``summary.json``: one entry per method, plus the run's metadata;
- ``table.md``: a table shaped like the paper's Table 1 and the other sections of
  :mod:`s2d2.study.report` (which rebuilds it from the two files above);
- ``tuning.json`` (with ``--tune``): every router candidate on the development
  split and the one chosen per block size, which then joins the test grid.

The engine writes data only; ``python -m components.benchmarks DIR`` draws the
frontiers (accuracy against forwards and against wall time) from ``summary.json``.

Under ``accelerate launch`` each process takes every n-th problem (one GPU each,
or an equal share of the CPU cores: ``--multi_gpu`` also launches several CPU
processes on a machine without GPUs); the main process merges the shards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..config import DecodeConfig, config_from_settings, preset_config
from ..models import DEFAULT_MODEL, load_model
from .evaluate import (
    ProblemResult,
    add_batch_size_argument,
    heldout_problems,
    run_batch,
    run_problem,
    summarize_method,
    warm_up,
)
from .progress import progress_bar
from .report import report_markdown, table_markdown, write_runs
from .results import AGGRESSIVE_DYNAMIC, SCALING_BLOCKS, config_b_name, exact_name
from .tasks import families

DYNAMIC_TAUS = (0.5, 0.7, 0.9)


def scaling_grid(unit: str, layout, max_new_tokens: int) -> dict[str, DecodeConfig]:
    """Figure 3's sweep over the parallel unit (``B`` or ``sub-block``): a dynamic τ sweep, config B (stochastic
    acceptance, always verify, no lookahead, as the paper runs it) and exact S2D2 (greedy acceptance, always
    verify, lookahead: output identical to AR) at every size. ``layout(size)`` gives the block fields."""
    common = dict(max_new_tokens=max_new_tokens)
    grid = {}
    for size in SCALING_BLOCKS:
        for tau in DYNAMIC_TAUS:
            grid[f"dynamic {unit}={size} τ={tau}"] = DecodeConfig(
                method="dynamic", threshold=tau, **layout(size), **common
            )
    for size in SCALING_BLOCKS:
        config_b = preset_config("sdar-b", **layout(size), **common)
        grid[config_b_name(unit, size)] = config_b.replace(lookahead=False)
        grid[exact_name(unit, size)] = config_b.replace(
            lookahead=True, verify=dataclasses.replace(config_b.verify, acceptance="greedy")
        )
    return grid


def whole_blocks(size: int) -> dict:
    return dict(block_length=size, steps=size)


def fast_dllm_sub_blocks(size: int) -> dict:
    """Fast-dLLM v2 decodes 32-token blocks (its training block, ``bd_size``) in sub-blocks of ``size``."""
    return dict(block_length=32, sub_block_length=size, steps=size)


def paper_grid(max_new_tokens: int) -> dict[str, DecodeConfig]:
    """The paper's Table 1 and Figure 3 on an SDAR model.

    AR; static B ∈ {4, 16, 32}; Figure 3's sweep over B (:func:`scaling_grid`),
    and the aggressive dynamic τ = 0.3 at B = 16 for Figure 2; and at B = 16
    config A, the hysteresis router, and each S2D2 configuration with and
    without lookahead.
    """
    common = dict(max_new_tokens=max_new_tokens)
    grid = {"AR": DecodeConfig(method="ar", **common)}
    for B, steps in ((4, 4), (16, 16), (16, 8), (32, 16)):
        grid[f"static B={B} steps={steps}"] = DecodeConfig(method="static", block_length=B, steps=steps, **common)
    grid.update(scaling_grid("B", whole_blocks, max_new_tokens))
    grid[AGGRESSIVE_DYNAMIC] = DecodeConfig(method="dynamic", block_length=16, threshold=0.3, **common)
    layout = dict(block_length=16, steps=16, **common)
    grid["S2D2 B=16 always (c=0) + lookahead"] = preset_config("sdar-b", **layout, lookahead=True)
    grid["S2D2 B=16 exact"] = preset_config("sdar-b", **layout, lookahead=False, verify=dict(acceptance="greedy"))
    for name, config in {
        "S2D2 B=16 score c=1": preset_config("sdar-a", **layout),
        "S2D2 B=16 hysteresis": preset_config("hysteresis", **layout),
    }.items():
        grid[name] = config.replace(lookahead=False)
        grid[name + " + lookahead"] = config.replace(lookahead=True)
    return grid


def fastdllm_grid(max_new_tokens: int) -> dict[str, DecodeConfig]:
    """The paper's Table 2 shape on a Fast-dLLM v2 model, and Figure 3 over sub-block sizes.

    AR; Fast-dLLM v2's own threshold decoding at τ = 0.9 in sub-blocks of 4,
    16 and 32 (the baselines of configurations A, B, C) inside the τ sweep;
    S2D2 configurations A and B (hysteresis router) and C (minimum span), as
    the paper runs them; config B's always-verify score and exact S2D2 at
    every sub-block size.
    """
    common = dict(max_new_tokens=max_new_tokens)
    grid = {"AR": DecodeConfig(method="ar", **common)}
    grid.update(scaling_grid("sub-block", fast_dllm_sub_blocks, max_new_tokens))
    for label, preset in (("A", "fastdllm-a"), ("B", "fastdllm-b"), ("C", "fastdllm-c")):
        config = preset_config(preset, **common)
        grid[f"S2D2 Fast-dLLM config {label} (sub-block {config.sub_block_length}, {config.verify.policy})"] = config
    return grid


def llada2_grid(max_new_tokens: int) -> dict[str, DecodeConfig]:
    """The paper's Table 3 shape on a LLaDA2.x model, and Figure 3 over block sizes.

    AR; LLaDA2's static baseline (32-token blocks, 32 and 16 steps); its
    threshold decoding at the conservative (τ_mask 0.95, τ_edit 0.9) and
    quality (0.7, 0.5) settings with and without token editing; S2D2 at both
    settings, with and without editing; and Figure 3's sweep over B.
    """
    common = dict(max_new_tokens=max_new_tokens)
    grid = {"AR": DecodeConfig(method="ar", **common)}
    for steps in (32, 16):
        grid[f"static B=32 steps={steps}"] = DecodeConfig(method="static", block_length=32, steps=steps, **common)
    grid.update(scaling_grid("B", whole_blocks, max_new_tokens))
    for setting in ("conservative", "quality"):
        s2d2 = preset_config(f"llada2-{setting}", **common)
        rule = dict(method="dynamic", block_length=32, steps=32, threshold=s2d2.threshold, **common)
        grid[f"threshold B=32 {setting} + editing"] = DecodeConfig(edit_threshold=s2d2.edit_threshold, **rule)
        grid[f"threshold B=32 {setting}, no editing"] = DecodeConfig(**rule)
        grid[f"S2D2 B=32 {setting} + editing"] = s2d2
        grid[f"S2D2 B=32 {setting}, no editing"] = s2d2.replace(edit_threshold=None)
    return grid


DEV_SEED = 7  # the development split's seed; its problems are held out from training and disjoint from the test set


def development_problems(n: int, family_names: list[str], test: list) -> list:
    """``n`` problems per family for tuning: held out from training, and sharing no content key with ``test``."""
    taken = {p.key for p in test}
    table = families()
    out = []
    for name in family_names:
        pool = table[name].problems("heldout", 4 * n + len(test), DEV_SEED)
        fresh = [p for p in pool if p.key not in taken]
        if len(fresh) < n:
            raise ValueError(f"{name}: only {len(fresh)} development problems are disjoint from the test set")
        out += fresh[:n]
    return out


def router_candidates(block_length: int, max_new_tokens: int) -> dict[str, DecodeConfig]:
    """The routers ``--tune`` searches at one block size: thresholds of every policy, stochastic acceptance,
    AR-like caching and lookahead (the fastest exact layout)."""
    base = dict(
        method="s2d2", block_length=block_length, steps=block_length, threshold=0.85, cache_ver=True, draft_ver=True,
        lookahead=True, max_new_tokens=max_new_tokens,
    )  # fmt: skip
    found = {}
    for c in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0):  # static score: verify iff E[K] ≥ c + τ_score, so τ_score stays 0
        found[f"score static c={c}"] = config_from_settings(**base, policy="score", score="static", c=c, tau_score=0.0)
    for c in (0.25, 0.5, 1.0):
        for tau in (-1.0, 0.0, 1.0):
            found[f"score dynamic c={c} τ={tau}"] = config_from_settings(
                **base, policy="score", score="dynamic", c=c, tau_score=tau
            )
    for c in (0.5, 1.0):
        for on, off in ((0.0, -2.0), (1.0, -5.0), (2.0, -1.0)):
            found[f"hysteresis c={c} τ_on={on} τ_off={off}"] = config_from_settings(
                **base, policy="hysteresis", score="dynamic", c=c, tau_on=on, tau_off=off
            )
    for span in sorted({2, block_length // 4, block_length // 2} - {0, 1}):
        found[f"min span {span}"] = config_from_settings(**base, policy="min_span", tau_span=span)
    return found


def choose_router(rows: list[dict], ar_accuracy: float, tolerance: float = 0.01) -> dict:
    """The candidate with the fewest forwards among those within ``tolerance`` of AR's accuracy (else the
    most accurate): what a user tuning on a development split would deploy."""
    good = [r for r in rows if r["accuracy"] >= ar_accuracy - tolerance]
    if good:
        return min(good, key=lambda r: (r["nfe_per_problem"], -r["accuracy"]))
    return max(rows, key=lambda r: (r["accuracy"], -r["nfe_per_problem"]))


def tiny_grid(max_new_tokens: int) -> dict[str, DecodeConfig]:
    """Two methods, for the test suite."""
    return {
        "AR": DecodeConfig(method="ar", max_new_tokens=max_new_tokens),
        "S2D2 B=4 always (c=0)": preset_config("sdar-b", block_length=4, steps=4, max_new_tokens=max_new_tokens),
    }


GRIDS = {"paper": paper_grid, "fastdllm": fastdllm_grid, "llada2": llada2_grid, "tiny": tiny_grid}
# The parallel unit each grid's Figure 3 sweeps (method names say ``{unit}={size}``) and its block layout.
SCALING = {"fastdllm": ("sub-block", fast_dllm_sub_blocks)}
WHOLE_BLOCKS = ("B", whole_blocks)


def parallel_state():
    """``(rank, world size, barrier)`` from accelerate: several processes under ``accelerate launch``, else one."""
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    return state.process_index, state.num_processes, state.wait_for_everyone


def run_shard(
    model,
    grid: dict[str, DecodeConfig],
    problems,
    rank: int,
    world: int,
    repeats: int,
    progress,
    energy=False,
    batch_size: int = 1,
) -> list[ProblemResult]:
    """This process's share: every ``world``-th problem, all methods (``energy``: score each output's AR
    energy; ``batch_size`` > 1: that many problems per forward)."""
    mine = [(i, p) for i, p in enumerate(problems) if i % world == rank]
    results = []
    for name, config in grid.items():
        warm_up(model, config, problems[0])
        if batch_size > 1:
            results += run_batch(model, name, config, mine, batch_size, repeats, energy)
            progress(len(mine))
            continue
        for index, problem in mine:
            results.append(run_problem(model, name, config, problem, index, repeats, energy))
            progress(1)
    return results


def exchange(results: list[ProblemResult], shards: Path, tag: str, parallel) -> list[ProblemResult]:
    """Every process's results, in rank order: each writes its shard, waits for the others, reads them all."""
    rank, world, barrier = parallel
    (shards / f"{tag}{rank}.json").write_text(json.dumps([asdict(r) for r in results]))
    barrier()
    return [ProblemResult(**r) for i in range(world) for r in json.loads((shards / f"{tag}{i}.json").read_text())]


def best_dynamic(summaries: dict, accuracy: float, cost: str = "nfe_per_problem"):
    """The dynamic-threshold setting cheapest in ``cost`` (forwards or wall time) among those at least as accurate."""
    dynamic = [s for name, s in summaries.items() if name.startswith("dynamic")]
    matched = [s for s in dynamic if s.accuracy >= accuracy]
    return min(matched, key=lambda s: getattr(s, cost)) if matched else None


def summarize(grid: dict[str, DecodeConfig], results: list[ProblemResult]) -> list[dict]:
    by_method: dict[str, list[ProblemResult]] = {name: [] for name in grid}
    for r in results:
        by_method[r.method].append(r)
    summaries = {
        name: summarize_method(name, sorted(rs, key=lambda r: (r.family, r.index))) for name, rs in by_method.items()
    }
    ar = summaries.get("AR")
    rows = []
    for name, s in summaries.items():
        row = s.to_dict()
        row["config"] = grid[name].to_dict()
        if ar:
            row["speedup_nfe_vs_ar"] = ar.nfe_per_problem / s.nfe_per_problem
            row["speedup_wall_vs_ar"] = ar.wall_per_problem / s.wall_per_problem
        reference = best_dynamic(summaries, s.accuracy)
        row["best_dynamic_at_matched_accuracy"] = reference.method if reference else None
        row["speedup_nfe_vs_best_dynamic"] = reference.nfe_per_problem / s.nfe_per_problem if reference else None
        fastest = best_dynamic(summaries, s.accuracy, "wall_per_problem")
        row["fastest_dynamic_at_matched_accuracy"] = fastest.method if fastest else None
        row["speedup_wall_vs_best_dynamic"] = fastest.wall_per_problem / s.wall_per_problem if fastest else None
        rows.append(row)
    return rows


def write_outputs(out: Path, grid, results: list[ProblemResult], meta: dict, family_names: list[str]) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    ordered = sorted(results, key=lambda r: (list(grid).index(r.method), r.family, r.index))
    write_runs(out / "runs.csv", ordered)
    rows = summarize(grid, results)
    (out / "summary.json").write_text(json.dumps({"meta": meta, "methods": rows}, indent=2) + "\n")
    (out / "table.md").write_text(report_markdown(rows, ordered, family_names))
    return rows


def run_on_development_split(model, args, candidates, family_names, test, out: Path, parallel, tag: str) -> list[dict]:
    """Every candidate on the development split, sharded like the test grid; every process gets all rows."""
    rank, world, _ = parallel
    dev = development_problems(args.dev_problems, family_names, test)
    bar = progress_bar(len(candidates) * len(range(rank, len(dev), world)), f"{tag}[{rank}/{world}]", position=rank)
    results = run_shard(model, candidates, dev, rank, world, 1, bar.update, batch_size=args.batch_size)
    bar.close()
    return summarize(candidates, exchange(results, out / "shards", tag, parallel))


def write_tuning_report(path: Path, args, rule: str, chosen: dict, rows: list[dict]) -> None:
    """What a tuning run saw and chose, so the choice can be checked."""
    report = {
        "development_problems_per_family": args.dev_problems,
        "seed": DEV_SEED,
        "rule": rule,
        "chosen": {str(B): name for B, name in chosen.items()},
        "candidates": rows,
    }
    path.write_text(json.dumps(report, indent=2) + "\n")


def tune_dynamic(model, args, family_names: list[str], test: list, out: Path, parallel) -> dict[int, str]:
    """The dynamic baseline's τ per block size, chosen on the development split as a user tuning it would:
    the most accurate τ (fewest forwards among ties). Rank 0 writes ``dynamic_tuning.json``."""
    unit, layout = SCALING.get(args.grid, WHOLE_BLOCKS)
    candidates = {
        name: config for name, config in scaling_grid(unit, layout, args.max_new_tokens).items()
        if name.startswith("dynamic")
    }  # fmt: skip
    rows = run_on_development_split(model, args, candidates, family_names, test, out, parallel, "dynamic")
    chosen = {}
    for B in SCALING_BLOCKS:
        at_b = [r for r in rows if r["method"].startswith(f"dynamic {unit}={B} ")]
        if at_b:
            chosen[B] = max(at_b, key=lambda r: (r["accuracy"], -r["nfe_per_problem"]))["method"]
    if parallel[0] == 0:
        rule = "the most accurate τ per block size on the development split (fewest forwards among ties)"
        write_tuning_report(out / "dynamic_tuning.json", args, rule, chosen, rows)
    return chosen


def tune(model, args, family_names: list[str], test: list, out: Path, parallel) -> dict[str, DecodeConfig]:
    """Search the routers on the development split; returns the chosen router per block size (stochastic
    acceptance, as tuned, and its exact greedy-acceptance twin) for the test grid. Every process reads all
    shards and chooses the same, so the test grid is the same everywhere; rank 0 writes ``tuning.json``."""
    candidates = {"AR": DecodeConfig(method="ar", max_new_tokens=args.max_new_tokens)}
    for B in (4, 16):
        candidates.update({f"B={B} {k}": v for k, v in router_candidates(B, args.max_new_tokens).items()})
    rows = run_on_development_split(model, args, candidates, family_names, test, out, parallel, "tune")
    ar = next(r for r in rows if r["method"] == "AR")
    chosen, tuned = {}, {}
    for B in (4, 16):
        best = choose_router([r for r in rows if r["method"].startswith(f"B={B} ")], ar["accuracy"])
        chosen[B] = best["method"]
        config = candidates[best["method"]]
        label = best["method"].split(" ", 1)[1]
        tuned[f"S2D2 B={B} tuned ({label}) + lookahead"] = config
        tuned[f"S2D2 B={B} tuned ({label}), greedy acceptance + lookahead"] = config.replace(
            verify=dataclasses.replace(config.verify, acceptance="greedy")
        )
    if parallel[0] == 0:
        rule = "fewest forwards within 1 point of AR's average accuracy on the development split"
        write_tuning_report(out / "tuning.json", args, rule, chosen, rows)
    return tuned


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m s2d2.study.bench", description="Accuracy–speed study of block-diffusion decoding methods."
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint directory or Hub id")
    parser.add_argument("--problems", type=int, default=500, help="held-out problems per family")
    parser.add_argument("--families", default=",".join(families()))
    parser.add_argument(
        "--grid", choices=list(GRIDS), default="paper",
        help="paper: Table 1 (SDAR); fastdllm: Table 2 (Fast-dLLM v2); llada2: Table 3 (LLaDA2.x); tiny: two methods",
    )  # fmt: skip
    parser.add_argument(
        "--methods", default="", help="keep only methods whose name contains one of these comma-separated strings"
    )
    parser.add_argument("--max-new-tokens", type=int, default=160, help="enough for the longest chains answer")
    parser.add_argument("--repeats", type=int, default=1, help="timed decodes per problem (median wall time)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default="results/bench")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="first search the routing thresholds on a development split, then add the best router per block size",
    )
    parser.add_argument(
        "--tune-dynamic",
        action="store_true",
        help="choose the dynamic baseline's τ per block size on the development split (Figure 3's baseline)",
    )
    parser.add_argument(
        "--dev-problems", type=int, default=100, help="development problems per family for --tune and --tune-dynamic"
    )
    add_batch_size_argument(parser)
    args = parser.parse_args(argv)

    rank, world, barrier = parallel_state()
    device = args.device or (f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and world > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    family_names = args.families.split(",")
    grid = GRIDS[args.grid](args.max_new_tokens)
    if args.methods:
        keys = args.methods.split(",")
        grid = {k: v for k, v in grid.items() if any(key in k for key in keys)}
    problems = heldout_problems(args.problems, family_names)
    model = load_model(args.model, device=device)
    out = Path(args.out)
    shards = out / "shards"
    shards.mkdir(parents=True, exist_ok=True)

    start = time.time()
    dynamic_choice = {}
    if args.tune_dynamic:
        dynamic_choice = tune_dynamic(model, args, family_names, problems, out, (rank, world, barrier))
    if args.tune:
        grid.update(tune(model, args, family_names, problems, out, (rank, world, barrier)))

    total = len(grid) * len(range(rank, len(problems), world))
    bar = progress_bar(total, f"bench[{rank}/{world}]", position=rank)
    results = run_shard(
        model, grid, problems, rank, world, args.repeats, bar.update, energy=True, batch_size=args.batch_size
    )
    bar.close()
    merged = exchange(results, shards, "rank", (rank, world, barrier))
    if rank != 0:
        return
    meta = {
        "model": args.model,
        "model_name": model.name,
        "problems_per_family": args.problems,
        "families": family_names,
        "processes": world,
        "device": device,
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "torch": torch.__version__,
        "repeats": args.repeats,
        "batch_size": args.batch_size,
        "seconds": round(time.time() - start, 1),
        "command": "python -m s2d2.study.bench " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "dynamic_best_tau": {str(B): name for B, name in dynamic_choice.items()},
        "scaling_unit": SCALING.get(args.grid, WHOLE_BLOCKS)[0],
    }
    rows = write_outputs(out, grid, merged, meta, family_names)
    print(table_markdown(rows, family_names))
    print(
        f"\nwrote {out}/runs.csv, summary.json and table.md; draw the frontiers with python -m components.benchmarks {out}"
    )


if __name__ == "__main__":
    main()
