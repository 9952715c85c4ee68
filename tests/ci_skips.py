"""In CI (`CI=true`) a skipped test is a failed one: a missing kernel facility or package must not
turn a green run into one where the uprobe, perf, Chromium, sshd or dropbear paths never ran.

A pytest plugin (loaded by tests/conftest.py), so it holds for every skip -- `pytest.skip`,
`skipif`, `importorskip`, ones added later -- not only those that call `missing()`. Outside CI
a skip stays a skip and says exactly why.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any, NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(reason: str) -> NoReturn:
    """Skip: this host lacks what the test needs (`reason` says what and how to get it). In CI
    that is a failure."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}: CI must run this path (install or enable it)",
                    pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI=true: a skipped test fails in CI ({reason})"
