"""QlabStrategy: a labgrid Strategy with the states off and shell for a QEMU target reached over
SSH (labgrid's ShellStrategy logs in on the console; the qlab's DUT is a router reached by SSH).

    off    QEMU stopped (QEMUDriver.off: QMP `quit`)
    shell  QEMU running and dropbear answering: SSHDriver active, the boot_id read through it

QlabQEMUDriver is labgrid's QEMUDriver with its one unbounded wait bounded: `on()` accepts QEMU's
serial-socket connection with no timeout, so a QEMU killed before it connects (a power cut in
the middle of a flash) left qlabd waiting without end. The strategy's `shell` waits for
dropbear's banner while QEMU lives before it activates the SSHDriver, which alone retries a
refused port for its whole connection_timeout after QEMU died.

Bindings: power = the QlabQEMUDriver (PowerProtocol), ssh = the SSHDriver. A power cycle is
`transition("off")` then `transition("shell")`. The env YAML loads this module with
`imports: [labwarden.qlab.strategy]`, which registers the class with labgrid.
"""

from __future__ import annotations

import enum
import socket
import time
from typing import Any

import attr
from labgrid.driver.qemudriver import QEMUDriver
from labgrid.factory import target_factory
from labgrid.step import step
from labgrid.strategy.common import Strategy, StrategyError, never_retry


class Status(enum.Enum):
    unknown = 0
    off = 1
    shell = 2


ACCEPT_S = 20.0
"""How long `on()` waits for a started QEMU to connect its serial socket: QEMU does so while it
initialises (before the guest runs: it starts with -S), seconds even under TCG on a loaded host."""


BANNER_S = 3.0
"""How long one look at the forwarded SSH port waits to connect and for dropbear's banner."""


@target_factory.reg_driver
@attr.s(eq=False)
class QlabQEMUDriver(QEMUDriver):
    """QEMUDriver whose `on()` fails (QEMU gone, or silent for ACCEPT_S) instead of hanging."""

    def on_activate(self) -> None:
        super().on_activate()
        self._socket.settimeout(ACCEPT_S)

    def on(self) -> None:
        try:
            super().on()
        except TimeoutError as exc:
            code = self._child.poll() if self._child is not None else None
            if code is None and self._child is not None:
                self._child.kill()  # alive but silent: do not leave it half-started
                code = self._child.wait()
            raise OSError(f"QEMU did not connect its serial socket within {ACCEPT_S:g} s "
                          f"(it exited with {code})") from exc


@target_factory.reg_driver
@attr.s(eq=False)
class QlabStrategy(Strategy):
    """Moves the qlab between off and shell; `boot_id` is the guest's after the last boot."""

    bindings = {"power": "PowerProtocol", "ssh": "SSHDriver"}  # noqa: RUF012 (labgrid's idiom)

    status: Status = attr.ib(default=Status.unknown)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.boot_id: str | None = None

    @never_retry
    @step(args=["status"])
    def transition(self, status: Status | str, *, step: Any) -> None:
        if not isinstance(status, Status):
            status = Status[status]
        if status == Status.unknown:
            raise StrategyError(f"can not transition to {status}")
        if status == self.status:
            step.skip("nothing to do")
            return
        if status == Status.off:
            self.target.deactivate(self.ssh)
            self.target.activate(self.power)
            self.power.off()
            self.boot_id = None
        elif status == Status.shell:
            self.target.deactivate(self.ssh)
            self.target.activate(self.power)
            self.power.on()
            self._await_sshd()
            self.target.activate(self.ssh)  # dropbear answers: its master connects at once
            self.boot_id = self.ssh.run_check("cat /proc/sys/kernel/random/boot_id")[0].strip()
        self.status = status

    def _await_sshd(self) -> None:
        """Wait for dropbear's banner on the forwarded port while QEMU lives, up to the SSHDriver's
        connection_timeout (240 s). SSHDriver alone retries a refused port that long even when
        QEMU is gone -- a power cut mid-boot held a flash for it; here QEMU's exit ends the wait
        at once, and the SSHDriver connects to a dropbear that answers."""
        address, port = self.ssh.networkservice.address, int(self.ssh.networkservice.port)
        limit = float(self.ssh.connection_timeout)
        deadline = time.monotonic() + limit
        while True:
            child = self.power._child
            code = None if child is None else child.poll()
            if child is None or code is not None:
                raise StrategyError(f"QEMU exited during the boot (exit code {code}), before "
                                    "dropbear answered")
            # QEMU's user-mode network accepts the port before the guest listens and then says
            # nothing: a banner, not a connection, is the answer
            try:
                with socket.create_connection((address, port), timeout=BANNER_S) as conn:
                    conn.settimeout(BANNER_S)
                    if conn.recv(4) == b"SSH-":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise StrategyError(f"dropbear did not answer within {limit:g} s of the power-on "
                                    "(QEMU runs): see the guest's console log")
            time.sleep(0.5)
