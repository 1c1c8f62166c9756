"""Model adapters and the registry that picks one from a checkpoint's ``config.json``."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import torch

from .base import BlockDiffusionModel, KVSession, quiet_transformers
from .fastdllm import FastDLLMModel
from .llada2 import LLaDA2Model
from .sdar import SDARModel

__all__ = [
    "BlockDiffusionModel",
    "KVSession",
    "ModelLoadError",
    "load_model",
    "DEFAULT_MODEL",
    "BUNDLED_MODELS",
    "ADAPTERS",
]

ASSETS = Path(__file__).resolve().parents[2] / "assets"
DEFAULT_MODEL = str(ASSETS / "model")
# The models the project trains and ships, one per family, by public id: each loads offline through the same
# adapter as that family's Hub checkpoints (assets/*/README.md is each one's model card).
BUNDLED_MODELS = {
    "bundled": DEFAULT_MODEL,
    "bundled-fast-dllm-v2": str(ASSETS / "model-fast-dllm-v2"),
    "bundled-llada2": str(ASSETS / "model-llada2"),
}
ADAPTERS = (SDARModel, FastDLLMModel, LLaDA2Model)
MIN_TRANSFORMERS = "5.24"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


class ModelLoadError(ValueError):
    """A model could not be loaded; the message says why in one line."""


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub's host answers at all, checked once in a few seconds
    rather than through the client's minute of retries."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _hub_error(source: str, err: Exception, offline: bool = False) -> ModelLoadError:
    name = type(err).__name__
    if "Gated" in name:
        why = "it is gated: accept its licence on huggingface.co and log in with `hf auth login`"
    elif "RepositoryNotFound" in name:
        why = "no such model on the Hugging Face Hub (or it is private)"
    elif offline or "Offline" in name or "LocalEntryNotFound" in name:
        why = "the Hub cannot be reached (offline) and it is not in the local cache"
    else:
        why = f"the Hub could not be reached ({name})"
    return ModelLoadError(f"cannot load {source!r}: {why}")


def read_config(source: str, offline: bool = False) -> dict:
    """``config.json`` of a local checkpoint directory or a Hub model id.

    ``offline`` reads a Hub model from the local cache only.
    """
    path = Path(source)
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.exists():
            raise ModelLoadError(f"cannot load {source!r}: the directory has no config.json")
        return json.loads(config_file.read_text())
    if not HUB_ID.fullmatch(source):
        raise ModelLoadError(
            f"cannot load {source!r}: no such checkpoint directory, and not a Hub id like 'owner/name'"
        )
    from huggingface_hub import hf_hub_download

    try:
        return json.loads(Path(hf_hub_download(source, "config.json", local_files_only=offline)).read_text())
    except Exception as err:  # every Hub failure becomes one clear line
        raise _hub_error(source, err, offline) from None


def adapter_for(config: dict) -> type[BlockDiffusionModel]:
    for adapter in ADAPTERS:
        if adapter.matches(config):
            return adapter
    known = ", ".join(a.family for a in ADAPTERS)
    raise ModelLoadError(
        f"unsupported model (model_type={config.get('model_type')!r}, architectures={config.get('architectures')}); "
        f"supported families: {known}"
    )


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(
    source: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    device_map: str | dict | None = None,
    announce: Callable[[str], None] | None = None,
) -> BlockDiffusionModel:
    """Load a block-diffusion checkpoint (a bundled model's id, a directory or a Hub id) behind the engine's interface.

    fp32 on CPU and bf16 on GPU unless ``dtype`` says otherwise. ``device_map``
    (e.g. ``"auto"``, needs accelerate) is handed to ``from_pretrained`` so a
    model larger than one GPU is spread over the available devices; without it
    the whole model goes to ``device``.
    """
    from transformers import AutoTokenizer

    require_decoding_transformers()
    source = BUNDLED_MODELS.get(source, source)
    device = device or default_device()
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    offline = not Path(source).is_dir() and (os.environ.get("HF_HUB_OFFLINE") == "1" or not hub_reachable())
    config = read_config(source, offline)
    adapter = adapter_for(config)
    if announce:
        announce(describe(source, adapter.family, config, dtype))
    load_kwargs = {"local_files_only": offline}
    if device_map is not None:
        load_kwargs["device_map"] = device_map
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline, trust_remote_code=False)
        return adapter.load(source, config, tokenizer, device, dtype, name=_display_name(source), **load_kwargs)
    except ModelLoadError:
        raise
    except ValueError as err:
        raise ModelLoadError(f"cannot load {source!r} as {adapter.family}: {err}") from None
    except OSError as err:
        raise _hub_error(source, err, offline) from None


def require_decoding_transformers() -> None:
    """Refuse, in one line, a transformers older than the engine's KV handling and LLaDA2's weight conversion
    need (5.24); the package admits 5.19 so that it installs beside SGLang, whose environment runs the plugin."""
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) < Version(MIN_TRANSFORMERS):
        raise ModelLoadError(
            f"decoding needs transformers >= {MIN_TRANSFORMERS}, this environment has {transformers.__version__} "
            "(SGLang's environment pins it: there S2D2 runs as SGLang's plugin, docs/SERVING.md)"
        )


def describe(source: str, family: str, config: dict, dtype: torch.dtype) -> str:
    """One line: what is about to load and how much memory its weights need."""
    from .catalog import estimate_memory_gb, parameter_count

    width = torch.finfo(dtype).bits // 8
    try:
        count, gb = parameter_count(config), estimate_memory_gb(config, width)
        amount = f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"
        memory = f"{gb:.2f} GB" if gb >= 1 else f"{gb * 1e3:.0f} MB"
        size = f"{amount} parameters, about {memory} of weights in {str(dtype).removeprefix('torch.')}"
    except (KeyError, TypeError):
        size = "size unknown (config.json lacks the fields to count parameters)"
    return f"loading {source} ({family}): {size}"


def _display_name(source: str) -> str:
    path = Path(source)
    if path.is_dir():
        names = {Path(p).resolve(): name for name, p in BUNDLED_MODELS.items()}
        return names.get(path.resolve(), path.name)
    return source
