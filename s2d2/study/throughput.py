"""Problems per second with batched decoding, measured and predicted.

    python -m s2d2.study.throughput --problems 256 --batch-sizes 1,4,16,64 --out docs/results/throughput

Decodes the same held-out problems (arith, team and chains interleaved) with
AR, the best dynamic-threshold setting of the grid and exact S2D2 with
lookahead, at each batch size (:func:`s2d2.generate_batch`; a finished row's
place goes to the next problem), after an untimed warm-up. Prints problems per
second, the speed-up over batch 1, accuracy, and how many rows equal their
batch-1 output.

The cost model predicts each run from what its forwards computed: a batched
forward of ``R`` rows padded to ``n`` positions costs about ``a + b·R·n``, with
``a`` and ``b`` fitted here on forwards of those shapes over a cached context
(``--no-fit`` skips the fit). What the model leaves out is the decoders' own
Python work, which batching does not share.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from ..batch import generate_batch
from ..config import DecodeConfig, preset_config
from ..models import DEFAULT_MODEL, BlockDiffusionModel, load_model
from .evaluate import bench_config, heldout_problems
from .overhead import fit_line
from .tasks import families

FIT_ROWS = (1, 4, 16, 64)
FIT_TOKENS = (1, 9, 25)  # an AR step, a dynamic draft, an S2D2 verification with lookahead at B = 16


def methods(max_new_tokens: int) -> dict[str, DecodeConfig]:
    """AR, the grid's most accurate cheapest dynamic setting on the bundled model, exact S2D2 with lookahead."""
    return {
        "AR": DecodeConfig(method="ar", max_new_tokens=max_new_tokens),
        "dynamic B=16 τ=0.9": DecodeConfig(
            method="dynamic", block_length=16, threshold=0.9, max_new_tokens=max_new_tokens
        ),
        "exact S2D2 B=16 + lookahead": preset_config("exact", max_new_tokens=max_new_tokens),
    }


