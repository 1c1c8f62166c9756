"""The Fast-dLLM v2 and LLaDA2.x training objectives (s2d2/training/objectives.py) and the checkpoints they write.

Tiny sizes and a few steps only: what is checked is that each objective asks the
model the question its family's decoder asks (masks, token shift, editing
targets), that a few steps lower the loss, and that ``python -m s2d2.training.train
--family ...`` writes a checkpoint ``load_model`` reads as that family and the
engine decodes (exact S2D2 returns AR's output).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
import torch
from helpers import exact_greedy_s2d2
from safetensors.torch import load_file

from s2d2 import masks
from s2d2.config import DecodeConfig
from s2d2.decode import generate
from s2d2.models import DEFAULT_MODEL, load_model
from s2d2.models.fastdllm import FastDLLMModel
from s2d2.models.llada2 import LLaDA2Model
from s2d2.training import objectives
from s2d2.training.objectives import IGNORE
from s2d2.training.train import (
    BUDGET_PROBE,
    ProblemStream,
    StepBatches,
    TrainConfig,
    batch_source,
    budgeted_steps,
    checkpoint_config,
    encode_batch,
    new_model,
    ordinary_token_ids,
    parse_args,
    save_checkpoint,
    train,
)

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = TrainConfig(
    hidden_size=32, layers=2, heads=2, kv_heads=1, intermediate_size=64, expert_size=16, max_positions=512,
    batch_size=4, eval_every=0, device="cpu", tokenizer_from=DEFAULT_MODEL, bd_size=8,
    block_lengths=(1, 4, 8), block_weights=(0.3, 0.3, 0.4), family_weights={"arith": 0.5, "team": 0.5},
)  # fmt: skip
B = 8


@pytest.fixture(scope="module")
def bundled_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def encoded(bundled_tokenizer):
    texts = [next(ProblemStream({"arith": 0.5, "team": 0.5}, seed=7)) for _ in range(6)]
    eos = bundled_tokenizer.eos_token_id
    return encode_batch(texts, bundled_tokenizer, 16, eos)


def test_complementary_masks_cover_every_answer_token_exactly_once(encoded):
    clean, answer = encoded
    masked = objectives.complementary_masks(answer, B, torch.Generator().manual_seed(0))
    first, second = masked[: len(clean)], masked[len(clean) :]
    assert torch.equal(first | second, answer) and not (first & second).any()
    assert 0 < first.sum() < answer.sum()  # a real split, not all on one side


def test_fast_dllm_targets_are_shifted_by_one_inside_blocks(encoded, bundled_tokenizer):
    clean, answer = encoded
    rows, length = clean.shape
    mask_id = bundled_tokenizer.mask_token_id
    for causal_context in (False, True):
        batch = objectives.fast_dllm_batch(clean, answer, B, mask_id, torch.Generator().manual_seed(1), causal_context)
        both = torch.cat([clean, clean])
        noisy, noisy_targets = batch.ids[:, :length], batch.targets[:, :length]
        assert torch.equal(noisy == mask_id, batch.masked)
        # Noisy row i is the target of token i + 1 exactly when that token is masked and not a block's first.
        for r in range(2 * rows):
            for i in range(length - 1):
                wanted = batch.masked[r, i + 1] and (i + 1) % B != 0
                assert (noisy_targets[r, i] != IGNORE) == wanted
                if wanted:
                    assert noisy_targets[r, i] == both[r, i + 1]
            assert noisy_targets[r, length - 1] == IGNORE
        # The clean copy: next-token targets (the AR loss) when causal, else only each block's first token.
        context = batch.targets[:, length:]
        assert (context[rows:] == IGNORE).all()  # the complementary view repeats the clean copy: counted once
        for i in range(length - 1):
            wanted = answer[:, i + 1] & (torch.tensor(causal_context) | ((i + 1) % B == 0))
            assert torch.equal(context[:rows, i] != IGNORE, wanted)
            assert torch.equal(context[:rows, i][wanted], clean[:, i + 1][wanted])
        # Every answer token masked in a view is trained somewhere in that pair: inside its block, or from the
        # clean row before a block start.
        trained = torch.zeros_like(batch.masked)
        trained[:, 1:] = noisy_targets[:, :-1] != IGNORE
        starts = (torch.arange(length) % B == 0) & answer.any(0)
        assert (trained | (batch.masked & starts)).sum() == batch.masked.sum()


def test_fast_dllm_attention_is_causal_across_blocks_and_bidirectional_inside():
    n = 12
    block = torch.arange(n) // 4
    for causal_context in (False, True):
        allowed = objectives.fast_dllm_attention(n, 4, causal_context)
        noisy_noisy, noisy_clean, clean_noisy = allowed[:n, :n], allowed[:n, n:], allowed[n:, :n]
        assert torch.equal(noisy_noisy, block[:, None] == block[None, :])  # bidirectional, own block only
        assert torch.equal(noisy_clean, block[None, :] < block[:, None])  # earlier blocks' clean tokens
        assert not clean_noisy.any()
        expected = masks.causal(n) if causal_context else block[None, :] <= block[:, None]
        assert torch.equal(allowed[n:, n:], expected)


def test_llada2_editing_corrupts_visible_tokens_and_asks_for_the_originals(encoded, bundled_tokenizer):
    clean, answer = encoded
    rows, length = clean.shape
    mask_id = bundled_tokenizer.mask_token_id
    ordinary = ordinary_token_ids(bundled_tokenizer)
    batch = objectives.llada2_batch(clean, answer, 4, mask_id, torch.Generator().manual_seed(2), 0.3, ordinary)
    both, both_answer = torch.cat([clean, clean]), torch.cat([answer, answer])
    noisy, targets = batch.ids[:, :length], batch.targets[:, :length]
    corrupted = batch.corrupted
    assert corrupted.sum() > 10
    assert not (corrupted & batch.masked).any() and not (corrupted & ~both_answer).any()  # visible answer tokens
    assert (noisy[corrupted] != both[corrupted]).all() and (noisy[corrupted] != mask_id).all()
    assert torch.isin(noisy[corrupted], ordinary).all()  # never a special token
    kept = both_answer & ~batch.masked & ~corrupted
    assert torch.equal(noisy[kept], both[kept]) and torch.equal(noisy[~both_answer], both[~both_answer])
    # Position-aligned targets: every answer position (masked, corrupted or kept) asks for its original token.
    assert torch.equal(targets[both_answer], both[both_answer]) and (targets[~both_answer] == IGNORE).all()
    assert (batch.targets[:, length:] == IGNORE).all() and torch.equal(batch.ids[:, length:], both)
    assert torch.equal(batch.allowed, masks.training_mask(length, 4))


@pytest.mark.parametrize(
    "family, objective", [("fastdllm", "causal"), ("fastdllm", "diffusion"), ("llada2", "diffusion")]
)
def test_a_few_steps_lower_the_loss_on_a_fixed_batch(family, objective, encoded, bundled_tokenizer):
    from s2d2.training.train import family_batch

    cfg = replace(TINY, family=family, objective=objective)
    torch.manual_seed(0)
    model = new_model(cfg, checkpoint_config(cfg, bundled_tokenizer))
    texts = [next(ProblemStream({"arith": 1.0}, seed=3)) for _ in range(4)]
    ids = {"mask": bundled_tokenizer.mask_token_id, "eos": bundled_tokenizer.eos_token_id}
    ids["ordinary"] = ordinary_token_ids(bundled_tokenizer)
    batch = family_batch(cfg, texts, bundled_tokenizer, B, ids, torch.Generator().manual_seed(4), True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(12):
        loss = objectives.family_loss(model, batch, "cpu")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("family", ["fastdllm", "llada2"])
def test_saved_weights_are_what_the_family_adapter_loads(family, tmp_path, bundled_tokenizer):
    """The layout round trip is exact: the stock network that trained and the one load_model builds agree."""
    cfg = replace(TINY, family=family)
    config = checkpoint_config(cfg, bundled_tokenizer)
    torch.manual_seed(1)
    model = new_model(cfg, config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.15)
    save_checkpoint(model, bundled_tokenizer, config, cfg, tmp_path)
    loaded = load_model(str(tmp_path), device="cpu")
    ids = torch.tensor([bundled_tokenizer("<|user|>What is 3 + 4?<|assistant|>")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, loaded.model(input_ids=ids).logits, atol=1e-5)
    if family == "llada2":
        names = load_file(tmp_path / "model.safetensors")
        assert "model.layers.1.attention.query_key_value.weight" in names
        assert "model.layers.1.mlp.experts.0.gate_proj.weight" in names and "model.word_embeddings.weight" in names


@pytest.mark.parametrize("family", ["fastdllm", "llada2"])
def test_full_size_models_fit_the_30_mb_budget(family, bundled_tokenizer):
    cfg = TrainConfig(family=family, max_positions=512)
    model = new_model(cfg, checkpoint_config(cfg, bundled_tokenizer))
    assert sum(p.numel() for p in model.parameters()) * 4 <= 30 * 2**20


STEPS = 120


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each family trained for a few steps by the training entry point, as the scripts run it."""
    root = tmp_path_factory.mktemp("families")
    # 120 steps: enough for outputs of several tokens (after 30, every model stops at once; nothing to compare).
    steps = {"steps": STEPS, "lr": 1e-2, "warmup": 3, "checkpoint_every": STEPS}
    stage1 = train(replace(TINY, family="fastdllm", objective="causal", out=str(root / "ar"), **steps))
    fast = train(replace(TINY, family="fastdllm", init_from=str(stage1), out=str(root / "fast"), **steps))
    llada2_cfg = replace(TINY, family="llada2", out=str(root / "llada2"), **steps)
    llada2 = train(llada2_cfg)
    return {"fastdllm": fast, "llada2": llada2, "ar": stage1, "llada2_cfg": llada2_cfg}


