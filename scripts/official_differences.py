"""What Fast-dLLM v2's official block cache and trailing token change on the bundled model (docs/ALGORITHM.md).

    python scripts/official_differences.py [--problems 10] [--max-new-tokens 32]

Decodes ``--problems`` held-out problems of each task family with the bundled
Fast-dLLM v2 model under ``accounting="official"``, greedy acceptance, for the
paper's Fast-dLLM v2 presets, once with ``use_block_cache`` (the official
script's default) and once without, and prints per preset how many outputs
differ, the mean forwards and verifications per problem, and how many outputs
end with the token the last commit forward appends at the budget.
"""

from __future__ import annotations

import argparse

import torch

from s2d2 import generate
from s2d2.config import preset_config
from s2d2.models import load_model
from s2d2.study.evaluate import heldout_problems

PRESETS = ("fastdllm-a", "fastdllm-b", "fastdllm-c")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=10, help="held-out problems per task family")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = load_model("bundled-fast-dllm-v2", device="cpu")
    problems = heldout_problems(args.problems)
    print(f"bundled-fast-dllm-v2, {len(problems)} held-out problems, {args.max_new_tokens} new tokens, greedy")
    for name in PRESETS:
        runs = {}
        for cached in (True, False):
            config = preset_config(
                name, accounting="official", use_block_cache=cached, max_new_tokens=args.max_new_tokens,
                verify={"acceptance": "greedy"},
            )  # fmt: skip
            runs[cached] = [generate(model, p.prompt, config) for p in problems]
        differ = sum(a.output_ids != b.output_ids for a, b in zip(runs[True], runs[False]))
        trailing = sum(t.stop_reason == "max_new_tokens" for t in runs[True])
        n = len(problems)
        for cached, traces in runs.items():
            nfe = sum(t.summary.nfe for t in traces) / n
            verify = sum(t.summary.nfe_by_kind.get("verify", 0) for t in traces) / n
            print(f"{name} use_block_cache={cached}: mean NFE {nfe:.2f}, verifications per problem {verify:.2f}")
        print(f"{name}: {differ}/{n} outputs differ with and without the block cache; "
              f"{trailing}/{n} reach the budget and end with the appended commit-forward token")  # fmt: skip


if __name__ == "__main__":
    main()
