"""Config fields that declare themselves.

A setting is declared once, on its config dataclass: default, label, help,
choices and bounds. Validation (here), the CLI flags and the dashboard's
controls (:mod:`s2d2.settings`) are all derived from that one declaration, so
adding an option touches one place.
"""

from __future__ import annotations

import dataclasses
import math


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
