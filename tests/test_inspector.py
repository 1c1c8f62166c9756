"""The recorded decision (trace_top_k) on real forwards of a tiny checkpoint, the CLI's --inspect,
and the dashboard's inspector panel as a pure function of a trace."""

from __future__ import annotations

import math

import pytest
import torch

from s2d2.__main__ import main
from s2d2.config import config_from_settings, preset_config
from s2d2.decisions import decisions_at, describe_position, has_detail
from s2d2.decode import generate
from s2d2.likelihood import ar_logprobs
from s2d2.trace import ACCEPTED, KEPT, RATIO, RESAMPLED, THRESHOLD, Trace

PROMPT = "Ann has 3 pens."


def stochastic_exact(**overrides):
    """Sampled drafts, stochastic acceptance, causal cache: every verified q is the model's AR distribution."""
    settings = dict(acceptance="stochastic", temperature=1.0, max_new_tokens=32, seed=3) | overrides
    return config_from_settings("exact", **settings)


@pytest.fixture(scope="module")
def stochastic_run(tiny_model, one_thread):
    return generate(tiny_model, PROMPT, stochastic_exact())


def verifier_distribution(model, trace: Trace, position: int) -> torch.Tensor:
    """``q`` at generated ``position`` from a separate verifier forward over prompt + output before it."""
    context = trace.prompt_ids + trace.output_ids[:position]
    session = model.new_session(lambda *a: None)
    ids = torch.tensor(context + [trace.output_ids[position]], device=model.device)
    with torch.inference_mode():
        logits = model.verify_span(session, ids, len(context), 1)
    return torch.softmax(logits.float(), dim=-1)[0]


def decided_positions(trace: Trace):
    """Every verified position the acceptance test decided: the span up to and including its first rejection."""
    for step in trace.steps:
        if step.accepted is None:
            continue
        for p in step.positions:
            if p.q is not None and p.position - step.block_start <= step.route.span_start + step.accepted:
                yield step, p


def test_recorded_q_top_k_is_a_separate_verifier_forwards_top_k(tiny_model, stochastic_run):
    """At a span's first position the verifier conditions on committed tokens only: prompt + output before it."""
    checked = 0
    for step in stochastic_run.steps:
        if step.accepted is None:
            continue
        first = next(p for p in step.positions if p.position - step.block_start == step.route.span_start)
        if first.position >= len(stochastic_run.output_ids):
            continue
        q = verifier_distribution(tiny_model, stochastic_run, first.position)
        top = torch.topk(q, len(first.q_top))
        assert [t for t, _ in first.q_top] == top.indices.tolist()
        assert [v for _, v in first.q_top] == pytest.approx(top.values.tolist(), abs=1e-5)
        scored = ar_logprobs(tiny_model, stochastic_run.prompt_ids + stochastic_run.output_ids[: first.position],
                             [first.q_top[0][0]])  # fmt: skip
        assert math.exp(scored.logprob) == pytest.approx(first.q_top[0][1], abs=1e-5)
        checked += 1
    assert checked >= 3


def test_residual_top_k_is_a_distribution_over_tokens_where_q_exceeds_p(tiny_model, stochastic_run):
    rejected = [p for _, p in decided_positions(stochastic_run) if p.outcome == RESAMPLED]
    assert rejected, "the tiny random model's drafts are rejected often"
    for p in rejected:
        assert p.residual_top, f"position {p.position}: no residual recorded"
        assert sum(v for _, v in p.residual_top) <= 1 + 1e-6
        assert all(v > 0 for _, v in p.residual_top)
        assert p.token not in {t for t, _ in p.residual_top}, "a rejected draft has q < p: no residual mass"
        # The accepted prefix is committed, so q here is the AR distribution after the output so far.
        q = verifier_distribution(tiny_model, stochastic_run, p.position)
        drafter = dict(p.p_top)
        for token, share in p.residual_top:
            assert q[token].item() >= share * p.residual_mass - 1e-5, "(q − p)+ ≤ q"
            if token in drafter:
                assert q[token].item() > drafter[token]
                assert share * p.residual_mass == pytest.approx(q[token].item() - drafter[token], abs=1e-4)


def test_u_and_the_acceptance_probability_reproduce_every_outcome(stochastic_run):
    decided = list(decided_positions(stochastic_run))
    assert len(decided) >= 10
    for step, p in decided:
        assert p.u is not None and 0 <= p.u < 1
        assert p.accept_probability == pytest.approx(min(1.0, p.q / p.p), rel=1e-4)
        if p.u < p.accept_probability:
            assert p.outcome == ACCEPTED, (step.block, step.step, p)
        else:
            assert p.outcome in (RESAMPLED, KEPT, RATIO), (step.block, step.step, p)
    assert {p.outcome for _, p in decided} >= {ACCEPTED, RESAMPLED}


