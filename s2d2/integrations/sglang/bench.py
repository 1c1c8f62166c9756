"""S2D2 served by SGLang beside SGLang's LowConfidence and this project's ``generate_batch``, one run.

    python -m s2d2.integrations.sglang.bench table --problems 256 --concurrency 1,4,16,64 --out DIR
    python -m s2d2.integrations.sglang.bench check --problems 100 --out DIR [--model bundled-llada2]
    python -m s2d2.integrations.sglang.bench head-cost
    python -m s2d2.integrations.sglang.bench trace-cost --problems 128 --repeats 3 --out DIR

``table``: on the exported bundled model, for every method and concurrency, the
held-out problems are sent with that many requests in flight (SGLang) or decoded
that many rows per forward (``generate_batch``); it writes problems per second,
tokens per forward (generated tokens over request-forwards: each forward counts
once for every request it served, the engine's NFE), accuracy and forwards per
problem to ``DIR/table.md`` and ``DIR/table.json``. ``check``: exact S2D2 served by
SGLang against the engine's exact configuration on held-out problems of every
task family, output for output, on the bundled SDAR model or any SDAR or LLaDA2 checkpoint (``--model``).
``head-cost``: what padding the vocabulary to SGLang's SDAR mask id would
cost, one B-token forward of the model with its own head and with a 151,936-row one. ``trace-cost``: exact
S2D2 served at concurrency 16 by two servers, one writing served traces (``trace_dir``) and one not, their
passes alternating, with outputs compared. Run it in the
project's environment; the
servers run in SGLang's (``--sglang-python``, default ``.venv-sglang``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ...batch import generate_batch
from ...config import DecodeConfig, config_from_settings
from ...models import load_model
from ...study.evaluate import heldout_problems
from ...study.tasks import families
from .export import export
from .instrument import ENVIRONMENT, read_counts
from .server import SGLangServer
from .settings import decode_config

ROOT = Path(__file__).resolve().parents[3]
BLOCK = 16  # the bundled model's S2D2 presets decode blocks of 16
MAX_NEW_TOKENS = 160


@dataclass(frozen=True)
class Method:
    """One row group of the table: an SGLang algorithm with its YAML, and the engine configuration that does
    the same."""

    name: str
    algorithm: str
    settings: dict
    engine: DecodeConfig


def methods() -> list[Method]:
    """SGLang's LowConfidence (its default τ = 0.95, and τ = 0.9), exact S2D2 and S2D2 config B."""

    def low_confidence(tau: float | None) -> Method:
        settings = {"block_size": BLOCK} | ({} if tau is None else {"threshold": tau})
        engine_tau = 0.95 if tau is None else tau
        engine = config_from_settings(method="dynamic", block_length=BLOCK, threshold=engine_tau)
        label = "default τ=0.95" if tau is None else f"τ={tau}"
        return Method(f"SGLang LowConfidence ({label})", "LowConfidenceOwnMask", settings, engine)

    def s2d2(preset: str) -> Method:
        settings = {"preset": preset, "block_size": BLOCK}
        return Method(f"S2D2 {preset}", "S2D2", settings, decode_config(settings, BLOCK))

    return [low_confidence(None), low_confidence(0.9), s2d2("exact"), s2d2("sdar-b")]


@dataclass
class Row:
    method: str
    runner: str
    concurrency: int
    problems: int
    seconds: float
    tokens: int
    request_forwards: int
    correct: int

    @property
    def problems_per_second(self) -> float:
        return self.problems / self.seconds

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.request_forwards

    @property
    def accuracy(self) -> float:
        return self.correct / self.problems

    @property
    def forwards_per_problem(self) -> float:
        return self.request_forwards / self.problems


def answer_ids(ids: list[int], stops: set[int]) -> list[int]:
    """The output up to its first stop token (excluded), as the engine's trace text reads it."""
    for i, token in enumerate(ids):
        if token in stops:
            return ids[:i]
    return ids


class Problems:
    """The held-out problems, their prompts and how an output is scored, for one model."""

    def __init__(self, model, count: int):
        per_family = math.ceil(count / len(families()))
        self.items = heldout_problems(per_family)[:count]
        self.model = model
        self.prompts = [model.chat_prompt(p.prompt) for p in self.items]
        self.stops = set(model.stop_token_ids)

    def correct(self, outputs: list[list[int]]) -> int:
        table = families()
        texts = [self.model.tokenizer.decode(answer_ids(ids, self.stops), skip_special_tokens=True) for ids in outputs]
        return sum(table[p.family].score(p, text) for p, text in zip(self.items, texts))


