"""Shared fixtures: a real vlab (processes, SSH on loopback) and a real qlab (a Debian kernel under
QEMU, booted through labgrid), each always brought down."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwarden.lab.host import tracefs
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout
from tests.qlab_fixtures import Qlab, running_qlab

# the hooks: in CI a skip fails, naming what is missing and the set-up step that provides it
from .ci_skips import missing, pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def _bring_up(root: Path) -> VlabLayout:
    control.up(root)
    return VlabLayout.at(root)


@pytest.fixture(scope="module")
def vlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VlabLayout]:
    """A running vlab for one test module; brought down even when a test fails."""
    root = tmp_path_factory.mktemp("vlab")
    try:
        yield _bring_up(root)
    finally:
        control.down(root)


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VlabLayout]:
    """A vlab for one test module that changes its state (flashes, reboots, leases)."""
    root = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"))
    try:
        yield _bring_up(root)
    finally:
        control.down(root)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fresh_vlab(tmp_path: Path) -> Iterator[VlabLayout]:
    """A vlab of this test's own (for tests that break things on purpose)."""
    try:
        yield _bring_up(tmp_path / "vlab")
    finally:
        control.down(tmp_path / "vlab")


@functools.cache
def uprobes_reason() -> str | None:
    """Asked once per run: on a wedged tracefs every ask costs seconds and a stuck process."""
    return tracefs.available()


def needs_uprobes() -> None:
    reason = uprobes_reason()
    if reason:
        missing(f"uprobes unavailable: {reason}")
    if shutil.which("perf") is None:
        missing("perf not installed (apt-get install linux-perf)")


def vlab_probes(layout: VlabLayout) -> list[str]:
    """uprobes registered in the host's tracefs on this vlab's files (tracefs is kernel-wide)."""
    try:
        lines = (tracefs.TRACEFS / "uprobe_events").read_text().splitlines()
    except OSError:
        return []
    return [ln for ln in lines if str(layout.root) in ln]


@pytest.fixture
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


LONG = "long"
"""Tests longer than `make test`'s 30 minutes can hold (the qlab loop: ~10 min of real boots on
the icount clock). `make test-long` runs them; `pytest --long` adds them to any run."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked `long` (make test-long runs only those)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    # deselected, not skipped: a skip means a missing facility (and fails in CI); these are left
    # out of the default run on purpose, and the summary line counts them as deselected
    long = [item for item in items if item.get_closest_marker(LONG)]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker(LONG)]


def pytest_report_header() -> list[str]:
    return [f"labwarden tests as uid {os.geteuid()}; uprobes: {uprobes_reason() or 'ok'}"]


@pytest.fixture(scope="session")
def built_firmware(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The firmware built straight from the package sources (no vlab)."""
    import subprocess

    from labwarden.vlab.firmware import firmware_package_dir

    out = tmp_path_factory.mktemp("fw")
    subprocess.run(["make", "-s", "-C", str(firmware_package_dir()), f"O={out}", "GIT_HASH=test"],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def qlab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qlab]:
    """A running qlab for one test module (one guest: TCG boots cost ~20 s); brought down even
    when a test fails, and checked to leave no QEMU behind."""
    root = tmp_path_factory.mktemp("qlab-" + request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"))
    with running_qlab(root) as q:
        yield q
