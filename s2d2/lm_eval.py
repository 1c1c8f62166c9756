"""``python -m s2d2.lm_eval``: the short command of :mod:`s2d2.integrations.lm_eval` (docs/EVALUATION.md)."""

from .integrations.lm_eval.harness import main

if __name__ == "__main__":
    main()
