"""Write ``assets/demo_comparison.json``: the saved run the dashboard opens on.

    python -m components.make_demo

Decodes the first example with the default settings (AR, baseline, S2D2) on the
bundled model, exactly as the Run button would, and saves the traces.
"""

from __future__ import annotations

from s2d2.models import DEFAULT_MODEL

from .bundle import bundle_json
from .runner import ModelCache, Settings, build_configs, run_all
from .ui import DEMO_COMPARISON, examples


def main() -> None:
    model = ModelCache().get(DEFAULT_MODEL)
    traces = run_all(model, examples()[0], build_configs(Settings()))
    DEMO_COMPARISON.write_text(bundle_json(traces))
    for name, trace in traces.items():
        print(f"{name}: {trace.summary.nfe} forwards, {trace.text!r}")
    print(f"wrote {DEMO_COMPARISON}")


if __name__ == "__main__":
    main()