def interleaved_problems(n: int) -> list:
    """``n`` held-out problems taking the task families in turn, so every batch mixes short and long answers."""
    names = list(families())
    per_family = -(-n // len(names))
    by_family = [heldout_problems(per_family, [name]) for name in names]
    return [group[i] for i in range(per_family) for group in by_family][:n]


def batched_forward_seconds(model: BlockDiffusionModel, rows: int, tokens: int, context: int, repeats: int) -> float:
    """Median seconds of one forward of ``rows`` × ``tokens`` new positions after ``context`` cached ones each."""
    ids = torch.randint(0, model.vocab_size - 1, (rows, context + tokens), device=model.device)
    positions = torch.arange(context + tokens, device=model.device).expand(rows, -1)
    cache = DynamicCache(config=model.model.config)
    with torch.inference_mode():
        model.model(input_ids=ids[:, :context], position_ids=positions[:, :context], cache=cache, use_cache=True)
        mask = torch.zeros(rows, 1, tokens, context + tokens, dtype=model.dtype, device=model.device)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            model.model(
                input_ids=ids[:, context:],
                attention_mask=mask,
                position_ids=positions[:, context:],
                cache=cache,
                use_cache=True,
                logits_to_keep=tokens,
            )
            times.append(time.perf_counter() - start)
            cache.crop(-tokens)
    return statistics.median(times[1:])


def fit_cost(model: BlockDiffusionModel, repeats: int) -> tuple[float, float, list[dict]]:
    """``(a, b, measurements)`` of ``seconds ≈ a + b·rows·tokens`` over the shapes batching produces."""
    points = [
        {"rows": r, "tokens": n, "seconds": batched_forward_seconds(model, r, n, 64, repeats)}
        for r in FIT_ROWS
        for n in FIT_TOKENS
    ]
    a, b = fit_line([(p["rows"] * p["tokens"], p["seconds"]) for p in points])
    return a, b, points


def measure(model, name: str, config: DecodeConfig, problems: list, batch_size: int) -> dict:
    prompts, seeds = [p.prompt for p in problems], list(range(len(problems)))
    batch = generate_batch(model, prompts, bench_config(config), seeds=seeds, batch_size=batch_size)
    scorers = families()
    return {
        "method": name,
        "batch_size": batch_size,
        "problems": len(problems),
        "seconds": batch.wall_seconds,
        "problems_per_second": len(problems) / batch.wall_seconds,
        "batch_forwards": batch.forwards,
        "tokens_computed": batch.tokens,
        "row_nfe": sum(t.summary.nfe for t in batch),
        "accuracy": sum(scorers[p.family].score(p, t.text) for p, t in zip(problems, batch)) / len(problems),
        "outputs": [t.output_ids for t in batch],
    }


def table(results: list[dict], a: float | None, b: float | None) -> str:
    lines = [
        "| method | batch | problems/s | × batch 1 | predicted problems/s | batch forwards | NFE per problem "
        "| positions computed | accuracy | rows = batch 1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    first = {}
    for r in results:
        base = first.setdefault(r["method"], r)
        same = sum(x == y for x, y in zip(r["outputs"], base["outputs"]))
        predicted = "—"
        if a is not None:
            predicted = f"{r['problems'] / (a * r['batch_forwards'] + b * r['tokens_computed']):.1f}"
        lines.append(
            f"| {r['method']} | {r['batch_size']} | {r['problems_per_second']:.1f} "
            f"| {r['problems_per_second'] / base['problems_per_second']:.2f}× | {predicted} | {r['batch_forwards']} "
            f"| {r['row_nfe'] / r['problems']:.1f} | {r['tokens_computed']} | {100 * r['accuracy']:.1f}% "
            f"| {same}/{r['problems']} |"
        )
    return "\n".join(lines)


def advantage(results: list[dict]) -> str:
    """Exact S2D2's problems per second over the dynamic baseline's, per batch size."""
    by = {(r["method"], r["batch_size"]): r["problems_per_second"] for r in results}
    names = list(dict.fromkeys(r["method"] for r in results))
    s2d2, dynamic = names[-1], names[1]
    sizes = [s for s in sorted({r["batch_size"] for r in results}) if (s2d2, s) in by and (dynamic, s) in by]
    head = "| problems/s ratio | " + " | ".join(f"batch {s}" for s in sizes) + " |"
    cells = " | ".join(f"{by[(s2d2, s)] / by[(dynamic, s)]:.2f}×" for s in sizes)
    return f"{head}\n|---|" + "---:|" * len(sizes) + f"\n| {s2d2} over {dynamic} | {cells} |"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m s2d2.study.throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--problems", type=int, default=256)
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeats", type=int, default=5, help="timed forwards per shape of the cost fit")
    parser.add_argument("--no-fit", action="store_true", help="skip fitting the cost model")
    parser.add_argument("--out", default=None, help="folder for summary.json and table.md")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    if min(sizes) < 1:
        parser.error("batch sizes must be at least 1")

    model = load_model(args.model, device=args.device)
    problems = interleaved_problems(args.problems)
    a = b = None
    points = []
    if not args.no_fit:
        a, b, points = fit_cost(model, args.repeats)
    results = []
    for name, config in methods(args.max_new_tokens).items():
        measure(model, name, config, problems[: max(sizes)], max(sizes))  # warm-up, untimed
        for size in sizes:
            results.append(measure(model, name, config, problems, size))
            print(f"{name} batch {size}: {results[-1]['problems_per_second']:.1f} problems/s", flush=True)
    header = (
        f"# throughput: {model.name}, {len(problems)} held-out problems (arith, team, chains in turn), "
        f"{args.device or model.device}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.machine()} {platform.processor()}".strip()
    )
    parts = [header, table(results, a, b), advantage(results)]
    if a is not None:
        parts.append(f"cost model: a = {a * 1e3:.2f} ms per forward, b = {b * 1e3:.4f} ms per position computed")
    text = "\n\n".join(parts)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(text + "\n")
        meta = {
            "command": "python -m s2d2.study.throughput "
            + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
            "threads": torch.get_num_threads(),
            "machine": f"{platform.machine()} {platform.processor()}".strip(),
            "torch": torch.__version__,
            "fit": {"a": a, "b": b, "points": points},
        }
        rows = [{k: v for k, v in r.items() if k != "outputs"} for r in results]
        (out / "summary.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
