"""The bundled model, its tokenizer, the task families and the training script."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from s2d2.config import DecodeConfig, preset_config
from s2d2.batch import generate_batch
from s2d2.decode import generate
from s2d2.models import DEFAULT_MODEL, load_model
from s2d2.models.sdar import SDARModel
from s2d2.study.tasks import families, get_family, split_of
from s2d2.study.tasks.team import parse_team
from s2d2.training.tokenizer import chat_text
from s2d2.training.train import ProblemStream, TrainConfig, train

MODEL = Path(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def bundled():
    return load_model(DEFAULT_MODEL, device="cpu")


def test_tokenizer_round_trips_and_keeps_digits_apart():
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    stream = ProblemStream({"arith": 0.3, "team": 0.3, "chains": 0.4}, seed=99)
    for _ in range(300):
        text = chat_text(*next(stream))
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    pieces = tokenizer.convert_ids_to_tokens(tokenizer("17 + 285 = 302.")["input_ids"])
    assert [p.strip("▁") for p in pieces if p.strip("▁").isdigit()] == list("17285302")
    free = "Tell me, dear: what's 3*4? ~{ok}"
    assert tokenizer.decode(tokenizer(free)["input_ids"]) == free
    for token in ("<|mask|>", "<|endoftext|>", "<|pad|>", "<|user|>", "<|assistant|>"):
        assert token in tokenizer.get_vocab()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|user|>Hi<|assistant|>"


def test_bundled_model_is_an_sdar_checkpoint_loaded_offline(bundled):
    config = json.loads((MODEL / "config.json").read_text())
    assert config["model_type"] == "sdar" and config["architectures"] == ["SDARForCausalLM"]
    assert config["mask_token_id"] == bundled.mask_token_id
    assert set(config["block_lengths"]) == {1, 2, 4, 8, 16, 32} and config["max_position_embeddings"] == 512
    assert isinstance(bundled, SDARModel) and bundled.family == "sdar"
    assert (MODEL / "model.safetensors").stat().st_size <= 30 * 2**20
    assert (MODEL / "generation_config.json").exists() and (MODEL / "README.md").exists()


BUDGET = 160  # the longest chains answer is under 120 tokens


@pytest.fixture(scope="module")
def ar_runs(bundled):
    """``family -> [(problem, AR trace)]`` over 20 held-out problems (seed 4242), each decoded once for the
    module: the accuracy floor and the exactness tests read the same AR answers."""
    runs = {}

    def of(family_name: str) -> list:
        if family_name not in runs:
            problems = get_family(family_name).problems("heldout", 20, seed=4242)
            ar = DecodeConfig(method="ar", max_new_tokens=BUDGET)
            # Batched (tests/test_batch.py: a batch row decodes as alone), so the module pays one AR pass.
            runs[family_name] = list(zip(problems, generate_batch(bundled, [p.prompt for p in problems], ar)))
        return runs[family_name]

    return of


@pytest.mark.parametrize("family_name", ["arith", "team", "chains"])
def test_bundled_model_solves_heldout_problems_of_each_family_in_ar_mode(ar_runs, family_name):
    family = get_family(family_name)
    assert sum(family.score(p, run.text) for p, run in ar_runs(family_name)) >= 18


def test_exact_s2d2_writes_ar_output_on_long_chains_answers(bundled, ar_runs):
    """On answers of 6–8 worked lines, 4–8 blocks of 16, exact S2D2 writes AR's tokens block after block."""
    exact = preset_config("exact", block_length=16, steps=16, max_new_tokens=BUDGET)
    for p, ar in ar_runs("chains"):  # all 20 decoded problems
        assert generate(bundled, p.prompt, exact).output_ids == ar.output_ids


@pytest.mark.parametrize("family_name, block_length", [("team", 16), ("chains", 32)])
def test_parallel_commits_break_answers_and_exact_s2d2_repairs_them(bundled, ar_runs, family_name, block_length):
    """The demo's point: aggressive threshold decoding fills symmetric name slots together and commits a
    line's total before the line that carries it; S2D2 with exact acceptance drafts the same way and returns
    AR's text, after rejecting some of those drafts. Version 3 solves arith, and chains at B = 16, even at
    τ = 0.3 (20/20 each); chains break at B = 32 (2/20), team picks at B = 16 (3/20)."""
    family = get_family(family_name)
    problems, ar = zip(*ar_runs(family_name))
    parallel = DecodeConfig(method="dynamic", block_length=block_length, threshold=0.3, max_new_tokens=BUDGET)
    exact = preset_config("exact", block_length=block_length, steps=block_length, max_new_tokens=BUDGET)
    broken = [generate(bundled, p.prompt, parallel) for p in problems]
    repaired = [generate(bundled, p.prompt, exact) for p in problems]
    solved = {
        name: sum(family.score(p, r.text) for p, r in zip(problems, runs))
        for name, runs in (("ar", ar), ("parallel", broken))
    }
    assert solved["parallel"] <= solved["ar"] - 4, solved
    assert [r.output_ids for r in repaired] == [r.output_ids for r in ar]
    assert sum(r.summary.rejections for r in repaired) >= 4


