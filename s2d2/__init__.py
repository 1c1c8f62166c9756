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
"""

from .batch import generate_batch
from .config import PRESETS, DecodeConfig, VerifyConfig, config_from_settings, preset_config
from .decode import generate
from .models import DEFAULT_MODEL, ModelLoadError, load_model
from .sampling import SamplingConfig
from .trace import Trace

__all__ = [
    "DEFAULT_MODEL",
    "PRESETS",
    "DecodeConfig",
    "ModelLoadError",
    "SamplingConfig",
    "Trace",
    "VerifyConfig",
    "config_from_settings",
    "generate",
    "generate_batch",
    "load_model",
    "preset_config",
]
