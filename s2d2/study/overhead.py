"""How much of decoding is Python, not the model? And what does a forward cost? Benchmarks, not tests.

    python -m s2d2.study.overhead --new-tokens 256 --repeats 3
    python -m s2d2.study.overhead --forward-cost
    python -m s2d2.study.overhead --recording-cost

Builds an untrained model of the bundled model's shape (nothing is
downloaded), decodes ``--new-tokens`` tokens with each method (stop tokens
disabled so every run is the same length) and prints, per method, the share of
decode wall time spent outside model forwards: mask building, sampling,
routing, acceptance and trace recording. Each run is timed after a warm-up and
the median of the repeats is reported.

``--recording-cost`` instead decodes each method with ``trace_top_k`` = 5
and = 0, alternating, and prints what recording the decision (the top-k of
``p``, ``q`` and the residual, ``u``) adds to decode wall time: the change in
time outside forwards, as a share of the wall time without recording (the
target is at most 5%).

``--forward-cost`` instead times draft-shaped forwards of n new tokens over a
cached context on the *bundled* model and fits ``seconds ≈ a + b·n``: the
per-forward and per-token costs of the cost model in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ..config import DecodeConfig, VerifyConfig, preset_config
from ..decode import Decoder
from ..models import load_model
from ..training.train import TrainConfig, write_random_checkpoint


def method_configs(new_tokens: int) -> dict[str, DecodeConfig]:
    return {
        "ar": DecodeConfig(method="ar", max_new_tokens=new_tokens),
        "static B=16/16": DecodeConfig(method="static", block_length=16, max_new_tokens=new_tokens),
        "dynamic B=16 τ=0.9": DecodeConfig(method="dynamic", block_length=16, threshold=0.9, max_new_tokens=new_tokens),
        "s2d2 sdar-a": preset_config("sdar-a", max_new_tokens=new_tokens, lookahead=False),
        "s2d2 sdar-a + lookahead": preset_config("sdar-a", max_new_tokens=new_tokens),
        "s2d2 sdar-b": preset_config("sdar-b", max_new_tokens=new_tokens, lookahead=False),
        "s2d2 sdar-b + lookahead": preset_config("sdar-b", max_new_tokens=new_tokens),
        "s2d2 hysteresis": preset_config("hysteresis", max_new_tokens=new_tokens, lookahead=False),
        "s2d2 hysteresis + lookahead": preset_config("hysteresis", max_new_tokens=new_tokens),
        "s2d2 ucb B=16": DecodeConfig(
            method="s2d2", block_length=16, max_new_tokens=new_tokens, verify=VerifyConfig(policy="ucb")
        ),
    }


def print_recording_cost(model, prompt: list[int], new_tokens: int, repeats: int, top_k: int) -> None:
    """What recording the decision (``trace_top_k = top_k``) adds to decode wall time, against ``0``.

    Recording runs outside the model's forwards (the top-k, the transfer, the
    records), so its cost is the difference in time *outside forwards*, as a
    share of the wall time without it. Whole wall times are printed beside it,
    but on a CPU their run-to-run spread (the forwards themselves vary by 5–15%
    between identical runs) is larger than the effect. The two settings
    alternate run by run after one warm-up each, the first of each pair
    swapping every repeat, so a machine that slows down meanwhile burdens
    both alike.
    """
    print(f"| method | wall s, top-k {top_k} | wall s, top-k 0 | outside forwards s, top-k {top_k} | "
          "outside forwards s, top-k 0 | recording costs |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for name, config in method_configs(new_tokens).items():
        configs = {k: dataclasses.replace(config, trace_top_k=k) for k in (top_k, 0)}
        for c in configs.values():
            Decoder(model, c).run(prompt)
        runs: dict[int, list] = {k: [] for k in configs}
        for repeat in range(repeats):
            pairs = list(configs.items())
            for k, c in pairs if repeat % 2 == 0 else pairs[::-1]:  # neither setting always runs first
                runs[k].append(Decoder(model, c).run(prompt).summary)
        wall = {k: statistics.median(s.wall_seconds for s in runs[k]) for k in configs}
        outside = {k: statistics.median(s.wall_seconds - s.forward_seconds for s in runs[k]) for k in configs}
        cost = (outside[top_k] - outside[0]) / wall[0]
        print(f"| {name} | {wall[top_k]:.3f} | {wall[0]:.3f} | {outside[top_k]:.3f} | {outside[0]:.3f} | {cost:+.1%} |")


def forward_cost(model, context: int, token_counts: list[int], repeats: int) -> list[tuple[int, float]]:
    """Median seconds of one forward of ``n`` new tokens after ``context`` cached ones, for each ``n``.

    Shaped like a draft: explicit additive mask, explicit positions, nothing stored.
    """
    session = model.new_session(lambda *a: None)
    ids = torch.randint(0, model.vocab_size - 1, (context + max(token_counts),), device=model.device)
    model.prefill(session, ids[:context], causal=True, block_length=1)
    rows = []
    for n in token_counts:
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            times.append(-time.perf_counter())
            model.draft_forward(session, ids[context : context + n], None, True, 0)
            times[-1] += time.perf_counter()
        rows.append((n, statistics.median(times[1:])))
    return rows


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b·x``."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def print_forward_cost(repeats: int) -> None:
    model = load_model()
    rows = forward_cost(model, context=64, token_counts=[1, 2, 4, 8, 16, 24, 32, 48], repeats=max(repeats, 20))
    a, b = fit_line(rows)
    print(f"# forward cost, bundled model, 64 cached positions, median of {max(repeats, 20)} after a warm-up, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")  # fmt: skip
    print("| new tokens | ms |")
    print("|---:|---:|")
    for n, seconds in rows:
        print(f"| {n} | {seconds * 1e3:.2f} |")
    print(f"fit: {a * 1e3:.2f} ms per forward + {b * 1e3:.3f} ms per token")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m s2d2.study.overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=TrainConfig.hidden_size)
    parser.add_argument("--layers", type=int, default=TrainConfig.layers)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--forward-cost", action="store_true", help="time forwards against tokens and fit a line")
    parser.add_argument(
        "--recording-cost",
        action="store_true",
        help="time each method with trace_top_k = --top-k and = 0: what recording the decision costs",
    )
    parser.add_argument("--top-k", type=int, default=5, help="trace_top_k of --recording-cost (default 5)")
    args = parser.parse_args(argv)
    if args.forward_cost:
        print_forward_cost(args.repeats)
        return

    shape = TrainConfig(
        hidden_size=args.hidden_size,
        layers=args.layers,
        intermediate_size=3 * args.hidden_size,
        max_positions=1024,
        tokenizer_corpus=2000,
    )
    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(str(write_random_checkpoint(Path(tmp) / "random", shape, init_std=0.15)), device=args.device)
    model.stop_token_ids = []
    params = sum(p.numel() for p in model.model.parameters())
    prompt = model.chat_prompt("Ann has 12 pens. She buys 5 more. How many pens does Ann have now?")
    print(f"# decode overhead: {params / 1e6:.1f}M-parameter random model, {args.new_tokens} new tokens, "
          f"median of {args.repeats} runs after a warm-up, {args.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")  # fmt: skip
    if args.recording_cost:
        print_recording_cost(model, prompt, args.new_tokens, args.repeats, args.top_k)
        return
    print("| method | NFE | wall s | forward s | outside forwards |")
    print("|---|---:|---:|---:|---:|")
    for name, config in method_configs(args.new_tokens).items():
        Decoder(model, config).run(prompt)
        runs = [Decoder(model, config).run(prompt).summary for _ in range(args.repeats)]
        median = sorted(runs, key=lambda s: s.overhead_share)[len(runs) // 2]
        print(
            f"| {name} | {median.nfe} | {statistics.median(s.wall_seconds for s in runs):.3f} | "
            f"{statistics.median(s.forward_seconds for s in runs):.3f} | {median.overhead_share:.1%} |"
        )


if __name__ == "__main__":
    main()
