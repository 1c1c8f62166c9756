"""Every decoding setting as one flat table, derived from the config dataclasses.

Each field of :class:`~s2d2.config.DecodeConfig`, :class:`~s2d2.config.VerifyConfig`
and :class:`~s2d2.sampling.SamplingConfig` is declared once with
:func:`s2d2.fields.setting`; this module turns those declarations into the
things that need them: CLI flags, parsing of ``name=value`` text (the CLI, the
lm-eval ``model_args``), and the description the dashboard builds its
controls from. Flat names are unique across the three dataclasses, so
``acceptance=greedy`` needs no section prefix.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass

from .config import DecodeConfig, VerifyConfig
from .sampling import SamplingConfig

_KINDS = {"int": int, "float": float, "bool": bool, "str": str, "tuple[int, int, int]": tuple}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Setting:
    """One setting: where it lives, its type, and its declaration."""

    name: str
    section: str | None
    kind: type
    optional: bool
    default: object
    label: str
    help: str
    choices: tuple | None
    minimum: float | None
    maximum: float | None
    step: float | None
    group: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, text: str):
        """The value of ``text`` for this setting (``none`` or empty clears an optional one)."""
        text = str(text).strip()
        if self.optional and text.lower() in ("", "none", "null"):
            return None
        try:
            if self.kind is bool:
                if text.lower() not in _TRUE | _FALSE:
                    raise ValueError
                return text.lower() in _TRUE
            if self.kind is tuple:
                return tuple(int(v) for v in text.replace(":", " ").replace("x", " ").split())
            return self.kind(text)
        except ValueError:
            raise ValueError(f"{self.name} must be {self.kind.__name__}, got {text!r}") from None

    def coerce(self, value):
        """The value of ``value`` for this setting, whoever sends it: text (the CLI, lm-eval's ``model_args``,
        the API's form fields) is parsed, typed values (the dashboard's controls, JSON) are checked; a choice
        must be one of the choices either way. The one place setting values are read, so every entry point
        accepts the same spellings (``on``/``off`` included) and refuses the same mistakes."""
        if value is None or (isinstance(value, str) and not value.strip()):
            if self.optional:
                return None
            raise ValueError(f"{self.name} ({self.label}) needs a value")
        value = self.parse(value) if isinstance(value, str) else self._checked(value)
        if self.choices is not None and value is not None and value not in self.choices:
            raise ValueError(f"unknown {self.name} {value!r}; choose one of {', '.join(map(str, self.choices))}")
        return value

    def _checked(self, value):
        """A typed value checked for this setting's kind (an integral float is an int; an int is a float)."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.name} must be true or false, got {value!r}")
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{self.name} must be an integer, got {value!r}")
            if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
                raise ValueError(f"{self.name} must be an integer, got {value!r}")
            return int(value)
        if self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{self.name} must be a number, got {value!r}")
            return float(value)
        if self.kind is tuple:
            return tuple(int(v) for v in value)
        return value


def _settings_of(cls, section: str | None) -> list[Setting]:
    found = []
    for f in dataclasses.fields(cls):
        if not f.metadata:
            continue
        kind_name = f.type.replace(" | None", "")
        found.append(
            Setting(
                name=f.name,
                section=section,
                kind=_KINDS[kind_name],
                optional=f.type.endswith("| None"),
                default=f.default,
                **{k: f.metadata[k] for k in ("label", "help", "choices", "minimum", "maximum", "step", "group")},
            )
        )
    return found


SETTINGS: tuple[Setting, ...] = tuple(
    _settings_of(DecodeConfig, None) + _settings_of(VerifyConfig, "verify") + _settings_of(SamplingConfig, "sampling")
)
BY_NAME = {s.name: s for s in SETTINGS}


def parse_settings(pairs: dict[str, str]) -> dict:
    """``{name: text}`` to ``{name: value}``; an unknown name is an error that lists the known ones."""
    unknown = sorted(set(pairs) - set(BY_NAME))
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r}; known settings: {', '.join(BY_NAME)}")
    return {name: BY_NAME[name].coerce(text) for name, text in pairs.items()}


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
    """The settings the user gave on the command line, by name."""
    given = {s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name, None) is not None}
    if "ucb_bins" in given:
        given["ucb_bins"] = tuple(given["ucb_bins"])
    return given
