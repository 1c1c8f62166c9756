"""Command line: ``python -m s2d2 generate ...`` decodes one prompt and prints the summary;
``python -m s2d2 serve-trace ...`` reads the trajectory an SGLang server wrote for one request
(``trace_dir``, docs/SERVING.md) and prints the same report.

Errors are one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import PRESETS, DecodeConfig, Exactness, config_from_settings
from .settings import add_arguments, settings_from_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m s2d2", description="Block-diffusion decoding with S2D2.")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="decode one prompt and print the text and the cost summary")
    gen.add_argument("--model", default=None, help="checkpoint directory or Hub id (default: the bundled model)")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--preset", help=f"a paper configuration: {', '.join(PRESETS)}")
    gen.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    gen.add_argument("--trace-out", help="write the full trajectory as JSON to this file")
    add_arguments(gen.add_argument_group("decoding settings (declared on the config dataclasses)"))
    served = commands.add_parser(
        "serve-trace", help="print the report of a request's trace written by an SGLang server (trace_dir)"
    )
    served.add_argument("path", help="a trace file, or the server's trace_dir with --request")
    served.add_argument("--request", help="the request id SGLang returned (meta_info.id), to find it in trace_dir")
    for parsed in (gen, served):
        parsed.add_argument("--json", action="store_true", help="print the summary as JSON")
        parsed.add_argument(
            "--forward-stats",
            action="store_true",
            help="print, per block, the order in which positions were committed and how",
        )
        parsed.add_argument(
            "--inspect",
            type=int,
            metavar="POSITION",
            help="print the decision at this generated position (from 0) for every step that drafted or committed it",
        )
    return parser


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    """Preset (or defaults), then every flag the user actually gave."""
    return config_from_settings(args.preset, **settings_from_args(args))


def run_generate(args: argparse.Namespace) -> int:
    from .decode import generate
    from .models import DEFAULT_MODEL, load_model

    config = config_from_args(args)
    model = load_model(
        args.model or DEFAULT_MODEL, device=args.device, announce=lambda line: print(line, file=sys.stderr)
    )
    trace = generate(model, args.prompt, config)
    report(trace, args)
    if args.trace_out:
        trace.save(args.trace_out)
        print(f"trace written to {args.trace_out}", file=sys.stderr)
    return 0


def run_serve_trace(args: argparse.Namespace) -> int:
    from .trace import Trace

    path = Path(args.path)
    if args.request is not None:
        path = path / f"{args.request}.json"
    elif path.is_dir():
        raise ValueError(f"{path} is a directory: name the request with --request ID")
    if not path.is_file():
        raise ValueError(f"no trace at {path} (a server writes one when a request's output has ended)")
    report(Trace.load(str(path)), args)
    return 0


def report(trace, args: argparse.Namespace) -> None:
    """The run's text and cost summary (or JSON), and the decoding order and one position's decisions if asked."""
    from .decisions import describe_position
    from .trace import forward_stats

    s = trace.summary
    if args.json:
        summary = {"text": trace.text, "summary": trace.to_dict()["summary"], "exactness": trace.exactness}
        print(json.dumps(summary, indent=2))
    else:
        print(trace.text or " ".join(trace.output_tokens))
        print(
            f"\n[{trace.method}] {s.generated_tokens} tokens in {s.nfe} forwards "
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
        print(Exactness(tuple(trace.exactness.get("reasons", ()))).describe())
    if args.forward_stats:
        print(forward_stats(trace))
    if args.inspect is not None:
        print(describe_position(trace, args.inspect))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_generate(args) if args.command == "generate" else run_serve_trace(args)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
