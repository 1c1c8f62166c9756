"""The lm-eval integration: ``python -m s2d2.lm_eval`` against ``s2d2.study.evaluate``, exact AR
log-likelihoods against separate forwards, and a 2-process ``accelerate launch`` against one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from two_processes import launch_two_processes

from s2d2 import DEFAULT_MODEL, config_from_settings, load_model
from s2d2.integrations.lm_eval import S2D2LM
from s2d2.integrations.lm_eval.harness import asks_only_project_tasks, with_project_tasks
from s2d2.integrations.lm_eval.model import decode_settings
from s2d2.study.evaluate import heldout_problems, run_problem, summarize_method

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 10
MODEL_ARGS = f"pretrained={DEFAULT_MODEL},preset=sdar-b,acceptance=greedy"
# The bundled model is a chat model and s2d2.study.evaluate prompts through its chat template, so the CLI is told to as well.
CLI_ARGS = ["--model", "s2d2", "--model_args", MODEL_ARGS, "--tasks", "s2d2_arith", "--limit", str(LIMIT)]
CLI_ARGS += ["--apply_chat_template", "--device", "cpu", "--log_samples"]
pytestmark = pytest.mark.usefixtures("one_thread")  # the in-process tests run tiny models
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def read_run(out: Path) -> tuple[dict, list[dict]]:
    (results_file,) = out.glob("*/results_*.json")
    (samples_file,) = out.glob("*/samples_s2d2_arith_*.jsonl")
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    return json.loads(results_file.read_text())["results"]["s2d2_arith"], sorted(samples, key=lambda s: s["doc_id"])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_eval_one")
    command = [sys.executable, "-m", "s2d2.lm_eval", *CLI_ARGS, "--output_path", str(out)]
    subprocess.run(command, check=True, env=OFFLINE, cwd=ROOT, capture_output=True, timeout=300)
    return read_run(out)


def test_cli_accuracy_and_nfe_equal_s2d2_evaluate_on_the_same_problems(one_process):
    results, samples = one_process
    model = load_model(device="cpu")
    config = config_from_settings("sdar-b", acceptance="greedy", max_new_tokens=64)
    problems = heldout_problems(LIMIT, ["arith"])
    reference = [run_problem(model, "sdar-b", config, p, i) for i, p in enumerate(problems)]
    summary = summarize_method("sdar-b", reference)
    assert results["exact_match,none"] == summary.accuracy
    assert results["s2d2_nfe,none"] == summary.nfe_per_problem
    assert results["s2d2_tpf,none"] == pytest.approx(summary.tokens_per_forward)
    assert results["s2d2_acceptance_rate,none"] == pytest.approx(summary.acceptance_rate)
    assert [s["doc"]["prompt"] for s in samples] == [p.prompt for p in problems]
    assert [s["filtered_resps"][0] for s in samples] == [r.output for r in reference]
    assert [s["s2d2_nfe"] for s in samples] == [r.nfe for r in reference]
    assert [s["exact_match"] for s in samples] == [float(r.correct) for r in reference]


def test_batched_run_gives_the_same_samples_and_metrics(one_process, tmp_path):
    """--batch_size 8: every sample's output and decode statistics equal the one-at-a-time run's."""
    command = [sys.executable, "-m", "s2d2.lm_eval", *CLI_ARGS, "--batch_size", "8", "--output_path", str(tmp_path)]
    subprocess.run(command, check=True, env=OFFLINE, cwd=ROOT, capture_output=True, timeout=300)
    (results, samples), (alone, alone_samples) = read_run(tmp_path), one_process
    assert results["exact_match,none"] == alone["exact_match,none"]
    assert results["s2d2_nfe,none"] == alone["s2d2_nfe,none"]
    assert [s["filtered_resps"] for s in samples] == [s["filtered_resps"] for s in alone_samples]
    assert [s["s2d2_nfe"] for s in samples] == [s["s2d2_nfe"] for s in alone_samples]


def test_batch_size_auto_and_bad_values():
    lm = S2D2LM(device="cpu", method="s2d2", batch_size="auto:4", max_batch_size=4)
    assert lm.batch_size == "auto"
    prompt = lm.apply_chat_template([{"role": "user", "content": heldout_problems(1, ["arith"])[0].prompt}])
    asked = [request("generate_until", (prompt, {"until": [], "max_gen_toks": 24}), i) for i in range(3)]
    batched = lm.generate_until(asked)
    assert batched == S2D2LM(device="cpu", method="s2d2").generate_until(asked)
    for bad in ("0", "many", -2):
        with pytest.raises(ValueError, match="batch_size"):
            S2D2LM(device="cpu", batch_size=bad)


def test_two_process_accelerate_run_gives_the_same_results(one_process, tmp_path):
    launch_two_processes(["s2d2.lm_eval", *CLI_ARGS, "--output_path", str(tmp_path)], OFFLINE)
    (alone, alone_samples), (sharded, sharded_samples) = one_process, read_run(tmp_path)
    for key in ("exact_match,none", "s2d2_nfe,none", "s2d2_tokens,none", "s2d2_acceptance_rate,none"):
        assert sharded[key] == alone[key], key
    assert [s["doc_id"] for s in sharded_samples] == list(range(LIMIT))
    same = ("filtered_resps", "s2d2_nfe", "exact_match")
    assert [[s[k] for k in same] for s in sharded_samples] == [[s[k] for k in same] for s in alone_samples]


def separate_forward_logprob(model, context: list[int], continuation: list[int]) -> tuple[float, bool]:
    """Σ log p(token i | everything before), one AR decoder step per token: the prefix
    prefilled causally, then a draft forward of one mask (how method="ar" predicts);
    and whether every token is that step's argmax (greedy decoding would write it)."""
    total, greedy = 0.0, True
    for i, token in enumerate(continuation):
        session = model.new_session(lambda *_: None)
        model.prefill(session, torch.tensor(context + continuation[:i]), causal=True, block_length=1)
        row = model.draft_forward(session, torch.tensor([model.mask_token_id]), None, True, 0)[0]
        total += torch.log_softmax(row.float(), dim=-1)[token].item()
        greedy &= int(row.argmax()) == token
    return total, greedy


