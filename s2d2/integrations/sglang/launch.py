"""What the algorithm checks at server start, before SGLang loads anything: the YAML and the model family."""

from __future__ import annotations

import json
from pathlib import Path

from .settings import SettingsError

# SGLang's default canvas per architecture (sglang/srt/dllm/config.py), used when the YAML sets no block_size.
DEFAULT_BLOCK_SIZE = {"SDARForCausalLM": 4, "SDARMoeForCausalLM": 4, "LLaDA2MoeModelLM": 32}

# Why a family SGLang serves is not served by S2D2 (docs/SERVING.md, "Families").
REFUSED = {
    "LLaDA2MoeModelLM": (
        "LLaDA2 is not served by S2D2 in SGLang: it was never run end to end with SGLang 0.5.23 on a CPU, "
        "so its verifier is unchecked (docs/SERVING.md, Families)"
    ),
}


def read_yaml(server_args) -> tuple[dict, str]:
    """``(the --dllm-algorithm-config mapping or {}, the model path)`` from SGLang's launch arguments."""
    from sglang.srt.arg_groups.overrides import resolving_view

    view = resolving_view(server_args)
    settings = {}
    if view.dllm_algorithm_config is not None:
        import yaml

        settings = yaml.safe_load(Path(view.dllm_algorithm_config).read_text()) or {}
        if not isinstance(settings, dict):
            raise SettingsError("the dLLM algorithm config must be a YAML mapping of setting names to values")
    return settings, view.model_path


def model_architecture(model_path: str) -> str:
    """The first architecture a checkpoint's config.json names (a local directory, or a Hub id in the cache)."""
    local = Path(model_path) / "config.json"
    if not local.is_file():
        from huggingface_hub import hf_hub_download

        local = Path(hf_hub_download(model_path, "config.json"))
    return (json.loads(local.read_text()).get("architectures") or [""])[0]


def launch_block_size(settings: dict, model_path: str, supported: tuple[str, ...]) -> int:
    """The canvas SGLang will give each request; refuses a model family S2D2 does not serve here."""
    architecture = model_architecture(model_path)
    if architecture in REFUSED:
        raise SettingsError(REFUSED[architecture])
    if architecture not in supported:
        raise SettingsError(f"S2D2 in SGLang serves {', '.join(supported)}, not {architecture or 'this model'}")
    return int(settings.get("block_size", DEFAULT_BLOCK_SIZE[architecture]))
