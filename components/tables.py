"""The stats table: what each run produced, what it cost, and the speedups."""

from __future__ import annotations

import pandas as pd

from s2d2.trace import Trace


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _throughput(trace: Trace) -> float:
    s = trace.summary
    return s.generated_tokens / s.wall_seconds if s.wall_seconds else 0.0


def stats_table(runs: dict[str, Trace], reference: str = "AR", baseline: str = "Baseline") -> pd.DataFrame:
    """One row per run.

    Speedups compare tokens per forward (forwards saved) and tokens per second
    (time saved), so runs that stop at different lengths still compare fairly.
    """
    rows = []
    ref = runs.get(reference)
    base = runs.get(baseline)
    for name, trace in runs.items():
        s = trace.summary
        row = {
            "run": name,
            "method": trace.method,
            "tokens": s.generated_tokens,
            "NFE": s.nfe,
            "tokens/forward": round(s.tpf, 2),
            "wall s": round(s.wall_seconds, 3),
            "tokens/s": round(_throughput(trace), 1),
            "speedup vs AR (forwards)": _round(_ratio(s.tpf, ref.summary.tpf)) if ref else None,
            "speedup vs AR (wall)": _round(_ratio(_throughput(trace), _throughput(ref))) if ref else None,
            "speedup vs baseline (forwards)": _round(_ratio(s.tpf, base.summary.tpf)) if base else None,
            "acceptance rate": _round(s.acceptance_rate),
            "mean accepted length": _round(s.mean_accepted_length),
            "rejections": s.rejections,
            "verifications": s.verifications,
            "skipped by router": s.verifications_skipped,
        }
        rows.append(row)
    return pd.DataFrame(rows)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
