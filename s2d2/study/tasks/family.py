"""What every task family is: a problem, its split (fixed by a hash of its content key), the family's
generator and scorer. The families (:mod:`.arithmetic`, :mod:`.team`, :mod:`.chains`) build on it."""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

SPLITS = ("train", "heldout")
HELDOUT_BUCKETS = 10  # one key in ten is held out


@dataclass(frozen=True)
class Problem:
    """One task instance: what the user asks and one correct answer."""

    family: str
    prompt: str
    reference: str
    key: str
    meta: dict = field(default_factory=dict, compare=False, hash=False)


def split_of(key: str) -> str:
    """The split a content key belongs to, fixed forever by its hash."""
    digest = hashlib.sha256(key.encode()).digest()
    return "heldout" if digest[0] % HELDOUT_BUCKETS == 0 else "train"


class TaskFamily(ABC):
    """A generator of problems of one kind plus its scorer."""

    name = ""
    description = ""

    @abstractmethod
    def sample(self, rng: random.Random) -> Problem:
        """One random problem (of either split)."""

    @abstractmethod
    def score(self, problem: Problem, output: str) -> bool:
        """Whether ``output`` solves ``problem`` exactly."""

    @abstractmethod
    def recognise(self, prompt: str) -> Problem | None:
        """The problem ``prompt`` asks when it is written in this family's words, else ``None``: how a typed
        prompt is graded (the dashboard's ✓/✗) by the family's own scorer."""

    def problems(self, split: str, n: int, seed: int) -> list[Problem]:
        """``n`` distinct problems of ``split``, the same ones for the same seed."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        rng = random.Random(f"{self.name}:{split}:{seed}")
        seen: set[str] = set()
        out: list[Problem] = []
        attempts = 0
        while len(out) < n:
            attempts += 1
            if attempts > 200 * n + 1000:
                raise ValueError(f"{self.name} cannot produce {n} distinct {split} problems")
            problem = self.sample(rng)
            if split_of(problem.key) == split and problem.prompt not in seen:
                seen.add(problem.prompt)
                out.append(problem)
        return out
