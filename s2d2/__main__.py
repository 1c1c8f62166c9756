"""Command line: ``python -m s2d2 generate ...`` decodes one prompt and prints the summary.

Errors are one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from .config import METHODS, PRESETS, DecodeConfig, preset_config
from .policies import ESTIMATORS, POLICIES, SCORE_TYPES

# CLI flag -> (config section, field). Flags left unset keep the preset's or the default value.
_FIELDS = {
    "method": (None, "method"),
    "block_length": (None, "block_length"),
    "steps": (None, "steps"),
    "threshold": (None, "threshold"),
    "rule": (None, "s2d2_rule"),
    "sub_block_length": (None, "sub_block_length"),
    "edit_threshold": (None, "edit_threshold"),
    "max_post_steps": (None, "max_post_steps"),
    "max_new_tokens": (None, "max_new_tokens"),
    "seed": (None, "seed"),
    "cache_ver": (None, "cache_ver"),
    "draft_ver": (None, "draft_ver"),
    "temperature": ("sampling", "temperature"),
    "top_k": ("sampling", "top_k"),
    "top_p": ("sampling", "top_p"),
    "policy": ("verify", "policy"),
    "acceptance": ("verify", "acceptance"),
    "estimator": ("verify", "estimator"),
    "score": ("verify", "score"),
    "c": ("verify", "c"),
    "tau_score": ("verify", "tau_score"),
    "tau_on": ("verify", "tau_on"),
    "tau_off": ("verify", "tau_off"),
    "tau_span": ("verify", "tau_span"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m s2d2", description="Block-diffusion decoding with S2D2.")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="decode one prompt and print the text and the cost summary")
    gen.add_argument("--model", default=None, help="checkpoint directory or Hub id (default: the bundled model)")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--method", choices=METHODS)
    gen.add_argument("--preset", help=f"a paper configuration: {', '.join(PRESETS)}")
    gen.add_argument("--block-length", type=int)
    gen.add_argument("--sub-block-length", type=int, help="decode blocks in sub-blocks of this size (Fast-dLLM v2)")
    gen.add_argument("--steps", type=int, help="denoising steps per (sub-)block (default: its length)")
    gen.add_argument("--threshold", type=float, help="confidence threshold τ of the dynamic rule")
    gen.add_argument("--rule", choices=("static", "dynamic"), help="S2D2's diffusion rule when it skips verification")
    gen.add_argument(
        "--edit-threshold", type=float, help="τ_edit: rewrite committed tokens above this confidence (LLaDA2)"
    )
    gen.add_argument("--max-post-steps", type=int, help="editing-only passes after a block is full")
    gen.add_argument("--max-new-tokens", type=int)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--cache-ver", action="store_const", const=True, help="store committed KV causally (AR-like)")
    gen.add_argument("--draft-ver", action="store_const", const=True, help="committed rows causal while drafting")
    gen.add_argument("--temperature", type=float)
    gen.add_argument("--top-k", type=int)
    gen.add_argument("--top-p", type=float)
    gen.add_argument("--policy", choices=POLICIES)
    gen.add_argument("--acceptance", choices=("stochastic", "greedy"))
    gen.add_argument("--estimator", choices=ESTIMATORS)
    gen.add_argument("--score", choices=SCORE_TYPES)
    gen.add_argument("--c", type=float, help="score penalty coefficient")
    gen.add_argument("--tau-score", type=float)
    gen.add_argument("--tau-on", type=float)
    gen.add_argument("--tau-off", type=float)
    gen.add_argument("--tau-span", type=int)
    gen.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    gen.add_argument("--trace-out", help="write the full trajectory as JSON to this file")
    gen.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    """Preset (or defaults), then every flag the user actually gave."""
    sections: dict = {"sampling": {}, "verify": {}}
    top: dict = {}
    for flag, (section, name) in _FIELDS.items():
        value = getattr(args, flag)
        if value is not None:
            (sections[section] if section else top)[name] = value
    if args.preset:
        return preset_config(args.preset, **top, **{k: v for k, v in sections.items() if v})
    base = DecodeConfig().to_dict()
    base.update(top)
    for key, values in sections.items():
        base[key] = {**base[key], **values}
    return DecodeConfig.from_dict(base)


def run_generate(args: argparse.Namespace) -> int:
    from .decode import generate
    from .models import DEFAULT_MODEL, load_model

    config = config_from_args(args)
    model = load_model(
        args.model or DEFAULT_MODEL, device=args.device, announce=lambda line: print(line, file=sys.stderr)
    )
    trace = generate(model, args.prompt, config)
    s = trace.summary
    if args.json:
        print(json.dumps({"text": trace.text, "summary": trace.to_dict()["summary"]}, indent=2))
    else:
        print(trace.text)
        print(
            f"\n[{config.method}] {s.generated_tokens} tokens in {s.nfe} forwards "
            f"({', '.join(f'{k} {v}' for k, v in s.nfe_by_kind.items() if v)}); "
            f"{s.tpf:.2f} tokens/forward; {s.wall_seconds:.3f}s"
        )
        if s.verifications or s.verifications_skipped:
            rate = f"{s.acceptance_rate:.0%}" if s.acceptance_rate is not None else "n/a"
            print(
                f"verifications {s.verifications} (skipped {s.verifications_skipped}); acceptance {rate}; "
                f"mean accepted length {s.mean_accepted_length or 0:.2f}; rejections {s.rejections}"
            )
        if s.edits:
            print(f"edits {s.edits}")
    if args.trace_out:
        trace.save(args.trace_out)
        print(f"trace written to {args.trace_out}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_generate(args)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