def serve(python: str, exported: Path, method: Method, workdir: Path, max_running: int) -> SGLangServer:
    config = workdir / f"{method.algorithm}-{abs(hash(method.name))}.yaml"
    config.write_text(json.dumps(method.settings))  # JSON is YAML
    counts = workdir / f"{config.stem}.forwards"
    server = SGLangServer(
        python, str(exported), method.algorithm, str(config), workdir / f"{config.stem}.log", max_running,
        environment={ENVIRONMENT: str(counts)},
    )  # fmt: skip
    server.counts = counts
    try:
        server.wait_healthy()
    except BaseException:
        server.stop()
        raise
    return server


def sglang_row(server, method: Method, problems: Problems, concurrency: int) -> tuple[Row, list[list[int]]]:
    """The method served at ``concurrency``, and its outputs. Every pass starts from an empty prefix cache plus
    one untimed warm-up request (which caches the chat template's first block, as any served system prompt),
    so a pass does not find the prompt blocks an earlier pass over the same problems left in SGLang's cache."""
    params = [{"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS}] * len(problems.prompts)
    server.flush_cache()
    server.generate(problems.prompts[0], params[0])  # warm-up, untimed
    _, rows_before = read_counts(server.counts)
    start = time.perf_counter()
    outputs = server.generate_many(problems.prompts, params, concurrency)
    seconds = time.perf_counter() - start
    _, rows_after = read_counts(server.counts)
    tokens = sum(len(o) for o in outputs)
    row = Row(method.name, "SGLang", concurrency, len(outputs), seconds, tokens, rows_after - rows_before,
              problems.correct(outputs))  # fmt: skip
    return row, outputs


def engine_row(model, method: Method, problems: Problems, concurrency: int) -> tuple[Row, list[list[int]]]:
    """The engine's ``generate_batch`` with ``concurrency`` rows per forward, and its outputs."""
    config = method.engine.replace(max_new_tokens=MAX_NEW_TOKENS, trace_top_k=0)
    generate_batch(model, problems.prompts[:1], config)  # warm-up, untimed
    start = time.perf_counter()
    traces = generate_batch(model, problems.prompts, config, batch_size=concurrency)
    seconds = time.perf_counter() - start
    tokens = sum(t.summary.generated_tokens for t in traces)
    nfe = sum(t.summary.nfe for t in traces)
    outputs = [t.output_ids for t in traces]
    row = Row(method.name, "engine generate_batch", concurrency, len(traces), seconds, tokens, nfe,
              problems.correct(outputs))  # fmt: skip
    return row, outputs


def table_markdown(rows: list[Row], header: str) -> str:
    lines = [header, "", "| method | runner | concurrency | problems/s | tokens/forward | accuracy | forwards/problem |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.method} | {r.runner} | {r.concurrency} | {r.problems_per_second:.2f} | "
                     f"{r.tokens_per_forward:.2f} | {r.accuracy:.1%} | {r.forwards_per_problem:.1f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def machine() -> str:
    import torch

    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {platform.platform()}"


def run_table(args) -> list[Row]:
    model = load_model(args.model, device="cpu")
    problems = Problems(model, args.problems)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        exported = export(args.model, workdir / "model")
        for method in methods():
            with serve(args.sglang_python, exported, method, workdir, max(args.concurrency)) as server:
                for c in args.concurrency:
                    rows.append(sglang_row(server, method, problems, c)[0])
                    print(table_markdown(rows[-1:], "").splitlines()[-1], flush=True)
            for c in args.concurrency:
                rows.append(engine_row(model, method, problems, c)[0])
                print(table_markdown(rows[-1:], "").splitlines()[-1], flush=True)
    header = (f"{args.problems} held-out problems, model {args.model} (exported), max {MAX_NEW_TOKENS} new tokens, "
              f"block {BLOCK}; {machine()}")  # fmt: skip
    write(args.out, "table", rows, header)
    return rows


def run_check(args) -> None:
    """Exact S2D2 in SGLang against the engine's exact configuration (lookahead off, which SGLang lacks: the
    outputs are the same either way), output for output, on every held-out problem at concurrency 16."""
    model = load_model(args.model, device="cpu")
    problems = Problems(model, args.problems * len(families()))
    (method,) = [m for m in methods() if m.name == "S2D2 exact"]
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        exported = export(args.model, workdir / "model")
        with serve(args.sglang_python, exported, method, workdir, 16) as server:
            sglang, served = sglang_row(server, method, problems, 16)
    engine, decoded = engine_row(model, method, problems, 16)
    same = sum(a == b for a, b in zip(served, decoded))
    header = (f"Exact S2D2: SGLang vs the engine on {len(problems.items)} held-out problems ({args.problems} per task "
              f"family), model {args.model} (exported), block {BLOCK}, outputs identical: {same}/{len(decoded)}; "
              f"{machine()}")  # fmt: skip
    write(args.out, "check", [sglang, engine], header)


def run_head_cost(args) -> None:
    """Time one forward of ``BLOCK`` tokens with the model's own head, then with the head padded to 151,936 rows
    (what an export padded past SGLang's mask id would carry); prints both and their ratio."""
    import torch

    model = load_model(args.model, device="cpu").model
    ids = torch.randint(0, model.config.vocab_size, (1, BLOCK), generator=torch.Generator().manual_seed(0))

    def forward_seconds() -> float:
        with torch.no_grad():
            for _ in range(3):
                model(ids)
            start = time.perf_counter()
            for _ in range(20):
                model(ids)
        return (time.perf_counter() - start) / 20

    own = forward_seconds()
    model.resize_token_embeddings(151936, mean_resizing=False)
    padded = forward_seconds()
    print(f"{BLOCK}-token forward, {machine()}: own head {own * 1e3:.1f} ms, 151,936-row head {padded * 1e3:.1f} ms, "
          f"{padded / own:.1f}x")  # fmt: skip


def run_trace_cost(args) -> None:
    """What recording served traces costs: exact S2D2 at concurrency 16, a server with ``trace_dir`` beside one
    without (both up at once; an idle one sleeps), ``--repeats`` passes each, alternating, outputs compared."""
    model = load_model(args.model, device="cpu")
    problems = Problems(model, args.problems)
    (plain,) = [m for m in methods() if m.name == "S2D2 exact"]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        exported = export(args.model, workdir / "model")
        traced = Method("S2D2 exact, trace_dir", "S2D2", {**plain.settings, "trace_dir": str(workdir / "traces")},
                        plain.engine)  # fmt: skip
        with serve(args.sglang_python, exported, plain, workdir, 16) as bare, \
                serve(args.sglang_python, exported, traced, workdir, 16) as recording:  # fmt: skip
            outputs = {}
            for _ in range(args.repeats):
                for server, method in ((bare, plain), (recording, traced)):
                    row, outputs[method.name] = sglang_row(server, method, problems, 16)
                    rows.append(row)
                    print(table_markdown(rows[-1:], "").splitlines()[-1], flush=True)
        written = len(list((workdir / "traces").glob("*.json")))
    speed = {m.name: sorted(r.problems_per_second for r in rows if r.method == m.name) for m in (plain, traced)}
    median = {name: values[len(values) // 2] for name, values in speed.items()}
    cost = 1 - median[traced.name] / median[plain.name]
    header = (f"Served traces' cost: exact S2D2 at concurrency 16, {len(problems.items)} held-out problems, model "
              f"{args.model} (exported), block {BLOCK}, {args.repeats} passes each, alternating; median problems/s "
              f"{median[plain.name]:.2f} without, {median[traced.name]:.2f} with trace_dir ({cost:+.1%} cost); outputs "
              f"identical: {outputs[plain.name] == outputs[traced.name]}; traces written: {written}; {machine()}")  # fmt: skip
    write(args.out, "trace-cost", rows, header)


def write(out: Path, name: str, rows: list[Row], header: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(table_markdown(rows, header))
    data = [asdict(r) | {"problems_per_second": r.problems_per_second, "tokens_per_forward": r.tokens_per_forward,
                         "accuracy": r.accuracy, "forwards_per_problem": r.forwards_per_problem} for r in rows]  # fmt: skip
    (out / f"{name}.json").write_text(json.dumps({"header": header, "rows": data}, indent=2) + "\n")
    print(table_markdown(rows, header))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m s2d2.integrations.sglang.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("what", choices=("table", "check", "head-cost", "trace-cost"))
    parser.add_argument(
        "--model",
        default="bundled",
        help="an SDAR or LLaDA2 checkpoint load_model takes, e.g. bundled-llada2 (exported for SGLang)",
    )
    parser.add_argument("--problems", type=int, default=256, help="table: problems in all; check: per task family")
    parser.add_argument("--concurrency", default="1,4,16,64", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--repeats", type=int, default=3, help="trace-cost: passes per server")
    parser.add_argument("--sglang-python", default=str(ROOT / ".venv-sglang" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "sglang")
    args = parser.parse_args(argv)
    commands = {"table": run_table, "check": run_check, "head-cost": run_head_cost, "trace-cost": run_trace_cost}
    commands[args.what](args)


if __name__ == "__main__":
    main()
