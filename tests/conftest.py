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
from tests.qlab_fixtures import Qlab, QlabFailureLogs, running_qlab

# the hooks: in CI a skip fails, naming what is missing and the set-up step that provides it
from .ci_skips import missing, pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

if os.environ.get("PYTEST_XDIST_WORKER"):  # make test's light tests (scripts/test-suite.sh)
    # an xdist worker starts with COLUMNS=80 LINES=24 set: the CLI under test would take them for
    # the user's choice and cut its tables (cli/common.py: $COLUMNS wins over the pipe's width)
    for var in ("COLUMNS", "LINES"):
        os.environ.pop(var, None)


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
"""Tests longer than `make test`'s 30 minutes can hold (a fleet of their own, another reboot, the
vlab's bisect).
`make test-long` runs them; `pytest --long` adds them to any run."""

LIGHT_MODULES = frozenset({
    "test_abtest_schedule", "test_agent", "test_board_health", "test_budgets_concurrency",
    "test_calibration",
    "test_build_confinement", "test_call_cli", "test_ci_skips", "test_cli", "test_cli_startup",
    "test_compare_stats", "test_cpu_clock", "test_decision_rule", "test_device", "test_devtext_errors",
    "test_devtext_results", "test_docs", "test_door_logging", "test_dut_off",
    "test_dut_protocol", "test_fleet_health_cli", "test_fleet_loop_turns",
    "test_fleet_place_reservation", "test_fleet_places",
    "test_guard_corpus",
    "test_http_sessions", "test_id_paths", "test_judge_parts", "test_kstat", "test_lab_check", "test_labgrid",
    "test_layers", "test_layers_cli", "test_mcp_resources", "test_mcp_server",
    "test_mcp_stdio", "test_no_absolute_times", "test_portable_dut", "test_power_cycle", "test_prompt_tools",
    "test_profile_reload", "test_protected_paths", "test_qlab_clock", "test_readme_profiles",
    "test_records", "test_reference",
    "test_report_results", "test_resources_and_search_limits", "test_results", "test_soak",
    "test_source_and_patches", "test_stock_ssh", "test_suite_phases", "test_tool_by_spec",
    "test_tool_inputs", "test_tools_lab", "test_transcript_anchors", "test_transcripts_cli",
    "test_transcripts_cost", "test_transcripts_crash", "test_transcripts_store", "test_uci",
    "test_uprobes", "test_vlab_lifecycle", "test_vlab_ssh",
    # tenants apart (issue 45): attacks and refusals, asserted on behaviour only
    "test_build_tenancy", "test_deep_arguments", "test_dut_tenancy", "test_patches_per_principal",
    "test_workload_points"})
"""Modules whose tests read no CPU share, rate or scatter -- they may start a vlab or an SSH
server, but assert on behaviour, not on a measurement -- so they run on several xdist workers at
once (scripts/test-suite.sh, phase 1). Every module not named here is measured in phase 2 at
normal priority: a new module is measured by default, and joins this set only when none of its
assertions reads a measurement."""

GUEST_MODULES = frozenset({"test_qlab", "test_qlab_powercut"})
"""Modules whose tests run a qlab guest of their own and read from it only behaviour (a boot, a
flash, a power cut, stations on both sides) or effects far outside any scatter a loaded host adds
(a SIGSTOP's collapse of >60%, frames in a flame graph): they run in a stream of their own at
idle priority beside the measured tests of phase 2 (scripts/test-suite.sh)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked `long` (make test-long runs only those)")


@pytest.hookimpl(tryfirst=True)  # marked before `-m` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # by module name: a module's tests share its fixtures (one vlab, one guest)
        name = item.module.__name__.rpartition(".")[2] if item.module is not None else ""
        if name in LIGHT_MODULES:
            item.add_marker(pytest.mark.light)
        if name in GUEST_MODULES:
            item.add_marker(pytest.mark.guest)
    if config.getoption("--long"):
        return
    # deselected, not skipped: a skip means a missing facility (and fails in CI); these are left
    # out of the default run on purpose, and the summary line counts them as deselected
    long = [item for item in items if item.get_closest_marker(LONG)]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker(LONG)]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(QlabFailureLogs(), "labwarden-qlab-failure-logs")


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
