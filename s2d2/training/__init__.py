"""How the bundled checkpoints were trained: the tokenizer, the three families' objectives and their layouts.

Not part of the engine: nothing under ``s2d2/`` outside this package imports it, and decoding needs none of it.
``python -m s2d2.training.train`` is the command (docs/TRAINING.md).
"""
