"""Write ``assets/demo_comparison.json``: the saved run the dashboard opens on.

    python -m components.make_demo

Decodes the first example with its model and preset (AR, baseline, S2D2),
exactly as the Run button would, and saves the traces.
"""

from __future__ import annotations

from .bundle import bundle_json
from .runner import ModelCache, build_configs, resolve, run_all
from .ui import DEMO_COMPARISON, examples


def main() -> None:
    first = examples()[0]
    model = ModelCache().get(first["model"])
    traces = run_all(model, first["prompt"], build_configs(resolve(first["preset"])))
    DEMO_COMPARISON.write_text(bundle_json(traces))
    for name, trace in traces.items():
        print(f"{name}: {trace.summary.nfe} forwards, {trace.text!r}")
    print(f"wrote {DEMO_COMPARISON}")


if __name__ == "__main__":
    main()
