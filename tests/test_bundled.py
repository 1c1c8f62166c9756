"""The bundled model, its tokenizer, the task families and the training script."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from s2d2.config import DecodeConfig, preset_config
from s2d2.decode import generate
from s2d2.models import DEFAULT_MODEL, load_model
from s2d2.models.sdar import SDARModel
from s2d2.tasks import families, get_family, split_of
from s2d2.tasks.team import parse_team
from s2d2.tokenizer import chat_text
from s2d2.train import ProblemStream, TrainConfig, train

MODEL = Path(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def bundled():
    return load_model(DEFAULT_MODEL, device="cpu")


def test_tokenizer_round_trips_and_keeps_digits_apart():
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    stream = ProblemStream({"arith": 0.5, "team": 0.5}, seed=99)
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
    assert set(config["block_lengths"]) == {1, 2, 4, 8, 16}
    assert isinstance(bundled, SDARModel) and bundled.family == "sdar"
    assert (MODEL / "model.safetensors").stat().st_size <= 30 * 2**20
    assert (MODEL / "generation_config.json").exists() and (MODEL / "README.md").exists()


@pytest.mark.parametrize("family_name", ["arith", "team"])
def test_bundled_model_solves_heldout_problems_of_each_family_in_ar_mode(bundled, family_name):
    family = get_family(family_name)
    problems = family.problems("heldout", 20, seed=4242)
    solved = sum(
        family.score(p, generate(bundled, p.prompt, DecodeConfig(method="ar", max_new_tokens=64)).text)
        for p in problems
    )
    assert solved >= 18


@pytest.mark.parametrize("family_name", ["arith", "team"])
def test_parallel_commits_break_answers_and_exact_s2d2_repairs_them(bundled, family_name):
    """The demo's point on both families: aggressive threshold decoding commits digits without their context
    and fills symmetric name slots together (20/20 → 11/20 and 3/20 when this was written); S2D2 with exact
    acceptance drafts the same way and returns AR's text, after rejecting some of those drafts."""
    family = get_family(family_name)
    problems = family.problems("heldout", 20, seed=4242)
    parallel = DecodeConfig(method="dynamic", block_length=16, threshold=0.3, max_new_tokens=64)
    exact = preset_config("sdar-b", max_new_tokens=64, verify=dict(acceptance="greedy"))  # B=16
    ar = [generate(bundled, p.prompt, DecodeConfig(method="ar", max_new_tokens=64)) for p in problems]
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
    assert generate(model, "Ann has 3 pens.", DecodeConfig(method="ar", max_new_tokens=4)).summary.nfe >= 1
    train(TrainConfig(**{**cfg.__dict__, "steps": 4}), resume=True)
    resumed = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in resumed] == [1, 2, 3, 4]
