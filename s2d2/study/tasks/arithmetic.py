"""Grade-school word problems with step-by-step arithmetic (the project's GSM8K).

One to three operations on small counts; the solution writes each operation as
``a + b = c.`` and ends with ``The answer is N.`` Every equation's result is
needed by the next one, so drafting the whole solution in parallel guesses
digits whose inputs are not decided yet: the place where the AR verifier earns
its forward.
"""

from __future__ import annotations

import random
import re

from .family import Problem, TaskFamily

NAMES = {
    "Ann": "she", "Mia": "she", "Zoe": "she", "Eva": "she", "Ivy": "she", "Lea": "she",
    "Amy": "she", "Kim": "she", "Sue": "she", "Joy": "she", "Fay": "she", "Gia": "she",
    "Bob": "he", "Leo": "he", "Sam": "he", "Max": "he", "Tom": "he", "Ben": "he",
    "Dan": "he", "Eli": "he", "Gus": "he", "Hal": "he", "Ned": "he", "Rex": "he",
}  # fmt: skip
ITEMS = (
    "apples", "shells", "stickers", "marbles", "coins", "books", "pens", "cards",
    "stamps", "cookies", "beads", "rocks", "crayons", "toys", "eggs", "plums",
)  # fmt: skip
GAINS = ("{P} buys {n} more.", "{P} finds {n} more.", "{P} gets {n} more from {O}.", "{O} gives {o} {n} more.")
LOSSES = ("{P} gives {n} to {O}.", "{P} loses {n}.", "{P} sells {n}.", "{P} eats {n}.")
OBJECT = {"she": "her", "he": "him"}
MAX_OPERAND = 20
MAX_TOTAL = 60
ANSWER = re.compile(r"The answer is (-?\d+)")


def final_answer(text: str) -> int | None:
    """The number after the last ``The answer is``, if any."""
    found = ANSWER.findall(text)
    return int(found[-1]) if found else None


def draw_steps(rng: random.Random, count: int, total: int, pronoun: str, other: str):
    """``count`` random gains and losses applied to ``total``, keeping every count in 0..MAX_TOTAL.

    Returns ``(sentences, equations, key, final total)``; each equation is
    ``(before, sign, n, after)``. Shared by the short word problems and the
    long chains so both describe steps in the same words.
    """
    sentences, equations, key = [], [], []
    for _ in range(count):
        can_lose = total >= 1
        can_gain = total + 1 <= MAX_TOTAL
        if can_lose and (not can_gain or rng.random() < 0.5):
            n = rng.randint(1, min(MAX_OPERAND, total))
            template, result, sign = rng.choice(LOSSES), total - n, "-"
        else:
            n = rng.randint(1, min(MAX_OPERAND, MAX_TOTAL - total))
            template, result, sign = rng.choice(GAINS), total + n, "+"
        sentence = template.format(P=pronoun, O=other, o=OBJECT[pronoun], n=n)
        sentences.append(sentence[0].upper() + sentence[1:])
        equations.append((total, sign, n, result))
        key.append(f"{sign}{n}")
        total = result
    return sentences, equations, key, total


class WordProblems(TaskFamily):
    name = "arith"
    description = "Word problems with one to three additions or subtractions, solved step by step."

    def sample(self, rng: random.Random) -> Problem:
        name, other = rng.sample(sorted(NAMES), 2)
        pronoun = NAMES[name]
        item = rng.choice(ITEMS)
        start = rng.randint(2, MAX_OPERAND)
        sentences, equations, key, total = draw_steps(rng, rng.randint(1, 3), start, pronoun, other)
        prompt = " ".join([f"{name} has {start} {item}.", *sentences, f"How many {item} does {name} have now?"])
        steps = [f"{a} {sign} {n} = {b}." for a, sign, n, b in equations]
        reference = " ".join(steps + [f"The answer is {total}."])
        return Problem(self.name, prompt, reference, "arith:" + " ".join([str(start), *key]), {"answer": total})

    def score(self, problem: Problem, output: str) -> bool:
        return final_answer(output) == problem.meta["answer"]
