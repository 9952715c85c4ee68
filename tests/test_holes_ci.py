"""Skips that hide the real path (issue 15, class 8): with `CI=true` every way a test can skip --
`missing()` (what conftest's needs_uprobes and the perf/Chromium checks call), a bare
`pytest.skip`, `skipif`, `importorskip` -- fails instead; without CI they stay skips. Runs a
real pytest in a subprocess on a throwaway test module that uses the suite's own conftest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PROBE = '''
import pytest
from .ci_skips import missing


def test_kernel_facility_missing():
    missing("uprobes unavailable: tracefs not mounted (a stand-in reason)")


def test_bare_skip():
    pytest.skip("dropbear not installed (a stand-in reason)")


@pytest.mark.skipif(True, reason="chromium not installed (a stand-in reason)")
def test_skipif():
    pass


def test_importorskip():
    pytest.importorskip("labwarden_no_such_package")


def test_runs():
    assert True
'''


@pytest.fixture
def probe() -> Path:
    path = TESTS / f"test_zz_ci_probe_{os.getpid()}.py"
    path.write_text(PROBE)
    try:
        yield path
    finally:
        path.unlink()


def _run(probe: Path, ci: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                          str(probe)], capture_output=True, text=True, cwd=TESTS.parent, env=env,
                         timeout=120)
    return res.returncode, res.stdout


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_in_ci_every_skip_fails(probe: Path, ci: str) -> None:
    code, out = _run(probe, ci)
    assert code == 1, out
    last = out.strip().splitlines()[-1]
    failed = sum(int(n) for n in re.findall(r"(\d+) (?:failed|errors?)", last))
    assert failed == 4 and "1 passed" in last and "skipped" not in last, last  # skipif: a setup error
    assert "CI must run this path" in out and "a skipped test fails in CI" in out


def test_outside_ci_they_stay_skips(probe: Path) -> None:
    code, out = _run(probe, None)
    assert code == 0, out
    assert re.search(r"1 passed, 4 skipped", out), out
    code, out = _run(probe, "false")
    assert code == 0 and re.search(r"1 passed, 4 skipped", out), out
