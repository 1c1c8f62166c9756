"""Golden counts from the authors' official S2D2 code: ``accounting="official"`` must spend the same forwards.

``tests/data/official_counts.json`` was made once by ``scripts/official_counts.py`` (its ``command``), which
ran the official generation functions (SDAR, Fast-dLLM v2, LLaDA2) on this suite's tiny random checkpoints,
greedy, at prompt lengths that do and do not fill whole blocks and budgets that end mid-block. Each run's
forwards per kind (prefill, draft, verify, commit) and output ids are stored; here the engine decodes the same
prompt with the same settings under the official accounting and must match both.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from s2d2 import generate
from s2d2.batch import generate_batch
from s2d2.config import config_from_settings

DATA = json.loads((Path(__file__).parent / "data" / "official_counts.json").read_text())
KINDS = ("prefill", "draft", "verify", "commit")


def without_stops(model):
    """The loaded model with no stop tokens: the golden runs give the official code none either."""
    clone = object.__new__(type(model))
    clone.__dict__.update(model.__dict__, stop_token_ids=[])
    return clone


def checkpoint_paths(family_paths, tiny_path) -> dict[str, str]:
    return {**family_paths, "sdar": tiny_path}


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_the_suite_rebuilds_the_checkpoints_the_official_code_ran_on(family_paths, tiny_path, family):
    path = Path(checkpoint_paths(family_paths, tiny_path)[family]) / "model.safetensors"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DATA["checkpoints_sha256"][family]


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_official_accounting_matches_the_official_forwards_and_outputs(every_family, one_thread, family):
    model = without_stops(every_family[family])
    runs = [run for run in DATA["runs"] if run["family"] == family]
    assert len(runs) >= 12
    mismatches = []
    for run in runs:
        config = config_from_settings(**run["settings"], accounting="official")
        trace = generate(model, run["prompt_ids"], config)
        forwards = {kind: trace.summary.nfe_by_kind.get(kind, 0) for kind in KINDS}
        if forwards != run["forwards"] or trace.output_ids != run["output_ids"]:
            mismatches.append(
                f"{run['name']} prompt {len(run['prompt_ids'])} budget {run['settings']['max_new_tokens']}: "
                f"forwards {forwards} vs official {run['forwards']}, "
                f"{len(trace.output_ids)} vs {len(run['output_ids'])} tokens, "
                f"ids equal: {trace.output_ids == run['output_ids']}"
            )
    assert not mismatches, "\n".join(mismatches)


def test_a_batch_refuses_the_official_block_cache(family_models):
    """The block cache rewrites KV rows in place, which a batched row's cache cannot; switched off, it batches."""
    model = family_models["fast_dllm_v2"]
    config = config_from_settings(method="dynamic", block_length=8, max_new_tokens=8, accounting="official")
    prompts = [[5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="use_block_cache"):
        generate_batch(model, prompts, config)
    batched = generate_batch(model, prompts, config.replace(use_block_cache=False))
    assert [t.output_ids for t in batched] == [
        generate(model, p, config.replace(use_block_cache=False)).output_ids for p in prompts
    ]
