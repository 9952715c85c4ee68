"""No test asserts that a feature is fast against a fixed number of seconds: the suite shares a
2-core host with measuring work, and a bound like `took < 1.0` fails there for the host's load,
not for the feature (a catastrophic-regex test once failed at 1.24 s). What a test asserts of a
duration is a relation seen side by side in the same run -- an order (the suspect runs again
before its window would have ended by itself; the build returns while a sleep as long as its
own still runs) or a ratio to another measurement or to the feature's own setting.

This guard reads tests/*.py with `ast` and fails, naming file:line, for an `assert` (or an `if`
that fails the test) comparing a duration-like expression -- its names say took, elapsed,
waited, seconds, duration, wall, time, `_s` or `_ms` -- with `<`/`<=` against a number written
in the test (`8 + 25` too), or the mirror `1.0 > took`. A lower bound (`waited > deadline_s`)
is no speed claim and passes, as do timeouts that only stop a hung test (`wait_for(timeout=)`,
`fail_after`, a poll's deadline that fails with a message)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
DURATION = re.compile(r"took|elapsed|wait|second|duration|wall|time|monotonic|perf_counter|latency"
                      r"|_s$|_ms$", re.IGNORECASE)
"""A name (variable, attribute or function) in the bounded side that says it is a duration."""
ALLOWED: dict[tuple[str, str], str] = {}
"""(file, the comparison as ast.unparse writes it) -> why it must stay. Empty: every duration
bound the suite had became an order or a ratio. An entry needs a reason that the host's load
cannot break it (say so here), not that it has not failed yet."""


def _numeric(node: ast.expr) -> bool:
    """A number written in the test: a literal, or arithmetic of literals only (`1.5 + 2`)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    return False


def _durationish(node: ast.expr) -> bool:
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    names += [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
    return any(DURATION.search(name) for name in names)


def _fails(body: list[ast.stmt]) -> bool:
    """An `if` body that fails the test: pytest.fail(...) or raise AssertionError."""
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.fail":
            return True
        if isinstance(node, ast.Raise) and node.exc is not None \
                and "AssertionError" in ast.unparse(node.exc):
            return True
    return False


def upper_bounds(source: str) -> list[tuple[int, str]]:
    """(line, comparison) for each fixed-number upper bound on a duration that the source
    asserts (in an `assert`, or in an `if` whose body fails the test)."""
    found = []
    tree = ast.parse(source)
    # (condition, whether it holds when the test passes): an `if` that fails states the opposite
    checked = [(n.test, True) for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    checked += [(n.test, False) for n in ast.walk(tree) if isinstance(n, ast.If) and _fails(n.body)]
    for test, holds in checked:
        for cmp in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
            sides = [cmp.left, *cmp.comparators]
            for left, op, right in zip(sides, cmp.ops, sides[1:], strict=False):
                if not isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
                    continue
                # the side kept below the other while the test passes is the bounded one
                below = isinstance(op, ast.Lt | ast.LtE) == holds
                bounded, bound = (left, right) if below else (right, left)
                if _numeric(bound) and _durationish(bounded):
                    found.append((cmp.lineno, ast.unparse(cmp)))
    return found


@pytest.mark.parametrize("source, flagged", [
    ("assert watch.took(1.0) < 1.0", True),
    ("assert time.monotonic() - t0 < 15 and res.exit_code == 1", True),
    ("assert 1.4 < waited < 1.5 + 2", True),
    ("assert took < 8 + 25, took", True),
    ("assert res.stopped and res.duration_s <= 15", True),
    ("assert 2.0 > loop.time() - t0", True),
    ("if time.monotonic() - t0 > 30:\n    pytest.fail('slow')", True),
    ("assert took < len(densities) * reps * window_s", False),  # a relation to the call's own
    ("assert waited > deadline_s", False),  # a lower bound: no speed claim
    ("assert again.duration_s < rec.duration_s / 5", False),  # a ratio of two measurements
    ("assert len(hits) < 3 and rate <= 0.05 * 60", False),  # no duration
    ("deadline = time.monotonic() + 60", False),  # no assertion
])
def test_the_guard_sees_a_fixed_bound_on_a_duration(source: str, flagged: bool) -> None:
    """The guard can fail: each spelling of the rule's breach is caught, a relation is not."""
    assert bool(upper_bounds(source)) == flagged, upper_bounds(source)


def test_no_test_bounds_a_duration_by_a_fixed_number_of_seconds() -> None:
    breaches, used = [], set()
    for path in sorted(TESTS.glob("*.py")):
        for line, comparison in upper_bounds(path.read_text()):
            if (path.name, comparison) in ALLOWED:
                used.add((path.name, comparison))
            else:
                breaches.append(f"tests/{path.name}:{line}: {comparison}")
    assert not breaches, ("a fixed number of seconds bounds a duration -- assert an order or a "
                          "ratio measured in the same run instead:\n" + "\n".join(breaches))
    assert used == ALLOWED.keys(), f"allowed, but no longer in the tests: {ALLOWED.keys() - used}"
