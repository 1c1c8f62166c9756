"""Write an SGLang-loadable copy of an SDAR or LLaDA2 checkpoint: ``python -m s2d2.integrations.sglang.export --model ID_OR_DIR --out DIR``.

``--model`` is anything :func:`s2d2.load_model` takes (``bundled``, ``bundled-llada2``,
a checkpoint directory, a Hub id). The weights, tokenizer and token ids are
copied unchanged except where a family's section below says. The vocabulary is
never padded to SGLang's per-architecture mask id (151669 for SDAR, 156895 for
LLaDA2): the plugin's algorithms translate that id to the checkpoint's own
``mask_token_id``, which the export writes into config.json, before each
forward, so the model keeps its own head (docs/SERVING.md says why). No code
file of the source is copied. Run it in the project's environment.

SDAR: SGLang builds it from a Qwen3-shaped config whose architecture is
``SDARForCausalLM``; tied embeddings are written out as an ``lm_head.weight``
(SGLang 0.5.23's SDAR loader looks that name up even when the head is tied).

LLaDA2 (``LLaDA2MoeModelLM``): SGLang reads the checkpoint's own parameter
names, but

- transformers has no ``llada2_moe`` config class, so the export ships a small
  one of its own (``configuration_llada2_moe.py``, named by ``auto_map``) and the
  server is launched with ``--trust-remote-code`` (:mod:`.server` adds it);
- SGLang's model reads fields a LLaDA2 config.json may leave out with defaults
  of its own (``routed_scaling_factor`` 1.0 where the family's is 2.5, no
  ``embedding_dropout`` at all), so every field the engine defaults is written
  out with the engine's value, and ``norm_topk_prob`` as the engine decides it;
- SGLang's plain-PyTorch MoE (``moe_forward_native``, its CPU path) never applies
  ``routed_scaling_factor``. The factor is folded into the weights instead:
  each routed expert's ``down_proj`` is multiplied by it and the config says
  1.0. An expert's output is linear in its ``down_proj``, so this is the same
  function on every SGLang path; shared experts are not scaled and stay as
  they are.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ...models import BUNDLED_MODELS, ModelLoadError, adapter_for, read_config
from ...models.base import mask_token_id
from ...models.llada2 import LLADA2_DEFAULTS, LLaDA2Model
from ...models.sdar import SDARModel

# Files of a checkpoint directory SGLang does not read: its own config is rewritten, the card and training logs stay.
SKIPPED = ("config.json", "README.md")

# The config class an LLaDA2 export ships, and its module's text (this project's own code, run by SGLang's
# transformers under --trust-remote-code): a plain PretrainedConfig that keeps every field of config.json.
CONFIG_MODULE = "configuration_llada2_moe"
CONFIG_CLASS = "LLaDA2MoeConfig"
CONFIG_SOURCE = '''"""LLaDA2's config for SGLang: written by s2d2.integrations.sglang.export (transformers has no llada2_moe)."""

from transformers import PretrainedConfig


class LLaDA2MoeConfig(PretrainedConfig):
    """Every field of config.json as an attribute; SGLang's LLaDA2 model reads them."""

    model_type = "llada2_moe"

    def __init__(self, embedding_dropout=0.0, **kwargs):
        self.embedding_dropout = embedding_dropout
        super().__init__(**kwargs)