def verifier_logprob(model, context: list[int], continuation: list[int]) -> float:
    """Σ log q(token i) over a whole continuation from one verifier forward, which is AR
    (``test_verifier_equals_sequential_block_size_one_forwards``): for long texts."""
    session = model.new_session(lambda *_: None)
    model.prefill(session, torch.tensor(context), causal=True, block_length=1)
    logits = model.verify_span(session, torch.tensor(continuation), 0, len(continuation))
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, torch.tensor(continuation)[:, None]).sum().item()


def request(kind: str, arguments: tuple, doc_id: int = 0) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=arguments, idx=0, metadata=("t", doc_id, 1))


@pytest.fixture(scope="module")
def checkpoints(family_paths, tiny_path) -> dict[str, str]:
    """A tiny random checkpoint of each family in its published layout, and the bundled model."""
    return {**family_paths, "sdar": tiny_path, "bundled": DEFAULT_MODEL}


@pytest.mark.parametrize("family", ["bundled", "sdar", "fast_dllm_v2", "llada2"])
def test_loglikelihood_is_the_sum_of_ar_logprobs_from_separate_forwards(family, checkpoints):
    lm = S2D2LM(pretrained=checkpoints[family], device="cpu")
    pairs = [
        ("Zoe has 7 books. Tom gives her 12 more. How many books does Zoe have now? ", "7 + 12 = 19."),
        ("", "The answer is 19."),
    ]
    answers = lm.loglikelihood([request("loglikelihood", pair, i) for i, pair in enumerate(pairs)])
    for pair, (logprob, greedy) in zip(pairs, answers):
        context, continuation = lm._encode_request(*pair)
        expected, expected_greedy = separate_forward_logprob(lm.model, context, continuation)
        assert logprob == pytest.approx(expected, abs=1e-4)
        assert greedy is expected_greedy
    (rolling,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", ("The answer is 19.",))])
    assert rolling == pytest.approx(answers[1][0], abs=1e-4)
    assert [s["nfe"] for s in lm.decode_stats[("t", 0)]] == [1, 1]  # one forward per request


def test_rolling_windows_cover_a_text_longer_than_the_model(tiny_path):
    lm = S2D2LM(pretrained=tiny_path, device="cpu")
    text = " ".join(["Ann has 3 pens."] * 200)
    ids = lm.tok_encode(text)
    assert len(ids) > lm.max_length
    (rolling,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", (text,))])
    stats = lm.decode_stats[("t", 0)]
    assert len(stats) == -(-len(ids) // (lm.max_length - 1))
    windows = get_rolling_token_windows(ids, lm.prefix_token_id, max_seq_len=lm.max_length - 1, context_len=1)
    expected = sum(verifier_logprob(lm.model, *make_disjoint_window(window)) for window in windows)
    assert rolling == pytest.approx(expected, abs=1e-3)


def test_only_runs_of_the_project_tasks_skip_indexing_lm_evals_own():
    assert asks_only_project_tasks(with_project_tasks(["--tasks", "s2d2_arith,s2d2_team", "--limit", "3"]))
    assert asks_only_project_tasks(with_project_tasks(["--tasks=s2d2_team"]))
    assert not asks_only_project_tasks(with_project_tasks(["--tasks", "s2d2_arith,hellaswag"]))
    assert not asks_only_project_tasks(["--tasks", "s2d2_arith", "--include_path", "/elsewhere"])
    assert not asks_only_project_tasks(with_project_tasks(["--model", "s2d2"]))


def test_model_args_are_typed_by_the_config_fields():
    settings = decode_settings(
        {"block_length": "16", "threshold": 1, "cache_ver": "true", "acceptance": "greedy", "steps": "none"}, "args"
    )
    assert settings == {"block_length": 16, "threshold": 1.0, "cache_ver": True, "acceptance": "greedy", "steps": None}
    assert config_from_settings("sdar-b", **settings).verify.acceptance == "greedy"
    with pytest.raises(ValueError, match="unknown model_args 'blok_length'"):
        decode_settings({"blok_length": 4}, "model_args")
    with pytest.raises(ValueError, match="block_length must be int, got 'four'"):
        decode_settings({"block_length": "four"}, "model_args")


def test_generation_honours_until_and_max_gen_toks():
    lm = S2D2LM(device="cpu", method="ar")
    prompt = lm.apply_chat_template([{"role": "user", "content": heldout_problems(1, ["arith"])[0].prompt}])
    full, cut, short = lm.generate_until(
        [
            request("generate_until", (prompt, {"until": [], "max_gen_toks": 64}), 0),
            request("generate_until", (prompt, {"until": [" = "], "max_gen_toks": 64}), 1),
            request("generate_until", (prompt, {"until": [], "max_gen_toks": 3, "do_sample": False}), 2),
        ]
    )
    assert " = " in full and cut == full.split(" = ")[0]
    assert [s["generated_tokens"] for s in lm.decode_stats[("t", 2)]] == [3]
    assert full.startswith(short)