def test_greedy_records_the_verifiers_argmax_as_the_correction(tiny_model, one_thread):
    trace = generate(tiny_model, PROMPT, config_from_settings("exact", max_new_tokens=24))
    rejected = [p for _, p in decided_positions(trace) if p.outcome == RESAMPLED]
    assert rejected
    for p in rejected:
        assert p.q_top[0][0] == p.committed != p.token and p.u is None
    text = describe_position(trace, rejected[0].position)
    assert "greedy: the verifier's argmax" in text and "≠ draft" in text and "rejected" in text


def test_baselines_record_p_top_k_and_the_rule_threshold(tiny_model, one_thread):
    config = config_from_settings(method="dynamic", block_length=8, threshold=0.05, max_new_tokens=16, trace_top_k=3)
    trace = generate(tiny_model, PROMPT, config)
    for step in trace.steps:
        assert step.rule["rule"] == "dynamic" and step.rule["threshold"] == 0.05 and step.rule["minimum"] >= 1
        for p in step.positions:
            assert len(p.p_top) == 3 and p.p_top[0][1] >= p.p >= 0 and p.q_top is None
            if p.outcome == THRESHOLD and p.p <= 0.05:
                # Below τ: committed only as the most confident of too few.
                assert p.p == max(o.p for o in step.positions)
    committed = next(p for s in trace.steps for p in s.committed)
    assert "τ = 0.05" in describe_position(trace, committed.position)


def test_recording_off_changes_nothing_but_the_detail(tiny_model, one_thread):
    on = generate(tiny_model, PROMPT, stochastic_exact(max_new_tokens=16))
    off = generate(tiny_model, PROMPT, stochastic_exact(max_new_tokens=16, trace_top_k=0))
    assert on.output_ids == off.output_ids and on.summary.nfe == off.summary.nfe
    assert has_detail(on) and not has_detail(off)
    assert all(p.p_top is None and p.q_top is None for s in off.steps for p in s.positions)
    assert "trace_top_k = 0" in describe_position(off, 0)


def test_a_version_3_trace_still_loads_and_says_the_detail_is_missing(stochastic_run):
    data = stochastic_run.to_dict()
    fields = ("p_top", "q_top", "residual_top", "u", "accept_probability")
    for step in data["steps"]:
        step.pop("rule")
        for p in step["positions"]:
            for name in fields:
                p.pop(name)
    old = Trace.from_dict({**data, "schema_version": 3})
    assert old.schema_version == 3 and not has_detail(old)
    assert old.output_ids == stochastic_run.output_ids
    assert "schema version 3" in describe_position(old, 0)


def test_cli_inspect_prints_every_step_that_touched_the_position(tiny_path, tiny_model, capsys):
    args = ["generate", "--model", tiny_path, "--prompt", PROMPT, "--device", "cpu", "--preset", "exact"]
    assert main([*args, "--max-new-tokens", "12", "--inspect", "2"]) == 0
    out = capsys.readouterr().out
    assert "position 2:" in out and "q top-k:" in out and "p top-k:" in out
    touched = decisions_at(generate(tiny_model, PROMPT, preset_config("exact", max_new_tokens=12)), 2)
    assert out.count("\nstep ") == len(touched) >= 1
    assert main([*args, "--max-new-tokens", "4", "--inspect", "99"]) == 0
    assert "no step drafted it" in capsys.readouterr().out


def test_decisions_at_lists_each_step_once(stochastic_run):
    for position in range(len(stochastic_run.output_ids)):
        found = decisions_at(stochastic_run, position)
        assert [d.index for d in found] == sorted({d.index for d in found})
        assert sum(d.record.outcome is not None for d in found) == 1


def test_cli_serve_trace_reads_a_written_trace_as_generate_printed_it(tiny_path, tmp_path, capsys):
    """``s2d2 serve-trace`` (a served request's trajectory, in the trace schema) prints the report ``generate``
    printed for the same run; a missing trace, or a directory without ``--request``, is one line and status 2."""
    trace = tmp_path / "3fa1c4.json"
    args = ["--forward-stats", "--inspect", "2"]
    assert main(["generate", "--model", tiny_path, "--prompt", PROMPT, "--device", "cpu", "--preset", "exact",
                 "--max-new-tokens", "12", "--trace-out", str(trace), *args]) == 0  # fmt: skip
    printed = capsys.readouterr().out.split("\n", 1)[1]  # the text's first line aside (it may be empty)
    assert main(["serve-trace", str(tmp_path), "--request", "3fa1c4", *args]) == 0
    assert capsys.readouterr().out.split("\n", 1)[1] == printed
    assert main(["serve-trace", str(tmp_path)]) == 2
    assert "is a directory: name the request with --request ID" in capsys.readouterr().err
    assert main(["serve-trace", str(tmp_path), "--request", "gone"]) == 2
    assert capsys.readouterr().err.startswith(f"error: no trace at {tmp_path / 'gone.json'}")