'''

# A routed expert's output projection, in LLaDA2's own parameter names (shared experts are ``shared_experts``).
ROUTED_DOWN_PROJ = re.compile(r"\.mlp\.experts\.\d+\.down_proj\.weight$")


def checkpoint_directory(source: str) -> Path:
    """A local directory holding ``source``'s files (a Hub id is fetched into, or read from, the cache)."""
    path = Path(BUNDLED_MODELS.get(source, source))
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(source))


def sglang_config(config: dict) -> dict:
    """The SGLang view of an SDAR config: Qwen3's model type and config class (a Hub checkpoint's ``auto_map``
    names code the export does not copy), SDAR's architecture, the same ids."""
    if config.get("mask_token_id") is None:
        raise ModelLoadError("the checkpoint's config.json names no mask_token_id, which the algorithms translate to")
    config = {k: v for k, v in config.items() if k != "auto_map"}
    return {**config, "model_type": "qwen3", "architectures": ["SDARForCausalLM"], "tie_word_embeddings": False}


def llada2_sglang_config(config: dict, mask_id: int) -> dict:
    """The SGLang view of an LLaDA2 config: the engine's defaults written out, the checkpoint's mask id, the
    routed scaling folded into the weights (:func:`fold_routed_scaling`), and the shipped config class named."""
    full = {**LLADA2_DEFAULTS, **config}
    return {
        **full,
        "architectures": ["LLaDA2MoeModelLM"],
        "model_type": "llada2_moe",
        "auto_map": {"AutoConfig": f"{CONFIG_MODULE}.{CONFIG_CLASS}"},
        "mask_token_id": mask_id,
        "embedding_dropout": 0.0,
        "norm_topk_prob": full["num_experts_per_tok"] > 1,  # as the engine runs it (s2d2.models.llada2)
        "routed_scaling_factor": 1.0,
    }


def llada2_mask_id(directory: Path, config: dict) -> int:
    """The mask token the engine uses for this checkpoint: its config's, else its tokenizer's ``<|mask|>``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    return mask_token_id(config, tokenizer, default=LLaDA2Model.default_mask_token_id)


def copy_weights(directory: Path, out: Path, edit: Callable[[dict], None]) -> None:
    """Copy every weight shard of ``directory`` into ``out`` after ``edit`` changed its name → tensor map."""
    from safetensors.torch import load_file, save_file

    for shard in sorted(directory.glob("*.safetensors")):
        weights = load_file(str(shard))
        edit(weights)
        save_file(weights, str(out / shard.name), metadata={"format": "pt"})


def untie_head(weights: dict) -> None:
    """Write a tied head out as ``lm_head.weight`` (same values)."""
    if "model.embed_tokens.weight" in weights and "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()


def fold_routed_scaling(routed_scaling_factor: float) -> Callable[[dict], None]:
    """Multiply every routed expert's ``down_proj`` by ``routed_scaling_factor``."""

    def fold(weights: dict) -> None:
        for name in [n for n in weights if ROUTED_DOWN_PROJ.search(n)]:
            weights[name] = weights[name] * routed_scaling_factor

    return fold


def copy_side_files(directory: Path, out: Path) -> None:
    """Tokenizer, generation config and shard index: every file but weights, configs, cards, logs and code."""
    for item in directory.iterdir():
        if (
            item.is_file()
            and item.suffix not in (".safetensors", ".py")
            and item.name not in SKIPPED
            and not item.name.startswith("train_")
        ):
            shutil.copy2(item, out / item.name)


def export(source: str, out: Path) -> Path:
    """Copy ``source`` into ``out`` with its config made SGLang's; returns ``out``."""
    source = BUNDLED_MODELS.get(source, source)
    config = read_config(source)
    family = adapter_for(config)
    if family not in (SDARModel, LLaDA2Model):
        raise ModelLoadError(f"{source!r} is neither an SDAR nor an LLaDA2 checkpoint, the families SGLang serves")
    directory = checkpoint_directory(source)
    out.mkdir(parents=True, exist_ok=True)
    copy_side_files(directory, out)
    if family is SDARModel:
        copy_weights(directory, out, untie_head)
        exported = sglang_config(config)
    else:
        copy_weights(directory, out, fold_routed_scaling(float({**LLADA2_DEFAULTS, **config}["routed_scaling_factor"])))
        (out / f"{CONFIG_MODULE}.py").write_text(CONFIG_SOURCE)
        exported = llada2_sglang_config(config, llada2_mask_id(directory, config))
    (out / "config.json").write_text(json.dumps(exported, indent=2) + "\n")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m s2d2.integrations.sglang.export", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", required=True, help="a bundled model's id, a checkpoint directory or a Hub id")
    parser.add_argument("--out", required=True, type=Path, help="the directory to write")
    args = parser.parse_args(argv)
    try:
        print(export(args.model, args.out))
    except ModelLoadError as error:
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
