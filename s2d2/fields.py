"""Config fields that declare themselves.

A setting is declared once, on its config dataclass: default, label, help,
choices and bounds. Validation and the reading of values (:class:`Setting`,
here), the settings table and its one reader (:mod:`s2d2.config`), the CLI
flags (:mod:`s2d2.settings`) and the dashboard's controls are all derived from
that one declaration, so adding an option touches one place.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


def setting(default, label: str, help: str, *, choices=None, minimum=None, maximum=None, step=None, group="decoding"):
    """A dataclass field carrying its own description (``group`` places it in the dashboard)."""
    meta = dict(label=label, help=help, choices=choices, minimum=minimum, maximum=maximum, step=step, group=group)
    return dataclasses.field(default=default, metadata=meta)


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(str, choices))}")


def check_declared(obj) -> None:
    """Check every declared choice and bound of a config object; ``None`` means "off" where a field allows it."""
    for f in dataclasses.fields(obj):
        meta, value = f.metadata, getattr(obj, f.name)
        if not meta or value is None or isinstance(value, (tuple, bool)):
            continue
        label = f"{f.name} ({meta['label']})"
        if meta["choices"] is not None:
            check_choice(f.name, value, meta["choices"])
            continue
        if isinstance(value, float) and math.isnan(value):
            raise ValueError(f"{label} must be a number, got NaN")
        low, high = meta["minimum"], meta["maximum"]
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
            raise ValueError(f"{label} must be in {bounds}, got {value}")


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

    def shown(self, value):
        """``value`` as a form's text field holds it: a tuple as the numbers :meth:`parse` reads back."""
        return " ".join(map(str, value)) if self.kind is tuple and value is not None else value

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


def settings_of(cls, section: str | None) -> list[Setting]:
    """The declared fields of config dataclass ``cls`` as settings (``section``: its field in ``DecodeConfig``)."""
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
