"""Write an SGLang-loadable copy of an SDAR checkpoint: ``python -m s2d2.integrations.sglang.export --model ID_OR_DIR --out DIR``.

``--model`` is anything :func:`s2d2.load_model` takes (``bundled``, a checkpoint
directory, a Hub id). SGLang builds SDAR from a Qwen3-shaped config whose
architecture is ``SDARForCausalLM``; the weights, tokenizer and token ids are
copied unchanged, except that tied embeddings are written out as an
``lm_head.weight`` (SGLang 0.5.23's SDAR loader looks that name up even when
the head is tied). The vocabulary is not padded to SGLang's SDAR mask id
(151669): the plugin's algorithms translate that id to the checkpoint's own
``mask_token_id`` before each forward, so the model keeps its own head
(docs/SERVING.md says why). Run it in the project's environment.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from ...models import BUNDLED_MODELS, ModelLoadError, adapter_for, read_config
from ...models.sdar import SDARModel

# Files of a checkpoint directory SGLang does not read: its own config is rewritten, the card and training logs stay.
SKIPPED = ("config.json", "README.md")


def checkpoint_directory(source: str) -> Path:
    """A local directory holding ``source``'s files (a Hub id is fetched into, or read from, the cache)."""
    path = Path(BUNDLED_MODELS.get(source, source))
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(source))


def sglang_config(config: dict) -> dict:
    """The SGLang view of an SDAR config: Qwen3's model type, SDAR's architecture, the same ids."""
    if config.get("mask_token_id") is None:
        raise ModelLoadError("the checkpoint's config.json names no mask_token_id, which the algorithms translate to")
    return {**config, "model_type": "qwen3", "architectures": ["SDARForCausalLM"], "tie_word_embeddings": False}


def untied_weights(directory: Path, out: Path) -> None:
    """Copy the weights with the tied head written out as ``lm_head.weight`` (same values)."""
    from safetensors.torch import load_file, save_file

    for shard in sorted(directory.glob("*.safetensors")):
        weights = load_file(str(shard))
        if "model.embed_tokens.weight" in weights and "lm_head.weight" not in weights:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
        save_file(weights, str(out / shard.name), metadata={"format": "pt"})


def export(source: str, out: Path) -> Path:
    """Copy ``source`` into ``out`` with its config made SGLang's; returns ``out``."""
    source = BUNDLED_MODELS.get(source, source)
    config = read_config(source)
    if adapter_for(config) is not SDARModel:
        raise ModelLoadError(f"{source!r} is not an SDAR checkpoint; SGLang's S2D2 serves SDAR")
    directory = checkpoint_directory(source)
    out.mkdir(parents=True, exist_ok=True)
    for item in directory.iterdir():
        if (
            item.is_file()
            and item.suffix != ".safetensors"
            and item.name not in SKIPPED
            and not item.name.startswith("train_")
        ):
            shutil.copy2(item, out / item.name)
    untied_weights(directory, out)
    (out / "config.json").write_text(json.dumps(sglang_config(config), indent=2) + "\n")
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
