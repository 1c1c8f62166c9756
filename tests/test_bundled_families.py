"""The bundled Fast-dLLM v2 and LLaDA2.x models: catalog ids, layouts, what they solve, exactness, editing.

Each is loaded by its public id, as the CLI, the benchmark, the dashboard and the API load it, and
decoded with real forwards: the properties checked are the ones the benchmark tables rest on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.runner import model_ids, model_source
from components.ui import model_choices
from s2d2.config import DecodeConfig, preset_config
from s2d2.batch import generate_batch
from s2d2.decode import generate
from s2d2.models import BUNDLED_MODELS, ModelLoadError, load_model
from s2d2.models.fastdllm import FastDLLMModel
from s2d2.models.llada2 import LLaDA2Model
from s2d2.study.tasks import get_family

pytestmark = pytest.mark.usefixtures("one_thread")

BUDGET = 160
FAMILIES = {"bundled-fast-dllm-v2": (FastDLLMModel, "Fast_dLLM_Qwen"), "bundled-llada2": (LLaDA2Model, "llada2_moe")}


@pytest.fixture(scope="module")
def models():
    return {model_id: load_model(model_id, device="cpu") for model_id in FAMILIES}


def test_catalog_ids_reach_every_entry_point_and_unknown_ids_are_refused():
    assert list(BUNDLED_MODELS) == ["bundled", "bundled-fast-dllm-v2", "bundled-llada2"]
    assert model_ids()[:3] == list(BUNDLED_MODELS)
    assert [model_id for _, model_id in model_choices()][:3] == list(BUNDLED_MODELS)
    for model_id, path in BUNDLED_MODELS.items():
        assert model_source(model_id) == path and Path(path).is_dir()
    with pytest.raises(ValueError, match="unknown model 'bundled-sdar'"):
        model_source("bundled-sdar")
    with pytest.raises(ModelLoadError, match="no such checkpoint directory"):
        load_model("bundled-llada3")


@pytest.mark.parametrize("model_id", FAMILIES)
def test_each_ships_in_its_family_layout_under_30_mb_with_a_card(model_id, models):
    adapter, model_type = FAMILIES[model_id]
    path = Path(BUNDLED_MODELS[model_id])
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == model_type and "auto_map" not in config
    assert isinstance(models[model_id], adapter) and models[model_id].name == model_id
    assert (path / "model.safetensors").stat().st_size <= 30 * 2**20
    card = (path / "README.md").read_text()
    for section in ("## Data", "## Training", "## Evaluation", "## Limitations"):
        assert section in card


# At least this many of 20 held-out problems solved in AR mode (60-problem scores in each model card).
SOLVES = {
    "bundled-fast-dllm-v2": {"arith": 19, "team": 18, "chains": 19},
    "bundled-llada2": {"arith": 18, "team": 17, "chains": 8},
}


@pytest.fixture(scope="module")
def ar_runs(models):
    """``(model id, family) -> [(problem, AR trace)]`` over 20 held-out problems (seed 4242), each decoded
    once for the module: the accuracy floors and the exactness tests read the same AR answers."""
    runs = {}

    def of(model_id: str, family_name: str) -> list:
        if (model_id, family_name) not in runs:
            problems = get_family(family_name).problems("heldout", 20, seed=4242)
            ar = DecodeConfig(method="ar", max_new_tokens=BUDGET)
            # Batched (tests/test_batch.py: a batch row decodes as alone), so the module pays one AR pass.
            traces = generate_batch(models[model_id], [p.prompt for p in problems], ar)
            runs[model_id, family_name] = list(zip(problems, traces))
        return runs[model_id, family_name]

    return of


@pytest.mark.parametrize("model_id", FAMILIES)
@pytest.mark.parametrize("family_name", ["arith", "team", "chains"])
def test_ar_mode_solves_heldout_problems(model_id, family_name, ar_runs):
    family = get_family(family_name)
    solved = sum(family.score(p, run.text) for p, run in ar_runs(model_id, family_name))
    assert solved >= SOLVES[model_id][family_name], solved


EXACT = {
    "bundled-fast-dllm-v2": dict(block_length=32, sub_block_length=8, steps=8),
    "bundled-llada2": dict(block_length=16, steps=16),
}


@pytest.mark.parametrize("model_id", FAMILIES)
def test_exact_s2d2_writes_the_trained_models_own_ar_answers(model_id, models, ar_runs):
    """On long chains answers, with each family's block layout (Fast-dLLM v2: sub-blocks of its 32-token blocks)."""
    exact = preset_config("exact", max_new_tokens=BUDGET, **EXACT[model_id])
    assert exact.exactness().exact
    for p, ar in ar_runs(model_id, "chains"):  # all 20 decoded problems
        run = generate(models[model_id], p.prompt, exact)
        assert run.output_ids == ar.output_ids
        assert run.summary.nfe < ar.summary.nfe


def test_llada2_editing_rewrites_committed_tokens(models):
    """τ_edit does something on the model trained with editing: LLaDA2's threshold decoding at the quality
    setting rewrites committed tokens (19 edits on 6 chains problems when this was written), and turning
    editing off removes every edit. (S2D2 runs edit far less: the verifier replaces most drafts first.)"""
    model = models["bundled-llada2"]
    quality = preset_config("llada2-quality", max_new_tokens=BUDGET).replace(method="dynamic")
    problems = get_family("chains").problems("heldout", 6, seed=4242)
    edited = sum(generate(model, p.prompt, quality).summary.edits for p in problems)
    unedited = sum(generate(model, p.prompt, quality.replace(edit_threshold=None)).summary.edits for p in problems)
    assert edited >= 5 and unedited == 0, (edited, unedited)
