"""Long worked answers: one count carried through six to eight steps.

"Ann has 5 coins. She finds 3 more. Bob gives her 4 more. She loses 2. ...
How many coins does Ann have at the end?" The solution works every step on
its own numbered line:

    Step 1: 5 + 3 = 8. Step 2: 8 + 4 = 12. Step 3: 12 - 2 = 10. ... The answer is 17.

Answers run about 60 to 100 tokens, four to seven blocks of 16: the paper's
regime of worked solutions, where most of a decode is spent inside long
answers. Each line's first operand is the total the previous line computed,
and its result depends on it, so a decoder that fills a large block in
parallel must guess totals whose inputs are not decided yet (and, as numbers
grow from one digit to two, even where each line starts). Left-to-right
decoding conditions each line on the ones before it.

A first design tracked two people, each line named after the person it
changed; after 200 training steps the model still wrote other names and items
than the prompt's (0-3% of answers right), so lines are numbered instead of
named, which leaves the carried totals as the hard part.

The steps are described exactly as in the short word problems (``arith``); the
question ("at the end") and the line format tell the two families apart.
"""

from __future__ import annotations

import random

from .arithmetic import ITEMS, MAX_OPERAND, NAMES, draw_steps, final_answer, read_steps, work_steps
from .family import Problem, TaskFamily

MIN_STEPS, MAX_STEPS = 6, 8


class Chains(TaskFamily):
    name = "chains"
    description = "One count through six to eight steps, each worked on its own numbered line (about 60-100 tokens)."

    def sample(self, rng: random.Random) -> Problem:
        name, other = rng.sample(sorted(NAMES), 2)
        item = rng.choice(ITEMS)
        start = rng.randint(2, MAX_OPERAND)
        count = rng.randint(MIN_STEPS, MAX_STEPS)
        sentences, equations, key, total = draw_steps(rng, count, start, NAMES[name], other)
        prompt = " ".join([f"{name} has {start} {item}.", *sentences, f"How many {item} does {name} have at the end?"])
        lines = [f"Step {k}: {a} {sign} {n} = {b}." for k, (a, sign, n, b) in enumerate(equations, 1)]
        reference = " ".join(lines + [f"The answer is {total}."])
        meta = {"answer": total, "name": name, "item": item, "steps": count}
        return Problem(self.name, prompt, reference, "chains:" + " ".join([str(start), *key]), meta)

    def score(self, problem: Problem, output: str) -> bool:
        return final_answer(output) == problem.meta["answer"]

    def recognise(self, prompt: str) -> Problem | None:
        """The problem a prompt in this family's words asks, its reference worked out; else ``None``.

        Any number of steps is read (a learner may type a shorter chain); the answer is still exact.
        """
        read = read_steps(prompt, "How many {item} does {name} have at the end?")
        if read is None or not read[3]:
            return None
        name, item, start, steps = read
        equations = work_steps(start, steps)
        total = equations[-1][3]
        lines = [f"Step {k}: {a} {sign} {n} = {b}." for k, (a, sign, n, b) in enumerate(equations, 1)]
        meta = {"answer": total, "name": name, "item": item, "steps": len(steps)}
        key = "chains:" + " ".join([str(start), *(f"{sign}{n}" for sign, n in steps)])
        return Problem(self.name, prompt.strip(), " ".join(lines + [f"The answer is {total}."]), key, meta)