@pytest.mark.parametrize("family, adapter", [("fastdllm", FastDLLMModel), ("llada2", LLaDA2Model)])
def test_trained_checkpoints_load_as_their_family_and_exact_s2d2_returns_ar(family, adapter, trained):
    model = load_model(str(trained[family]), device="cpu")
    assert isinstance(model, adapter)
    config = json.loads((trained[family] / "config.json").read_text())
    assert "auto_map" not in config and "mask_token_id" not in config
    assert model.mask_token_id == model.tokenizer.mask_token_id
    assert model.tokenizer.eos_token_id in model.stop_token_ids
    model.stop_token_ids = []  # a tiny model may stop at once: compare the whole budget instead
    exact = exact_greedy_s2d2(block_length=8, sub_block_length=4 if family == "fastdllm" else None, max_new_tokens=24)
    for prompt in ("Ann has 3 pens and buys 4 more. How many pens?", "What is 12 + 7?", "Pick 2 of Bo, Al, Cy."):
        ar = generate(model, prompt, DecodeConfig(method="ar", max_new_tokens=24))
        assert len(ar.output_ids) == 24
        assert generate(model, prompt, exact).output_ids == ar.output_ids


def read_log(checkpoint) -> list[dict]:
    return [json.loads(line) for line in (checkpoint.parent / "train_log.jsonl").read_text().splitlines()]


