"""Exact S2D2 is the model's own autoregressive decoding, on every family.

Greedy: token for token. Real forwards on tiny random checkpoints.
"""

from __future__ import annotations

import pytest
import torch
from helpers import exact_greedy_s2d2, random_prompts

from s2d2.config import DecodeConfig
from s2d2.decode import generate
from s2d2.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")


def mask_emitting(path: str):
    """A fresh copy of a checkpoint whose output row for the mask token is scaled up,
    so that autoregressive decoding often emits the mask token id: with random
    weights it is an ordinary vocabulary entry."""
    model = load_model(path, device="cpu")
    with torch.no_grad():
        model.model.get_output_embeddings().weight[model.mask_token_id] *= 2.0
    return model


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada2"])
def test_a_committed_mask_token_id_stays_committed(family_paths, tiny_path, family):
    """What is masked is state: a committed token equal to the mask id is not drafted over."""
    model = mask_emitting({**family_paths, "sdar": tiny_path}[family])
    ar = DecodeConfig(method="ar", max_new_tokens=16)
    emitted = 0
    for prompt in random_prompts(model, 6, seed=3):
        expected = generate(model, prompt, ar).output_ids
        emitted += model.mask_token_id in expected
        for block_length in (4, 8):
            assert generate(model, prompt, exact_greedy_s2d2(block_length, max_new_tokens=16)).output_ids == expected
    assert emitted, "AR must emit the mask token id for this test to mean anything"
