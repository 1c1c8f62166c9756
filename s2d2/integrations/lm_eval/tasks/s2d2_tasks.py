"""Datasets and scoring of the ``s2d2_arith`` and ``s2d2_team`` lm-eval tasks.

The documents are the held-out problems ``s2d2.study.evaluate`` draws
(:func:`s2d2.study.evaluate.heldout_problems`, seed 2026), generated on the fly: no
file, no Hub. Document ``i`` is problem ``i``, so ``--limit 20`` evaluates the
same 20 problems as ``python -m s2d2.study.evaluate --problems 20``. A document is
scored by its family's own exact scorer, so accuracy means what it means in
``s2d2.study.evaluate``.
"""

from __future__ import annotations

import json

from s2d2.study.evaluate import heldout_problems
from s2d2.study.tasks import Problem, get_family

HELDOUT_PROBLEMS = 500  # the model card's table; --limit takes a prefix (the draw is prefix-stable)


def _dataset(family: str, problems: int):
    import datasets

    rows = [
        {"family": p.family, "prompt": p.prompt, "reference": p.reference, "key": p.key, "meta": json.dumps(p.meta)}
        for p in heldout_problems(int(problems), [family])
    ]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def arith_dataset(problems: int = HELDOUT_PROBLEMS, **_metadata):
    """The word-problem documents. lm-eval passes every model argument and ``--metadata``
    entry here; only ``problems`` (``--metadata problems=N``) means something to it."""
    return _dataset("arith", problems)


def team_dataset(problems: int = HELDOUT_PROBLEMS, **_metadata):
    """The team-pick documents; see :func:`arith_dataset`."""
    return _dataset("team", problems)


def process_results(doc: dict, results: list[str]) -> dict:
    """``exact_match``: the family's scorer on the generated text."""
    problem = Problem(doc["family"], doc["prompt"], doc["reference"], doc["key"], json.loads(doc["meta"]))
    return {"exact_match": float(get_family(problem.family).score(problem, results[0]))}
