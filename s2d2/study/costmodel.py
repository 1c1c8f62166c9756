"""The cost model of block-diffusion decoding, checked against a benchmark run.

    python -m s2d2.study.costmodel docs/results/bundled/summary.json --per-forward-ms 8.43 --per-token-ms 0.182

A forward over ``n`` new tokens costs about ``a + b·n`` (``python -m s2d2.study.overhead
--forward-cost`` measures ``a`` and ``b``), so a decode costs about
``a·NFE + b·(tokens fed)``. This prints, for every method of a ``summary.json``
written by ``python -m s2d2.study.bench``, that prediction next to the measured wall
time per problem, and what the same forwards would cost where ``b`` is ~0 (a
GPU at these lengths): then only NFE matters. docs/BENCHMARKS.md derives NFE
and tokens per forward from the acceptance statistics.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def predicted_seconds(nfe: float, tokens_fed_per_forward: float, per_forward: float, per_token: float) -> float:
    """``a·NFE + b·tokens``: what the forwards alone cost."""
    return nfe * (per_forward + per_token * tokens_fed_per_forward)


def rows(summary: dict, per_forward: float, per_token: float) -> list[dict]:
    methods = summary["methods"]
    ar = next((m for m in methods if m["method"] == "AR"), None)
    out = []
    for m in methods:
        predicted = predicted_seconds(m["nfe_per_problem"], m["tokens_fed_per_forward"], per_forward, per_token)
        out.append(
            {
                "method": m["method"],
                "nfe": m["nfe_per_problem"],
                "fed_per_forward": m["tokens_fed_per_forward"],
                "predicted_s": predicted,
                "measured_s": m["wall_per_problem"],
                "gpu_speedup_vs_ar": ar["nfe_per_problem"] / m["nfe_per_problem"] if ar else None,
            }
        )
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m s2d2.study.costmodel", description=__doc__.split("\n\n")[0])
    parser.add_argument("summary", help="a summary.json written by python -m s2d2.study.bench")
    parser.add_argument(
        "--per-forward-ms", type=float, required=True, help="a, from python -m s2d2.study.overhead --forward-cost"
    )
    parser.add_argument("--per-token-ms", type=float, required=True, help="b, from the same command")
    args = parser.parse_args(argv)
    summary = json.loads(Path(args.summary).read_text(encoding="utf-8"))
    a, b = args.per_forward_ms / 1e3, args.per_token_ms / 1e3
    print(
        "| method | NFE | fed / fwd | predicted s | measured s | measured / predicted | speedup vs AR if only NFE counted |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows(summary, a, b):
        gpu = "—" if r["gpu_speedup_vs_ar"] is None else f"{r['gpu_speedup_vs_ar']:.2f}×"
        print(
            f"| {r['method']} | {r['nfe']:.1f} | {r['fed_per_forward']:.1f} | {r['predicted_s']:.3f} | "
            f"{r['measured_s']:.3f} | {r['measured_s'] / r['predicted_s']:.2f} | {gpu} |"
        )


if __name__ == "__main__":
    main()
