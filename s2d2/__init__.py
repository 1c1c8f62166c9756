"""S2D2: self-speculative decoding for block-diffusion language models.

The public API::

    from s2d2 import config_from_settings, generate, generate_batch, load_model

    model = load_model()                      # the bundled model; or a directory / Hub id
    trace = generate(model, "Zoe has 7 books. Tom gives her 12 more. How many books does Zoe have now?",
                     config_from_settings("sdar-b", acceptance="greedy"))
    print(trace.text, trace.summary.nfe)
    traces = generate_batch(model, ["Ann has 3 pens. She buys 2 more. How many pens does Ann have now?",
                                    "Tom has 9 cups. He gives 4 to Eli. How many cups does Tom have now?"],
                            config_from_settings("exact"), batch_size=16)  # many prompts per forward

The names are imported on first use, so ``import s2d2.config`` (the settings and the math) does not
import the model adapters and their transformers version: the SGLang plugin
(:mod:`s2d2.integrations.sglang`) runs inside SGLang's own environment on exactly those modules.
"""

from importlib import import_module

# Public name -> the module that defines it.
_EXPORTS = {
    "generate_batch": "batch",
    "PRESETS": "config",
    "DecodeConfig": "config",
    "VerifyConfig": "config",
    "config_from_settings": "config",
    "preset_config": "config",
    "generate": "decode",
    "DEFAULT_MODEL": "models",
    "ModelLoadError": "models",
    "load_model": "models",
    "SamplingConfig": "sampling",
    "Trace": "trace",
}

__all__ = sorted(_EXPORTS, key=str.lower)


def __getattr__(name: str):
    """Import a public name's module the first time the name is read."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 's2d2' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
