"""Long worked answers: one count carried through six to eight steps.

"Ann has 5 coins. She finds 3 more. Bob gives her 4 more. She loses 2. ...
How many coins does Ann have at the end?" The solution works every step on
its own line, named after the person whose count it is:

    Ann: 5 + 3 = 8 coins. Ann: 8 + 4 = 12 coins. Ann: 12 - 2 = 10 coins. ... The answer is 17.

Answers run about 60 to 110 tokens, four to seven blocks of 16: the paper's
regime of worked solutions, where most of a decode is spent inside long
answers. Each line's first operand is the total the previous line computed,
and its result depends on it, so a decoder that fills a large block in
parallel must guess totals whose inputs are not decided yet; the name and the
item must agree with the first sentence. Left-to-right decoding conditions
each line on the ones before it.

The steps are described exactly as in the short word problems (``arith``); the
question ("at the end") and the line format tell the two families apart.
"""

from __future__ import annotations

import random

from . import Problem, TaskFamily
from .arithmetic import ITEMS, MAX_OPERAND, NAMES, draw_steps, final_answer

MIN_STEPS, MAX_STEPS = 6, 8


class Chains(TaskFamily):
    name = "chains"
    description = "One count through six to eight steps, each worked on its own line (about 60-110 tokens)."

    def sample(self, rng: random.Random) -> Problem:
        name, other = rng.sample(sorted(NAMES), 2)
        item = rng.choice(ITEMS)
        start = rng.randint(2, MAX_OPERAND)
        count = rng.randint(MIN_STEPS, MAX_STEPS)
        sentences, equations, key, total = draw_steps(rng, count, start, NAMES[name], other)
        prompt = " ".join([f"{name} has {start} {item}.", *sentences, f"How many {item} does {name} have at the end?"])
        lines = [f"{name}: {a} {sign} {n} = {b} {item}." for a, sign, n, b in equations]
        reference = " ".join(lines + [f"The answer is {total}."])
        meta = {"answer": total, "name": name, "item": item, "steps": count}
        return Problem(self.name, prompt, reference, "chains:" + " ".join([str(start), *key]), meta)

    def score(self, problem: Problem, output: str) -> bool:
        return final_answer(output) == problem.meta["answer"]
