"""Every decoding setting as command-line flags.

Each field of :class:`~s2d2.config.DecodeConfig`, :class:`~s2d2.config.VerifyConfig`
and :class:`~s2d2.sampling.SamplingConfig` is declared once with
:func:`s2d2.fields.setting`; :mod:`s2d2.config` derives the flat table of them
(:data:`SETTINGS`) and the one reader of values by name
(:func:`~s2d2.config.read_settings`), which the CLI, lm-eval's ``model_args``, the
dashboard and its API all call. Here the table becomes the CLI's flags. Flat
names are unique across the three dataclasses, so ``acceptance=greedy`` needs
no section prefix.
"""

from __future__ import annotations

import argparse

from .config import BY_NAME, SETTINGS
from .fields import Setting

__all__ = ["BY_NAME", "SETTINGS", "Setting", "add_arguments", "settings_from_args"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; a flag left out keeps the preset's or the default value."""
    for s in SETTINGS:
        help_text = f"{s.label}: {s.help}"
        if s.kind is bool:
            parser.add_argument(s.flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif s.kind is tuple:
            parser.add_argument(s.flag, type=int, nargs=3, default=None, metavar="N", help=help_text)
        else:
            parser.add_argument(s.flag, type=s.parse, default=None, choices=s.choices, help=help_text)


def settings_from_args(args: argparse.Namespace) -> dict:
    """The settings the user gave on the command line, by name (read, like every entry point's, by
    :func:`~s2d2.config.read_settings` when the config is built)."""
    return {s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name, None) is not None}
