"""A real qlab for tests: the cached guest image (built here if it is missing: the set-up's job,
but a clean machine must not skip), booted through labgrid by `labwarden.qlab.control.up`, and
always brought down -- after which no QEMU of it may be left."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.qlab import control, guestssh, image, procs
from labwarden.qlab.layout import QlabLayout


@dataclass(frozen=True)
class Qlab:
    layout: QlabLayout
    info: control.QlabInfo
    endpoint: SshEndpoint

    @property
    def root(self) -> Path:
        return self.layout.root

    def sh(self, script: str, timeout: float = 120) -> guestssh.GuestResult:
        """A POSIX sh script in the guest (busybox ash)."""
        return guestssh.run_sync(self.endpoint, ["sh", "-c", script], timeout=timeout)


_TERMINAL_CODES = re.compile(r"\x1b(?:\[[0-9;?]*[A-Za-z]|c)")
"""SeaBIOS's screen resets and colours, on the console."""


class QlabFailureLogs:
    """pytest plugin (tests/conftest.py registers it): a failed test on a module's `qlab` reports
    the tails of the guest's console and of qlabd's log -- what the guest did is gone with the
    tmp dir, and CI keeps only the report."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()  # type: ignore[attr-defined]
        q = getattr(item, "funcargs", {}).get("qlab")
        if report.failed and isinstance(q, Qlab):
            for title, path, lines in (("the qlab's console", q.layout.console_log, 30),
                                       ("qlabd's log", q.layout.daemon_log, 15)):
                text = path.read_text(errors="replace") if path.exists() else "(none)"
                text = _TERMINAL_CODES.sub("", text)
                report.sections.append((f"{title} (last {lines} lines)",
                                        "\n".join(text.splitlines()[-lines:])))


def guest_image() -> image.QlabImage:
    """The cached image, built now if missing; skips only where it cannot be built (not root),
    and never in CI (CI=true), where the set-up builds it: there a missing image fails."""
    try:
        return image.ensure()
    except image.ImageError as exc:
        if os.geteuid() != 0 and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
            pytest.skip(f"no cached qlab image and none can be built here: {exc.problem}")
        raise


TEST_CLOCK = "realtime"
"""The clock the suite's qlabs boot on. The tests check functions, not noise, and the real-time
clock boots in ~20 s with 2 vCPUs where the default icount clock of TCG takes ~48 s on one
(bench/qlab_noise.py measures both): `make test` has no room for the difference. The default
clock's QEMU arguments are checked without a boot (tests/test_qlab_clock.py, QEMU itself
accepting them included); bench/qlab_noise.py and `labwarden demo --lab-kind qlab` boot on it."""


@contextmanager
def running_qlab(root: Path, traffic_router: bool = False, clock: str | None = TEST_CLOCK) -> Iterator[Qlab]:
    """`traffic_router`: the traffic variant (host netns lwlan/lwwan, [load] iperf3). `clock`:
    None is the qlab's default (icount on TCG), for the tests that measure."""
    guest_image()
    layout = QlabLayout.at(root)
    try:
        info = control.up(root, traffic_router=traffic_router, clock=clock)
        yield Qlab(layout, info, control.endpoint(layout))
    finally:
        control.down(root)
        left = procs.qemu_pids(layout)
        assert not left, f"QEMU of {root} still running after down: {left}"


def loop_profile(layout: QlabLayout, name: str, decision: dict[str, object],
                 flashes_per_hour: int = 60) -> Path:
    """lab-NAME.toml beside the qlab's lab.toml: the same profile with a [decision] section (the
    qlab writes none) and a flash budget an unattended loop can live with (each experiment
    flashes A and B, a survivor's sweeps once more each: more than the default 6 an hour)."""
    text = layout.lab_toml.read_text()
    assert "[decision]" not in text and text.rstrip().rsplit("\n[", 1)[-1].startswith("policy]"), \
        "the qlab's profile no longer ends with [policy]: append the budget where it belongs"
    rows = "".join(f"{k} = {json.dumps(v)}\n" for k, v in decision.items())
    path = layout.lab_toml.with_name(f"lab-{name}.toml")
    path.write_text(f"{text.rstrip()}\nbudgets = {{ flashes_per_hour = {flashes_per_hour} }}\n\n"
                    f"[decision]\n{rows}")
    return path
