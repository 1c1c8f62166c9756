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


def _template_pattern(template: str) -> str:
    """A step template as a regex: the pronoun, the other person, the object pronoun and the count captured."""
    pattern = re.escape(template)
    for field, group in (("P", r"(?P<P>She|He)"), ("O", r"(?P<O>[A-Z][a-z]+)"), ("o", r"(?:her|him)"), ("n", r"(?P<n>\d+)")):
        pattern = pattern.replace(re.escape("{" + field + "}"), group)
    return pattern


STEP_PATTERNS = [(re.compile(_template_pattern(t)), "+") for t in GAINS] + [
    (re.compile(_template_pattern(t)), "-") for t in LOSSES
]
OPENING = re.compile(r"(?P<name>[A-Z][a-z]+) has (?P<start>\d+) (?P<item>[a-z]+)\.")


def read_steps(prompt: str, question: str) -> tuple[str, str, int, list[tuple[str, int]]] | None:
    """``(name, item, start, [(sign, n), ...])`` of a prompt written as :func:`draw_steps` words problems,
    ending with ``question`` (formatted with the item and name); ``None`` for any other text.

    It lets the dashboard grade a typed prompt: a prompt in the families' own words has one correct answer.
    """
    sentences = re.findall(r"[^.?!]+[.?!]", prompt.strip())
    if len(sentences) < 2 or (opening := OPENING.fullmatch(sentences[0].strip())) is None:
        return None
    name, item = opening["name"], opening["item"]
    if sentences[-1].strip() != question.format(item=item, name=name):
        return None
    steps = []
    for sentence in sentences[1:-1]:
        found = next(((m, sign) for pattern, sign in STEP_PATTERNS if (m := pattern.fullmatch(sentence.strip()))), None)
        if found is None:
            return None
        match, sign = found
        steps.append((sign, int(match["n"])))
    return name, item, int(opening["start"]), steps


def work_steps(start: int, steps: list[tuple[str, int]]) -> list[tuple[int, str, int, int]]:
    """Each step's ``(before, sign, n, after)`` from the start."""
    equations, total = [], start
    for sign, n in steps:
        after = total + n if sign == "+" else total - n
        equations.append((total, sign, n, after))
        total = after
    return equations


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

    def recognise(self, prompt: str) -> Problem | None:
        """The problem a prompt in this family's words asks, its reference worked out; else ``None``."""
        read = read_steps(prompt, "How many {item} does {name} have now?")
        if read is None or not 1 <= len(read[3]) <= 3:
            return None
        name, item, start, steps = read
        equations = work_steps(start, steps)
        total = equations[-1][3]
        reference = " ".join([f"{a} {sign} {n} = {b}." for a, sign, n, b in equations] + [f"The answer is {total}."])
        key = "arith:" + " ".join([str(start), *(f"{sign}{n}" for sign, n in steps)])
        return Problem(self.name, prompt.strip(), reference, key, {"answer": total})
