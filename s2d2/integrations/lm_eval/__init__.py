"""lm-evaluation-harness integration: the ``s2d2`` model, decode metrics, offline tasks.

Needs ``lm_eval`` (``requirements-dev.txt``); the engine and the dashboard do not.
Importing this package registers the ``s2d2`` model with lm-eval::

    python -m s2d2.lm_eval --model s2d2 --model_args preset=sdar-b,acceptance=greedy \\
        --tasks s2d2_arith --apply_chat_template

or from Python, ``s2d2.integrations.lm_eval.simple_evaluate(model="s2d2", model_args=..., tasks=[...])``
with ``task_manager=TaskManager(include_path=str(TASKS_DIR))`` for the project's tasks.
See docs/EVALUATION.md.
"""

from ...likelihood import ar_logprobs
from .harness import TASKS_DIR, main, simple_evaluate
from .model import S2D2LM

__all__ = ["S2D2LM", "TASKS_DIR", "ar_logprobs", "main", "simple_evaluate"]
