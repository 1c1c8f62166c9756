"""Team picks: fields that must differ and a field that must agree.

"Pick two different players from Ann, Bob and Cal. Then cheer for the first
one." Any two distinct listed names are correct, and the cheer must repeat the
first. Each name slot alone is a near-uniform guess over the list, so filling
the slots in parallel from their marginals repeats a name or cheers for the
wrong one; left-to-right decoding conditions each slot on the ones before it.
This is the family where the dashboard shows the verifier correcting diffusion.
"""

from __future__ import annotations

import random
import re

from .arithmetic import NAMES
from .family import Problem, TaskFamily

NUMBER_WORDS = {2: "two", 3: "three"}
ANSWER = re.compile(r"The team is (.+?)\. Go (\w+)!")
PROMPT = re.compile(
    r"Pick (?P<count>two|three) different players from (?P<names>[A-Z][a-z]+(?:(?:, | and )[A-Z][a-z]+)+)\. "
    r"Then cheer for the first one\."
)


def join_names(names: list[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def parse_team(text: str) -> tuple[list[str], str] | None:
    """``(picked names, cheered name)`` from an answer, or ``None`` if malformed."""
    match = ANSWER.search(text)
    if not match:
        return None
    picked = re.split(r", | and ", match.group(1))
    return [p.strip() for p in picked], match.group(2)


class TeamPicks(TaskFamily):
    name = "team"
    description = "Pick distinct names from a list, then cheer for the first: slots that must differ or agree."

    def sample(self, rng: random.Random) -> Problem:
        picks = rng.choice((2, 3))
        candidates = rng.sample(sorted(NAMES), rng.randint(picks, picks + 1))
        chosen = rng.sample(candidates, picks)
        prompt = (
            f"Pick {NUMBER_WORDS[picks]} different players from {join_names(candidates)}. Then cheer for the first one."
        )
        reference = f"The team is {join_names(chosen)}. Go {chosen[0]}!"
        key = f"team:{picks}:" + ",".join(candidates)
        return Problem(self.name, prompt, reference, key, {"candidates": candidates, "picks": picks})

    def recognise(self, prompt: str) -> Problem | None:
        """The problem a prompt in this family's words asks (its reference: the first names listed); else ``None``."""
        match = PROMPT.fullmatch(prompt.strip())
        if match is None:
            return None
        picks = {word: n for n, word in NUMBER_WORDS.items()}[match["count"]]
        candidates = [c.strip() for c in re.split(r", | and ", match["names"])]
        if len(candidates) < picks or len(set(candidates)) != len(candidates):
            return None
        chosen = candidates[:picks]
        reference = f"The team is {join_names(chosen)}. Go {chosen[0]}!"
        key = f"team:{picks}:" + ",".join(candidates)
        return Problem(self.name, prompt.strip(), reference, key, {"candidates": candidates, "picks": picks})

    def score(self, problem: Problem, output: str) -> bool:
        parsed = parse_team(output)
        if parsed is None:
            return False
        picked, cheered = parsed
        candidates = set(problem.meta["candidates"])
        return (
            len(picked) == problem.meta["picks"]
            and len(set(picked)) == len(picked)
            and all(p in candidates for p in picked)
            and cheered == picked[0]
        )
