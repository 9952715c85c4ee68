"""Skips that hide the real path (issue 15, class 8): with `CI=true` every way a test can skip --
`missing()` (what conftest's needs_uprobes and the perf/Chromium checks call), a bare
`pytest.skip`, `skipif`, `importorskip`, a module skipped at collection -- fails instead, and the
failure names the missing facility and the set-up step that provides it; without CI they stay
skips. Runs a real pytest in a subprocess on throwaway test modules that use the suite's own
conftest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
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
MODULE_SKIP = '''
import pytest

pytest.importorskip("labwarden_no_such_module")


def test_never_collected():
    pass
'''


def _module(text: str, name: str) -> Iterator[Path]:
    path = TESTS / f"test_zz_ci_{name}_{os.getpid()}.py"
    path.write_text(text)
    try:
        yield path
    finally:
        path.unlink()


@pytest.fixture
def probe() -> Iterator[Path]:
    yield from _module(PROBE, "probe")


@pytest.fixture
def module_skip() -> Iterator[Path]:
    yield from _module(MODULE_SKIP, "module")


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
    # each failure names what is missing and the set-up step that provides it
    for facility, step in (("Missing: uprobes (tracefs mounted", "mounts tracefs"),
                           ("Missing: dropbear", "apt-get install dropbear-bin"),
                           ("Missing: headless Chromium", "apt-get install chromium"),
                           ("Missing: the Python package 'labwarden_no_such_package'",
                            "pip install -e '.[dev]'")):
        assert facility in out and step in out, (facility, out)
    assert out.count("CI=true: a skipped test fails in CI") >= 4, out  # also in the -rA summary


def test_in_ci_a_module_skipped_at_collection_fails(module_skip: Path) -> None:
    code, out = _run(module_skip, "true")
    assert code != 0 and "skipped" not in out.strip().splitlines()[-1], out
    assert "Missing: the Python package 'labwarden_no_such_module'" in out, out
    code, out = _run(module_skip, None)
    assert code in (0, 5) and re.search(r"1 skipped", out), out  # 5: nothing ran, no failure


def test_outside_ci_they_stay_skips(probe: Path) -> None:
    code, out = _run(probe, None)
    assert code == 0, out
    assert re.search(r"1 passed, 4 skipped", out), out
    code, out = _run(probe, "false")
    assert code == 0 and re.search(r"1 passed, 4 skipped", out), out
