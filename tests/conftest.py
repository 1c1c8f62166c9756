"""Shared fixtures: tiny random-weight checkpoints built on the fly, never downloaded."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # run_tests.sh runs one worker per core: each worker, and every process a test starts, keeps to one
    # thread, since two workers with a pool of two threads each oversubscribe the cores and slow both.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

from s2d2.models import load_model
from s2d2.training.train import TrainConfig, build_tokenizer, write_random_checkpoint

TINY = TrainConfig(
    hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128, max_positions=512, tokenizer_corpus=500
)


# run_tests.sh spreads the suite over one worker per core (pytest-xdist, --dist loadfile): each module runs
# whole on one worker, so its module- and session-scoped fixtures (an lm-eval run, an app server) are built
# once per worker that needs them. Modules start heaviest first, so the last one to start is short; the rest
# follow in file order.
HEAVIEST_FIRST = [
    "test_sglang",
    "test_lm_eval",
    "test_bundled_families",
    "test_app",
    "test_bundled",
    "test_bench",
    "test_browser",
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rpartition(".")[2], len(rank)))  # stable


def write_sdar_checkpoint(path, seed: int = 0) -> str:
    """A random-weight checkpoint in SDAR's on-disk layout (config, safetensors, tokenizer)."""
    return str(write_random_checkpoint(path, TINY, seed=seed, init_std=0.15))


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory) -> str:
    return write_sdar_checkpoint(tmp_path_factory.mktemp("tiny_sdar"))


@pytest.fixture(scope="session")
def tiny_model(tiny_path):
    return load_model(tiny_path, device="cpu")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: on a busy CPU, waking a thread pool for each small MoE
    operation costs far more than it saves (50x slower on two shared cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(TINY)


@pytest.fixture(scope="session")
def family_paths(tmp_path_factory, tokenizer) -> dict[str, str]:
    """Fast-dLLM v2 and LLaDA2 checkpoints in their published layouts (see checkpoints.py)."""
    from checkpoints import WRITERS

    return {family: write(tmp_path_factory.mktemp(family), tokenizer) for family, write in WRITERS.items()}


@pytest.fixture(scope="session")
def family_models(family_paths):
    return {family: load_model(path, device="cpu") for family, path in family_paths.items()}


@pytest.fixture(params=["fast_dllm_v2", "llada2"])
def model(request, family_models):
    return family_models[request.param]


@pytest.fixture(scope="session")
def every_family(family_models, tiny_model):
    """One tiny model of each family: SDAR, Fast-dLLM v2, LLaDA2."""
    return {**family_models, "sdar": tiny_model}


@pytest.fixture
def agreeing_model(tiny_path):
    """A model whose drafts always agree with its verifier.

    With every attention output projection zeroed, a position's logits depend
    on its own input token only: every mask token predicts the same token,
    whatever the context, so drafts and AR predictions coincide.
    """
    model = load_model(tiny_path, device="cpu")
    with torch.no_grad():
        for layer in model.model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    return model


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """The dashboard running as ``python app.py`` (bundled model), shared by API and browser tests; its log
    has a line per model forward (``S2D2_LOG_LEVEL=DEBUG``), so a test can see when decoding stops."""
    from app_server import AppServer

    server = AppServer(tmp_path_factory.mktemp("app") / "app.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def app_url(app_server):
    return app_server.url
