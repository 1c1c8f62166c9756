"""Long worked answers: two people's counts tracked through four to eight steps.

"Ann has 5 coins and Bob has 7 coins. Ann finds 3 more. Ann gives 2 to Bob.
Bob loses 4. ... How many coins does Bob have now?" The solution works every
step on its own line, named after the person it changes, and a gift changes
both people, so it takes two lines:

    Ann: 5 + 3 = 8. Ann: 8 - 2 = 6. Bob: 7 + 2 = 9. Bob: 9 - 4 = 5. The answer is 5.

Answers run 60 to 150 tokens, four to ten blocks of 16: the paper's regime of
worked solutions, where most of a decode is spent inside long answers. Two
things in each line cannot be guessed in parallel: the first operand is a
carried total, often written several lines earlier (the other person's lines
sit in between), and the name must agree with the step the line works, in
order. A decoder that fills a large block from per-slot marginals writes lines
for the wrong person or carries the wrong total; left-to-right decoding
conditions each line on the ones before it.
"""

from __future__ import annotations

import random

from . import Problem, TaskFamily
from .arithmetic import ITEMS, MAX_OPERAND, MAX_TOTAL, NAMES, final_answer

MIN_STEPS, MAX_STEPS = 4, 8
MIN_LINES, MAX_LINES = 6, 12  # a gift takes two lines; six lines are about 60 tokens
GAINS = ("{A} finds {n} more.", "{A} buys {n} more.", "{A} gets {n} more.")
LOSSES = ("{A} loses {n}.", "{A} sells {n}.", "{A} eats {n}.")
GIFT = "{A} gives {n} to {B}."


def _line(name: str, before: int, sign: str, n: int) -> str:
    after = before + n if sign == "+" else before - n
    return f"{name}: {before} {sign} {n} = {after}."


class Chains(TaskFamily):
    name = "chains"
    description = "Two people's counts through four to eight steps, each worked on its own line (about 60-150 tokens)."

    def sample(self, rng: random.Random) -> Problem:
        people = rng.sample(sorted(NAMES), 2)
        item = rng.choice(ITEMS)
        counts = {p: rng.randint(2, MAX_OPERAND) for p in people}
        sentences = [f"{people[0]} has {counts[people[0]]} {item} and {people[1]} has {counts[people[1]]} {item}."]
        lines, key = [], [f"{p}{counts[p]}" for p in people]
        target_lines = rng.randint(MIN_LINES, MAX_LINES)
        steps = 0
        while steps < MIN_STEPS or (len(lines) < target_lines and steps < MAX_STEPS):
            steps += 1
            giver = rng.choice(people)
            taker = people[1 - people.index(giver)]
            kind = rng.choice(("gift", "gain", "loss"))
            if kind == "gift" and counts[giver] >= 1 and counts[taker] < MAX_TOTAL:
                n = rng.randint(1, min(MAX_OPERAND, counts[giver], MAX_TOTAL - counts[taker]))
                sentences.append(GIFT.format(A=giver, B=taker, n=n))
                lines += [_line(giver, counts[giver], "-", n), _line(taker, counts[taker], "+", n)]
                counts[giver] -= n
                counts[taker] += n
                key.append(f"{giver}>{n}")
            elif kind == "loss" and counts[giver] >= 1 or counts[giver] >= MAX_TOTAL:
                n = rng.randint(1, min(MAX_OPERAND, counts[giver]))
                sentences.append(rng.choice(LOSSES).format(A=giver, n=n))
                lines.append(_line(giver, counts[giver], "-", n))
                counts[giver] -= n
                key.append(f"{giver}-{n}")
            else:
                n = rng.randint(1, min(MAX_OPERAND, MAX_TOTAL - counts[giver]))
                sentences.append(rng.choice(GAINS).format(A=giver, n=n))
                lines.append(_line(giver, counts[giver], "+", n))
                counts[giver] += n
                key.append(f"{giver}+{n}")
        asked = rng.choice(people)
        sentences.append(f"How many {item} does {asked} have now?")
        reference = " ".join(lines + [f"The answer is {counts[asked]}."])
        meta = {"answer": counts[asked], "asked": asked, "steps": steps}
        return Problem(self.name, " ".join(sentences), reference, "chains:" + " ".join(key) + f"?{asked}", meta)

    def score(self, problem: Problem, output: str) -> bool:
        return final_answer(output) == problem.meta["answer"]
