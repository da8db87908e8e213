"""Graded exercises (notebooks 02–09): ``check`` runs your function against hetlab's own on random
inputs, or runs a piece of the mechanism for real, and prints one line: right, the typical mistake
your function made, or "your turn" while the skeleton is still empty. It keeps each result, with the
source you wrote, for the report; the answers are in ``docs/answers/``.
"""
from __future__ import annotations

import copy
import inspect
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from hetlab.course.exercises import EXERCISES, Exercise, said, show
from hetlab.errors import HetlabError
from hetlab.store import measured

RIGHT, WRONG, YOUR_TURN = "right", "wrong", "your turn"
CASES = 25   # random inputs per check


@dataclass(frozen=True)
class Verdict:
    """What ``grade`` found: ``status`` is RIGHT, WRONG or YOUR_TURN; ``line`` says it in one line."""

    status: str
    line: str

    def __str__(self) -> str:
        return self.line


def _your_turn(exercise: Exercise) -> Verdict:
    return Verdict(YOUR_TURN, f"your turn: write {exercise.signature} above, then run this again.")


def _call(fn: Callable, args: tuple):
    return fn(*copy.deepcopy(args))   # a function that changes its inputs changes no other answer


def grade(name: str, fn: Callable | None, *parts) -> Verdict:
    """Run ``fn`` against exercise ``name``'s reference on ``CASES`` random inputs (seed 0), or, for a
    piece of the mechanism, run it for real with ``parts`` (05's Worker and Server)."""
    if name not in EXERCISES:
        raise HetlabError(f"no exercise {name!r}: pick one of {sorted(EXERCISES)}.")
    exercise, rng = EXERCISES[name], random.Random(0)
    if fn is None or fn is Ellipsis:
        return _your_turn(exercise)
    if not callable(fn):
        return Verdict(WRONG, f"not yet: {exercise.name} should be a function, got {type(fn).__name__}.")
    if exercise.cases is None:
        return _ran(exercise, fn, parts)
    inputs = [exercise.cases(rng) for _ in range(CASES)]
    answers = []
    for args in inputs:
        try:
            answer = _call(fn, args)
        except NotImplementedError:
            return _your_turn(exercise)
        except Exception as e:   # the learner's bug, in one line
            return Verdict(WRONG, f"not yet: {exercise.name}{show(args)} raised {type(e).__name__}: {e}")
        if answer is None or answer is Ellipsis:
            return _your_turn(exercise) if not answers else \
                Verdict(WRONG, f"not yet: {exercise.name}{show(args)} returned {answer!r}; every input needs an answer.")
        answers.append(answer)
    expected = [_call(exercise.reference, args) for args in inputs]
    wrong = [i for i, (a, e) in enumerate(zip(answers, expected)) if not exercise.same(a, e)]
    if not wrong:
        right = Verdict(RIGHT, f"right: your {exercise.name} agrees with hetlab's on {CASES} random inputs.")
        return right if exercise.run is None else _ran(exercise, fn, parts, right)
    i = wrong[0]
    hint = _named_mistake(exercise, inputs, answers)
    return Verdict(WRONG, f"not yet: {exercise.name}{show(inputs[i])} gave {show(answers[i])}, "
                          f"expected {show(expected[i])}" + (f" — {hint}." if hint else "."))


def _ran(exercise: Exercise, fn: Callable, parts: tuple = (), not_live: Verdict | None = None) -> Verdict:
    """Grade by running ``fn`` for real (``Exercise.run``), the line saying where it ran; ``not_live``:
    the verdict when nothing could run live (no cluster connected)."""
    try:
        problem, where = exercise.run(fn, *parts)
    except NotImplementedError:
        return _your_turn(exercise)
    except Exception as e:   # the learner's piece raised where the grader ran it: their bug, in one line
        return Verdict(WRONG, f"not yet: {exercise.name} raised {said(e)}.")
    if where is None and not_live is not None:
        return not_live
    if problem is None:
        return Verdict(RIGHT, f"right: your {exercise.name} ran for real {where or 'here'} and did what hetlab's does.")
    return Verdict(WRONG, f"not yet: {f'ran {where}; ' if where else ''}{problem}.")


def _named_mistake(exercise: Exercise, inputs: Sequence[tuple], answers: Sequence) -> str | None:
    """The typical mistake that gives the learner's answers on every input, if one does."""
    for mistake, hint in exercise.mistakes:
        if all(exercise.same(a, _call(mistake, args)) for args, a in zip(inputs, answers)):
            return hint
    return None


def written(*pieces) -> str:
    """What the learner wrote, for the report: each function's source, a notebook class's methods, else
    a note saying so."""
    out = []
    for piece in pieces:
        try:
            out.append(inspect.getsource(piece).rstrip())
            continue
        except (OSError, TypeError):
            pass
        methods = [m for m in vars(piece).values() if inspect.isfunction(m)] if inspect.isclass(piece) else []
        try:
            out.append(f"class {piece.__name__}:   # its methods\n" +
                       "\n".join(inspect.getsource(m).rstrip() for m in methods))
        except (OSError, TypeError):
            methods = []
        if not methods:
            out.append(f"# {getattr(piece, '__name__', type(piece).__name__)}: its source could not be read "
                       f"here (not written in a cell or a file)")
    return "\n\n".join(out)


def check(name: str, fn: Callable | None, *parts) -> None:
    """Grade ``fn`` (see ``grade``), print the one line and keep it, with what the learner wrote, for the report."""
    verdict = grade(name, fn, *parts)
    print(verdict.line)
    source = written(fn, *parts) if verdict.status != YOUR_TURN else ""
    try:
        measured.save_graded(name, EXERCISES[name].notebook, verdict.status, verdict.line, source=source)
    except (OSError, HetlabError) as e:        # the grade stands; only the report misses it
        print(f"(not kept for your report: {e})")