def test_stage_one_learns_and_a_family_run_resumes(trained):
    stage1 = read_log(trained["ar"])
    assert stage1[-1]["loss"] < stage1[0]["loss"]
    assert [e["step"] for e in read_log(trained["fastdllm"])] == list(range(1, STEPS + 1))
    train(replace(trained["llada2_cfg"], steps=STEPS + 2), resume=True)
    assert [e["step"] for e in read_log(trained["llada2"])] == list(range(1, STEPS + 3))
    assert isinstance(load_model(str(trained["llada2"]), device="cpu"), LLaDA2Model)


def test_family_flags_parse_and_sdar_stays_the_default():
    cfg, _ = parse_args([])
    assert cfg.family == "sdar" and cfg.objective == "diffusion" and cfg.tokenizer_from == ""
    cfg, resume = parse_args(["--family", "llada2", "--edit-rate", "0.2", "--resume"])
    assert cfg.family == "llada2" and cfg.edit_rate == 0.2 and resume
    with pytest.raises(SystemExit):
        parse_args(["--family", "mystery"])
    with pytest.raises(SystemExit):
        parse_args(["--family", "llada2", "--objective", "causal"])


@pytest.mark.parametrize("family", ["sdar", "fastdllm", "llada2"])
def test_step_batches_depend_on_seed_and_step_only_whatever_builds_them(family, bundled_tokenizer):
    """``--loader-workers``: step i's batch is the same drawn in this process, twice, or by two workers."""
    cfg = replace(TINY, family=family, loader_workers=2)
    ids = {"mask": bundled_tokenizer.mask_token_id, "eos": bundled_tokenizer.eos_token_id,
           "ordinary": ordinary_token_ids(bundled_tokenizer)}  # fmt: skip

    def tensors(batch):
        return list(batch) if isinstance(batch, (tuple, list)) else [batch.ids, batch.targets, batch.allowed]

    here = StepBatches(cfg, bundled_tokenizer, ids, 5, 9)
    drawn = [here[i] for i in range(4)]
    again = StepBatches(cfg, bundled_tokenizer, ids, 5, 9)[2]
    assert again[0] == drawn[2][0] and all(torch.equal(a, b) for a, b in zip(tensors(again[1]), tensors(drawn[2][1])))
    assert not torch.equal(tensors(drawn[0][1])[0], tensors(drawn[1][1])[0])
    workers = batch_source(cfg, bundled_tokenizer, ids, (), 5, 9)
    for block_length, batch in drawn:
        got_length, got = workers()
        assert got_length == block_length
        assert all(torch.equal(a, b) for a, b in zip(tensors(got), tensors(batch)))


