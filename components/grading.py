"""Right or wrong: a run's answer against the task families' reference, when the prompt is one of theirs.

Every example is a held-out task problem, and a prompt typed in the families' own words has one correct
answer too; the families' scorers (the benchmarks' own) decide. Other prompts are not graded: the page
then says nothing about correctness rather than guess.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from s2d2.study.tasks import families, recognise
from s2d2.trace import Trace


@dataclass(frozen=True)
class Grade:
    """Whether one run's answer is right, and the reference it was held against."""

    correct: bool
    family: str
    reference: str
    expected: str  # what a right answer says, short enough for a headline


def _expected(problem) -> str:
    """The number a word problem asks for; for a team pick (many answers are right) one right answer."""
    if "answer" in problem.meta:
        return f"the answer is {problem.meta['answer']}"
    return f"a right answer is “{problem.reference}”"


def grade(trace: Trace) -> Grade | None:
    """The run's grade, or ``None`` when its prompt is not a task problem."""
    problem = recognise(trace.prompt)
    if problem is None:
        return None
    correct = families()[problem.family].score(problem, trace.text)
    return Grade(correct, problem.family, problem.reference, _expected(problem))


def grade_badge(result: Grade | None) -> str:
    """✓ or ✗ beside a run's caption, the reference in its tooltip; nothing for an ungraded prompt."""
    if result is None:
        return ""
    mark, word = ("✓", "right") if result.correct else ("✗", "wrong")
    title = html.escape(f"Reference ({result.family}): {result.reference}", quote=True)
    return f'<span class="grade grade-{word}" title="{title}">{mark} {word}</span>'
