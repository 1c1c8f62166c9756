"""``python -m s2d2.lm_eval --model s2d2 --model_args preset=sdar-b --tasks s2d2_arith``: see :mod:`.harness`."""

from .harness import main

if __name__ == "__main__":
    main()
