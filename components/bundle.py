"""Saving and loading a comparison (AR, baseline, S2D2 traces) as one JSON file."""

from __future__ import annotations

import json

from s2d2.trace import SCHEMA_VERSION, Trace

RUN_OF_METHOD = {"ar": "AR", "static": "Baseline", "dynamic": "Baseline", "s2d2": "S2D2"}


def bundle_json(traces: dict[str, Trace]) -> str:
    """The runs of one comparison, replayable without the model."""
    return json.dumps({"schema_version": SCHEMA_VERSION, "runs": {name: t.to_dict() for name, t in traces.items()}})


def load_bundle(text: str) -> dict[str, Trace]:
    """Runs from a saved comparison, or a single saved trace (``python -m s2d2 --trace-out``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err}") from None
    if isinstance(data, dict) and isinstance(data.get("runs"), dict):
        if not data["runs"]:
            raise ValueError("the file holds no runs")
        return {name: Trace.from_dict(run) for name, run in data["runs"].items()}
    if isinstance(data, dict) and "steps" in data:
        trace = Trace.from_dict(data)
        return {RUN_OF_METHOD[trace.method]: trace}
    raise ValueError("not an S2D2 trace or comparison file")
