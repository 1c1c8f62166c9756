"""Saving and loading a comparison (AR, baseline, S2D2 traces) as one JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from s2d2.trace import READABLE_VERSIONS, SCHEMA_VERSION, Trace

# A saved comparison of the bundled model is about 0.2 MB; a hub model's long run a few MB.
MAX_BYTES = 20_000_000

RUN_OF_METHOD = {"ar": "AR", "static": "Baseline", "dynamic": "Baseline", "entropy_bounded": "Baseline", "s2d2": "S2D2"}


def bundle_json(traces: dict[str, Trace]) -> str:
    """The runs of one comparison, replayable without the model."""
    return json.dumps({"schema_version": SCHEMA_VERSION, "runs": {name: t.to_dict() for name, t in traces.items()}})


def _trace(name: str, data) -> Trace:
    """One run of a file, or a message that names what is wrong with it."""
    if not isinstance(data, dict):
        raise ValueError(f"run {name!r} is not a trace (a JSON object was expected)")
    try:
        return Trace.from_dict(data)
    except (TypeError, KeyError, AttributeError) as err:
        raise ValueError(f"run {name!r} is not a valid trace: {err}") from None


def _check_version(data: dict) -> None:
    version = data.get("schema_version")
    if version is not None and version not in READABLE_VERSIONS:
        raise ValueError(
            f"the file has schema version {version!r}; this dashboard reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))} "
            "(decode again, or re-save it with this version)"
        )


def load_bundle(text: str) -> dict[str, Trace]:
    """Runs from a saved comparison, or a single saved trace (``python -m s2d2 --trace-out``).

    Every way a file can be wrong (not JSON, too large, nested too deeply for
    the parser, another schema version, a run that is not a trace) is a
    ``ValueError`` that says which.
    """
    if len(text) > MAX_BYTES:
        raise ValueError(f"the file is {len(text) / 1e6:.1f} MB; replays are limited to {MAX_BYTES / 1e6:.0f} MB")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError("the JSON is nested too deeply to be an S2D2 trace") from None
    if not isinstance(data, dict):
        raise ValueError("not an S2D2 trace or comparison file: expected a JSON object")
    _check_version(data)
    if isinstance(data.get("runs"), dict):
        if not data["runs"]:
            raise ValueError("the file holds no runs")
        for run in data["runs"].values():
            if isinstance(run, dict):
                _check_version(run)
        return {name: _trace(name, run) for name, run in data["runs"].items()}
    if "steps" in data:
        trace = _trace("the trace", data)
        if trace.method not in RUN_OF_METHOD:
            raise ValueError(f"the trace's method {trace.method!r} is none of {', '.join(RUN_OF_METHOD)}")
        return {RUN_OF_METHOD[trace.method]: trace}
    raise ValueError("not an S2D2 trace or comparison file: it has neither 'runs' nor 'steps'")


def load_bundle_file(path: str | Path) -> dict[str, Trace]:
    """:func:`load_bundle` of a file, refusing an oversized one before reading it."""
    size = Path(path).stat().st_size
    if size > MAX_BYTES:
        raise ValueError(f"the file is {size / 1e6:.1f} MB; replays are limited to {MAX_BYTES / 1e6:.0f} MB")
    try:
        return load_bundle(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text (a saved trace is JSON)") from None
