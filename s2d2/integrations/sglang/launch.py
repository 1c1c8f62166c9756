"""What the algorithm checks at server start, before SGLang loads anything: the YAML and the model family."""

from __future__ import annotations

import json
from pathlib import Path

from .settings import SettingsError

# SGLang's default canvas per architecture (sglang/srt/dllm/config.py), used when the YAML sets no block_size.
DEFAULT_BLOCK_SIZE = {"SDARForCausalLM": 4, "SDARMoeForCausalLM": 4, "LLaDA2MoeModelLM": 32}


def read_yaml(server_args) -> tuple[dict, str, str]:
    """``(the --dllm-algorithm-config mapping or {}, the model path, the device)`` from SGLang's launch
    arguments."""
    from sglang.srt.arg_groups.overrides import resolving_view

    view = resolving_view(server_args)
    settings = {}
    if view.dllm_algorithm_config is not None:
        import yaml

        settings = yaml.safe_load(Path(view.dllm_algorithm_config).read_text()) or {}
        if not isinstance(settings, dict):
            raise SettingsError("the dLLM algorithm config must be a YAML mapping of setting names to values")
    return settings, view.model_path, view.device


def model_config(model_path: str) -> dict:
    """A checkpoint's config.json (a local directory, or a Hub id in the cache)."""
    local = Path(model_path) / "config.json"
    if not local.is_file():
        from huggingface_hub import hf_hub_download

        local = Path(hf_hub_download(model_path, "config.json"))
    return json.loads(local.read_text())


def unexported_refusal(architecture: str, config: dict, device: str) -> str | None:
    """Why SGLang would compute another function than the checkpoint's on ``device``, or ``None``: its CPU MoE
    path (``moe_forward_native``) drops LLaDA2's ``routed_scaling_factor``, which an export folds into the
    experts (:mod:`.export`)."""
    if architecture == "LLaDA2MoeModelLM" and device == "cpu" and config.get("routed_scaling_factor", 1.0) != 1.0:
        return (
            "SGLang's CPU MoE drops LLaDA2's routed_scaling_factor: serve an export "
            "(python -m s2d2.integrations.sglang.export --model MODEL --out DIR), which folds it into the experts"
        )
    return None


def launch_block_size(settings: dict, model_path: str, supported: tuple[str, ...], device: str) -> int:
    """The canvas SGLang will give each request; refuses a model S2D2 does not serve here."""
    config = model_config(model_path)
    architecture = (config.get("architectures") or [""])[0]
    if architecture not in supported:
        raise SettingsError(f"S2D2 in SGLang serves {', '.join(supported)}, not {architecture or 'this model'}")
    refusal = unexported_refusal(architecture, config, device)
    if refusal:
        raise SettingsError(refusal)
    return int(settings.get("block_size", DEFAULT_BLOCK_SIZE[architecture]))
