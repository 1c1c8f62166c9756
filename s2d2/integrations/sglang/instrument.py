"""Benchmark instrumentation: count a server's forwards from outside any algorithm.

With ``S2D2_SGLANG_FORWARD_COUNT=FILE`` in a server's environment, registration
wraps SGLang's ``ModelRunner.forward`` so that every forward of the scheduler
process, whatever algorithm runs, writes ``calls rows`` to FILE: the forwards and
the request rows they served. Tokens per forward is then tokens over rows, the
same per-request count as the engine's NFE.
"""

from __future__ import annotations

import os
from pathlib import Path

ENVIRONMENT = "S2D2_SGLANG_FORWARD_COUNT"


def count_forwards_if_asked() -> None:
    """Wrap ``ModelRunner.forward`` once when the environment names a count file."""
    path = os.environ.get(ENVIRONMENT)
    if not path:
        return
    from sglang.srt.model_executor.model_runner import ModelRunner

    if getattr(ModelRunner.forward, "counts_forwards", False):
        return
    original = ModelRunner.forward
    totals = [0, 0]

    def forward(self, forward_batch, *args, **kwargs):
        totals[0] += 1
        totals[1] += forward_batch.batch_size
        Path(path).write_text(f"{totals[0]} {totals[1]}")
        return original(self, forward_batch, *args, **kwargs)

    forward.counts_forwards = True
    ModelRunner.forward = forward


def read_counts(path: Path) -> tuple[int, int]:
    """``(forwards, rows)`` so far; zeros before the first forward."""
    text = Path(path).read_text() if Path(path).exists() else ""
    calls, rows = (int(x) for x in text.split()) if text else (0, 0)
    return calls, rows
