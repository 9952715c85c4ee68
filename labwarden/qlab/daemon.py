"""qlabd: the process that holds a qlab's labgrid target (QEMUDriver, SSHDriver, QlabStrategy).

labgrid's QEMUDriver runs QEMU as a child of the process that activated it, so one long-lived
process must own the target: `qlab up` starts this daemon, which transitions the strategy to
`shell` and then waits; `qlab down` (SIGTERM) transitions it to `off` (QEMU quits) and exits.

    python -m labwarden.qlab.daemon STATE_DIR

Requests are signals, results are run/state.json (written atomically, `seq` counts handled
requests): SIGTERM/SIGINT stop, SIGHUP power cycle (off, then shell), SIGUSR1 off, SIGUSR2 shell.
The control socket run/qlabd.sock (ctlsock.py) takes the same transitions and `flash` (off, the
image onto the flash disk, shell) and answers each when it is done: labwarden's QlabdStrategy
(remote.py) uses it, so that labwarden drives the one QEMU this daemon holds.
If QEMU exits on its own (the guest powered off), the state says so and the daemon exits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from labwarden.core.errors import LabError
from labwarden.qlab import ctlsock, firmware
from labwarden.qlab.layout import QlabLayout
from labwarden.qlab.procs import qemu_pids

log = logging.getLogger("qlabd")
WIFI_WAIT_S = 120

_REQUESTS = {signal.SIGTERM: "stop", signal.SIGINT: "stop", signal.SIGHUP: "cycle",
             signal.SIGUSR1: "off", signal.SIGUSR2: "shell"}


class Daemon:
    def __init__(self, layout: QlabLayout):
        self.layout = layout
        self.pending: list[str] = []
        self.state: dict[str, Any] = {"pid": os.getpid(), "state": "starting", "seq": 0, "boots": 0,
                                      "boot_id": None, "qemu_pid": None, "error": None,
                                      "boot_s": None, "since": time.time()}

    def publish(self, **changes: Any) -> None:
        self.state.update(changes)
        tmp = self.layout.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.layout.state_file)

    def on_signal(self, signum: int, _frame: object) -> None:
        self.pending.append(_REQUESTS[signal.Signals(signum)])

    def run(self) -> int:
        from labgrid import Environment

        for signum in _REQUESTS:
            signal.signal(signum, self.on_signal)
        env = Environment(config_file=str(self.layout.env_yaml))
        target = env.get_target("main")
        assert target is not None
        self.strategy = target.get_driver("QlabStrategy")
        control = ctlsock.Server(self.layout.socket, lambda: dict(self.state))
        try:
            self.pending.insert(0, "shell")
            while True:
                if not self.pending and self.state["state"] in ("shell", "off"):
                    with contextlib.suppress(queue.Empty):
                        self.handle(control.queue.get_nowait())
                while self.pending:
                    request = self.pending.pop(0)
                    if request == "stop":
                        self.transition("off")
                        return 0
                    for step in (["off", "shell"] if request == "cycle" else [request]):
                        self.transition(step)
                    self.publish(seq=self.state["seq"] + 1)
                if self.state["state"] == "shell" and not qemu_pids(self.layout):
                    self.publish(state="dead", error="QEMU exited on its own (the guest powered off "
                                 f"or crashed): see {self.layout.console_log}")
                    log.error("QEMU is gone")
                    return 1
                time.sleep(0.2)
        except Exception as exc:  # the state file is how `qlab up/status` learn what happened
            log.error("%s", traceback.format_exc())
            cause = exc.__cause__ or exc
            self.publish(state="error", error=f"{type(cause).__name__}: {cause}")
            return 1
        finally:
            control.close()
            try:
                target.cleanup()  # deactivates the drivers: QEMU quits, ssh masters close
            except Exception:
                log.error("cleanup: %s", traceback.format_exc())
            if self.state["state"] not in ("dead", "error"):
                self.publish(state="stopped", qemu_pid=None)

    def handle(self, pending: ctlsock.Pending) -> None:
        """One control-socket request, answered when done. A refused image leaves the DUT as it
        was; a failed transition is answered, then ends the daemon as a failed signal would."""
        request = pending.request
        try:
            if request.op == "flash":
                self.flash(Path(request.image or ""))
            else:
                for step in (["off", "shell"] if request.op == "cycle" else [request.op]):
                    self.transition(step)
            if self.state["state"] == "shell":
                self.wait_aps()
        except LabError as exc:
            log.error("%s refused: %s", request.op, exc.problem)
            pending.done(ctlsock.Reply(ok=False, error=f"{exc.problem} (remedy: {exc.remedy})",
                                       state=dict(self.state)))
            if self.state["state"] not in ("shell", "off"):
                raise
            return
        except Exception as exc:
            pending.done(ctlsock.Reply(ok=False, error=f"{type(exc.__cause__ or exc).__name__}: "
                                       f"{exc.__cause__ or exc}", state=dict(self.state)))
            raise
        self.publish(seq=self.state["seq"] + 1)
        pending.done(ctlsock.Reply(ok=True, state=dict(self.state)))

    def wait_aps(self) -> None:
        """Answer only once the APs are up and the firmware answers, as `qlab up` does: a caller
        that heals the topology right after (`wifi reload`) would otherwise race the boot's own
        `wifi up`, and a health check the firmware's start."""
        _out, err, code = self.strategy.ssh.run(f"/usr/sbin/wifi wait {WIFI_WAIT_S}",
                                                timeout=WIFI_WAIT_S + 30)
        if code != 0:
            raise ctlsock.ControlError(f"the APs did not come up after the boot: {' '.join(err)}",
                                       "see the guest's /tmp/log/hostapd.log")
        _out, err, code = self.strategy.ssh.run(firmware.READY_SH, timeout=firmware.READY_S + 30)
        if code != 0:
            raise ctlsock.ControlError(f"the firmware did not start after the boot: {' '.join(err)}",
                                       "see the guest's /tmp/log/ and console.log")

    def flash(self, image: Path) -> None:
        """off -> the image onto the flash disk (and a clean overlay asked for) -> shell. The image
        is checked (and must lie in this qlab's dir) before QEMU is stopped."""
        image = image.resolve()
        if not image.is_relative_to(self.layout.root) or not image.is_file():
            raise ctlsock.ControlError(f"flash: {image} is not a file inside {self.layout.root}",
                                       "flash a build of this qlab (its builds/ dir)",
                                       kind="invalid_input")
        firmware.check_image(image)
        self.transition("off")
        log.info("writing %s to the flash disk", image)
        firmware.install(self.layout, image)
        self.transition("shell")

    def transition(self, state: str) -> None:
        log.info("transition to %s", state)
        t0 = time.monotonic()
        self.publish(state="booting" if state == "shell" else "stopping")
        self.strategy.transition(state)
        pids = qemu_pids(self.layout)
        if state == "shell":
            self.publish(state="shell", boot_id=self.strategy.boot_id, boots=self.state["boots"] + 1,
                         boot_s=round(time.monotonic() - t0, 2), qemu_pid=pids[0] if pids else None)
        else:
            self.publish(state="off", boot_id=None, qemu_pid=None)
        log.info("%s after %.1f s", state, time.monotonic() - t0)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m labwarden.qlab.daemon STATE_DIR", file=sys.stderr)
        return 2
    layout = QlabLayout.at(argv[1])
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=str(layout.daemon_log), level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    Path(layout.daemon_pid).write_text(f"{os.getpid()}\n")
    try:
        return Daemon(layout).run()
    finally:
        layout.daemon_pid.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
