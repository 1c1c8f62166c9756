"""The algorithm's YAML (``--dllm-algorithm-config``): the engine's own setting names and presets.

``preset: exact`` / ``preset: sdar-b`` and every flat setting name the CLI takes
(``block_length``, ``threshold``, ``acceptance``, ``policy``, ...) are read by the
engine's reader (:func:`s2d2.config.config_from_settings`), so a bad value fails
with the CLI's one-line message. ``block_size`` is SGLang's own key: the size of
the canvas it gives each request, which must be the configuration's block length.
What S2D2 inside SGLang cannot do is refused here, at server start, never ignored.
"""

from __future__ import annotations

import os

from ...config import DecodeConfig, config_from_settings

# SGLang's own keys of the same YAML, read by SGLang itself.
SGLANG_KEYS = ("block_size", "capture_input_preparation")
# The server's keys that are no decoding setting: where served traces go (:mod:`.tracing`).
SERVER_KEYS = ("trace_dir",)

# Settings that belong to each request in SGLang, not to the server.
PER_REQUEST = {
    "temperature": "sampling_params.temperature",
    "top_p": "sampling_params.top_p",
    "top_k": "sampling_params.top_k",
    "seed": "sampling_params.sampling_seed",
    "max_new_tokens": "sampling_params.max_new_tokens",
}

# Recorded by the engine's traces; SGLang returns token ids only.
TRACE_ONLY = ("trace_top_k",)

ROUTERS = ("always", "min_span", "score", "hysteresis")
RULES = ("static", "dynamic")


class SettingsError(ValueError):
    """A YAML setting SGLang's S2D2 cannot take; the message is one line."""


def decode_config(settings: dict, block_size: int) -> DecodeConfig:
    """The configuration the YAML describes, checked against what S2D2 does inside SGLang.

    The presets carry lookahead, which rides the next block's first draft on a
    verification; SGLang decodes the next block in another round, so it is
    turned off here (same outputs, the forward it would save is spent), and
    refused when the YAML asks for it.
    """
    settings = {k: v for k, v in (settings or {}).items() if k not in SGLANG_KEYS + SERVER_KEYS}
    for name, where in PER_REQUEST.items():
        if name in settings:
            raise SettingsError(f"{name} is a per-request setting in SGLang: send it as {where}")
    if settings.get("lookahead"):
        raise SettingsError("lookahead carries the next block's first draft, which SGLang decodes in its next round")
    preset = settings.pop("preset", None)
    for name in TRACE_ONLY:
        settings.pop(name, None)
    try:
        config = config_from_settings(preset, **settings).replace(lookahead=False)
    except ValueError as error:  # the engine's own one-line message
        raise SettingsError(str(error)) from None
    refusal = unsupported(config, block_size)
    if refusal:
        raise SettingsError(refusal)
    return config


def unsupported(config: DecodeConfig, block_size: int) -> str | None:
    """Why S2D2 inside SGLang cannot run ``config`` on canvases of ``block_size``, or ``None``."""
    v = config.verify
    checks = (
        (config.method != "s2d2", f"method {config.method}: this algorithm is S2D2 (SGLang's LowConfidence is the diffusion baseline)"),
        (config.block_length != block_size, f"block_length {config.block_length} differs from SGLang's block_size {block_size}: "
                                            f"set block_size: {config.block_length} in the same YAML"),
        (config.sub_block_length != config.block_length, "sub-blocks (Fast-dLLM v2) are not served by SGLang"),
        (config.edit_threshold is not None, "editing (edit_threshold) rewrites committed tokens, which SGLang keeps"),
        (config.accounting != "fused", "official accounting counts the official codes' forwards; SGLang runs its own"),
        (v.policy not in ROUTERS, f"policy {v.policy}: SGLang's S2D2 routes with {', '.join(ROUTERS)}"),
        (config.s2d2_rule not in RULES, f"s2d2_rule {config.s2d2_rule}: SGLang's S2D2 falls back with {', '.join(RULES)}"),
        (v.ratio_threshold is not None, "ratio_threshold is not offered in SGLang"),
        (v.always_check_high_confidence, "always_check_high_confidence is not offered in SGLang"),
        (not v.allow_resample, "allow_resample off is not offered in SGLang"),
    )  # fmt: skip
    return next((reason for refused, reason in checks if refused), None)


def trace_directory(settings: dict) -> str | None:
    """The YAML's ``trace_dir``, made if missing, or ``None``; one that cannot be written is refused at start."""
    directory = (settings or {}).get("trace_dir")
    if directory is None:
        return None
    if not isinstance(directory, str) or not directory:
        raise SettingsError(f"trace_dir must be a directory path, not {directory!r}")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise SettingsError(f"trace_dir {directory}: {error.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise SettingsError(f"trace_dir {directory} is not writable")
    return directory