def test_time_budget_fixes_the_step_count_from_the_measured_speed():
    cfg = replace(TINY, steps=100_000, time_budget=100.0)
    # 10 s spent, 0.07 s a step: 93% of the 90 s left is 1195.7 more steps.
    assert budgeted_steps(cfg, 100, 10.0, 0.07) == 100 + 1195
    assert budgeted_steps(replace(cfg, steps=500), 100, 10.0, 0.05) == 500  # never more than --steps
    assert budgeted_steps(cfg, 100, 120.0, 0.05) == 100  # already over: stop here


def test_a_budgeted_run_fixes_its_steps_and_stops_at_the_budget_by_its_clock(tmp_path):
    """A clock that reads one second a step through the probe, then ten: the run plans
    100 + int(0.93 × 30 s / 1 s) = 127 steps, and the budget stops it at step 103 (130 s)."""
    readings = itertools.chain(range(BUDGET_PROBE[1] + 1), itertools.count(BUDGET_PROBE[1] + 10, 10))
    cfg = replace(TINY, out=str(tmp_path), steps=100_000, time_budget=130.0, checkpoint_every=1000, loader_workers=1)
    train(cfg, clock=lambda: float(next(readings)))
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["steps_fixed"] for e in log if "steps_fixed" in e] == [127]
    assert [e["step"] for e in log if e.get("stopped_by_budget")] == [103] and log[-1]["step"] == 103
    saved = json.loads((tmp_path / "checkpoint" / "train_config.json").read_text())
    assert saved["steps"] == 127