def test_task_splits_are_disjoint_and_scorers_are_exact():
    for family in families().values():
        train_keys = {p.key for p in family.problems("train", 1500, seed=1)}
        heldout_keys = {p.key for p in family.problems("heldout", 300, seed=1)}
        assert not train_keys & heldout_keys
        assert all(split_of(k) == "heldout" for k in heldout_keys)
        for p in family.problems("heldout", 20, seed=2):
            assert family.score(p, p.reference)
            assert not family.score(p, "I do not know.")
    arith = get_family("arith").problems("heldout", 1, seed=3)[0]
    wrong = arith.reference.replace(f"is {arith.meta['answer']}.", f"is {arith.meta['answer'] + 1}.")
    assert not get_family("arith").score(arith, wrong)
    team = get_family("team").problems("heldout", 1, seed=3)[0]
    first, *_ = team.meta["candidates"]
    repeated = f"The team is {' and '.join([first] * team.meta['picks'])}. Go {first}!"
    assert parse_team(repeated) is not None and not get_family("team").score(team, repeated)


def test_chains_answers_are_long_worked_lines_each_carrying_the_previous_total():
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    chains = get_family("chains")
    problems = chains.problems("heldout", 200, seed=5)
    lengths = [len(tokenizer(p.reference)["input_ids"]) for p in problems]
    assert min(lengths) >= 60 and max(lengths) <= 150 and sorted(lengths)[len(lengths) // 2] >= 80
    assert all(6 <= p.meta["steps"] <= 8 for p in problems)
    for p in problems[:50]:
        *lines, last = p.reference.split(". ")
        assert last == f"The answer is {p.meta['answer']}." and len(lines) == p.meta["steps"]
        total = int(p.prompt.split(" has ")[1].split(" ")[0])
        for k, line in enumerate(lines, 1):  # each line works one step on the total the line before it computed
            label, _, equation = line.partition(": ")
            before, _, after = equation.partition(" = ")
            assert label == f"Step {k}" and int(before.split(" ")[0]) == total
            total = int(after.rstrip("."))
            assert total == eval(before)
        assert total == p.meta["answer"]
    wrong = problems[0].reference.replace(f"is {problems[0].meta['answer']}.", f"is {problems[0].meta['answer'] + 1}.")
    assert not chains.score(problems[0], wrong)
    arith = get_family("arith").problems("heldout", 50, seed=5)
    assert not {p.key for p in arith} & {p.key for p in problems}


def test_training_batches_fill_whole_blocks_of_every_trained_length(tokenizer):
    import torch

    from s2d2.training.train import make_batch

    texts = [next(ProblemStream({"chains": 1.0}, seed=1)) for _ in range(3)]
    for block_length in (1, 16, 32):
        ids, targets, noise = make_batch(texts, tokenizer, block_length, 2, 1, torch.Generator().manual_seed(0))
        assert targets.shape[1] % max(16, block_length) == 0 and ids.shape[1] == 2 * targets.shape[1]


def test_a_few_training_steps_run_and_resume(tmp_path):
    cfg = TrainConfig(
        out=str(tmp_path),
        steps=3,
        batch_size=4,
        hidden_size=32,
        layers=1,
        heads=2,
        kv_heads=1,
        intermediate_size=64,
        tokenizer_corpus=300,
        checkpoint_every=2,
        eval_every=0,
        device="cpu",
    )
    checkpoint = train(cfg)
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3]
    assert all(math.isfinite(e["loss"]) for e in log)
    model = load_model(str(checkpoint), device="cpu")
    run = generate(model, "Ann has 3 pens.", DecodeConfig(method="ar", max_new_tokens=4))
    assert run.stop_reason == "stop_token" or len(run.output_ids) == 4
    assert run.summary.nfe == 1 + len(run.output_ids)  # the prompt's prefill, then one forward a token
    train(TrainConfig(**{**cfg.__dict__, "steps": 4}), resume=True)
    resumed = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in resumed] == [1, 2, 3, 4]
