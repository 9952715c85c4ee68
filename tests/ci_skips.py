"""In CI (`CI=true`) a skipped test is a failed one: a missing kernel facility or package must not
turn a green run into one where the uprobe, perf, Chromium, sshd or dropbear paths never ran.

A pytest plugin (loaded by tests/conftest.py), so it holds for every skip -- `pytest.skip`,
`skipif`, `importorskip`, a module skipped at collection, ones added later -- not only those that
call `missing()`. The failure names the missing facility and the set-up step that provides it
(CI has only what `make setup` installs). Outside CI a skip stays a skip and says exactly why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any, NoReturn

import pytest

_SYSTEM = "`make setup` as root (scripts/setup-system.sh: apt-get install {})"
SETUP_STEPS: list[tuple[str, str, str]] = [
    # (pattern in the skip's reason, the facility, the set-up step that provides it) -- first match
    (r"uprobe|tracefs", "uprobes (tracefs mounted and writable at /sys/kernel/tracing)",
     "`make setup` as root (scripts/setup-system.sh mounts tracefs: mount -t tracefs nodev "
     "/sys/kernel/tracing); CI runs the tests as root"),
    (r"perf_event_paranoid|perf record is not permitted",
     "permission to record with perf", "run the tests as root, as CI does"),
    (r"\bperf\b", "perf", _SYSTEM.format("linux-perf")),
    (r"chrom", "headless Chromium", _SYSTEM.format("chromium")),
    (r"dropbear", "dropbear (server and dropbearkey)", _SYSTEM.format("dropbear-bin")),
    (r"sshd|openssh", "OpenSSH's sshd", _SYSTEM.format("openssh-server")),
    (r"busybox", "busybox", _SYSTEM.format("busybox")),
    (r"ripgrep|\brg\b", "ripgrep", _SYSTEM.format("ripgrep")),
    (r"\bjq\b", "jq", _SYSTEM.format("jq")),
    (r"qlab|mmdebstrap|guest image", "the qlab guest image",
     "`make setup` as root (its `qlab` step: labwarden qlab image)"),
    (r"qemu|aarch64", "QEMU user mode / the aarch64 cross toolchain",
     _SYSTEM.format("qemu-user gcc-aarch64-linux-gnu")),
    (r"iperf3|nftables|\bnft\b", "iperf3 and nftables (traffic tests)",
     _SYSTEM.format("iperf3 nftables")),
    (r"inferno", "inferno (inferno-collapse-perf)",
     "`make setup` (its `tools` step: cargo install inferno --root .tools; PATH=.tools/bin)"),
    (r"cargo", "cargo", _SYSTEM.format("cargo")),
    (r"\bgcc\b|\bmake\b|objcopy|toolchain", "the C toolchain", _SYSTEM.format("gcc make binutils")),
    (r"\broot\b|permission|not permitted|EPERM", "root", "run the tests as root, as CI does"),
]
_MODULE = re.compile(r"could not import '([^']+)'|No module named '([^']+)'")


def setup_step(reason: str) -> tuple[str, str]:
    """(the missing facility, the set-up step that provides it), read from a skip's reason."""
    module = _MODULE.search(reason)
    if module:
        name = module.group(1) or module.group(2)
        return (f"the Python package {name!r}",
                "`make setup` (its `python` step: pip install -e '.[dev]'; declare the package in "
                "pyproject.toml)")
    for pattern, facility, step in SETUP_STEPS:
        if re.search(pattern, reason, re.IGNORECASE):
            return facility, step
    return ("a facility the skip's reason does not name",
            "`make setup` (scripts/setup-system.sh for system packages and kernel facilities, "
            "pyproject.toml for Python packages): add it there, or make the test not need it")


def ci_message(reason: str) -> str:
    facility, step = setup_step(reason)
    return (f"CI=true: a skipped test fails in CI, which must run this path. Missing: {facility}. "
            f"Provided by: {step} -- if that step does not provide it here, fix the set-up, not "
            f"the test. The skip said: {reason}")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(reason: str) -> NoReturn:
    """Skip: this host lacks what the test needs (`reason` says what and how to get it). In CI
    that is a failure naming the set-up step that provides it."""
    if in_ci():
        pytest.fail(ci_message(reason), pytrace=False)
    pytest.skip(reason)


def _reason(longrepr: object) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = ci_message(_reason(report.longrepr).removeprefix("Skipped: "))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """A module skipped whole at collection (`importorskip` or `pytest.skip` at its top)."""
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = ci_message(_reason(report.longrepr).removeprefix("Skipped: "))
