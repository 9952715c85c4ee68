"""The vlab DUT daemon: one process holding the process manager and the SSH endpoint.

Run as `python -m labwarden.vlab.dutd STATE_DIR [--port N]`. SIGHUP = reboot (drop SSH sessions,
stop services, apply drift, start services); SIGTERM = power off. Readiness is announced by
writing run/ssh.port once everything is up; a start failure is written to logs/dutd.log and the
process exits non-zero before that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from labwarden.core.errors import LabError
from labwarden.vlab import sshd, tuning
from labwarden.vlab.layout import VlabLayout
from labwarden.vlab.supervisor import ProcessManager

log = logging.getLogger("labwarden.vlab.dutd")
BOOT_DELAY_S = 0.3
"""How long the DUT is unreachable during a reboot (a real one takes a minute)."""


async def serve(layout: VlabLayout, port: int) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reboot = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reboot.set)

    registry = sshd.SessionRegistry()
    try:
        pm = ProcessManager(layout)  # leases the services' uids for this process's life
    except LabError as exc:
        log.error("cannot confine the DUT's services: %s (%s)", exc.problem, exc.remedy)
        return 2
    try:
        acceptor = await sshd.listen(layout, port, registry)
    except OSError as exc:
        log.error("cannot listen on 127.0.0.1:%d: %s", port, exc.strerror or exc)
        pm.close()
        return 2
    await pm.start_all()
    bound = acceptor.sockets[0].getsockname()[1]
    layout.ssh_port_file.write_text(f"{bound}\n")
    log.info("up: ssh 127.0.0.1:%d", bound)
    try:
        while not stop.is_set():
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(reboot.wait())}
            _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            if reboot.is_set() and not stop.is_set():
                reboot.clear()
                await asyncio.sleep(0.2)  # let the caller's `reboot` exec report its status
                log.info("reboot requested")
                acceptor.close()
                registry.drop_all()
                await pm.stop_all()
                for change in tuning.apply_drift(layout):
                    log.info("drift: %s", change)
                await asyncio.sleep(BOOT_DELAY_S)
                await pm.start_all()
                acceptor = await sshd.listen(layout, bound, registry)
                log.info("rebooted")
    finally:
        acceptor.close()
        registry.drop_all()
        await pm.stop_all()
        pm.close()
        with contextlib.suppress(FileNotFoundError):
            layout.ssh_port_file.unlink()
        log.info("down")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labwarden-vlab-dutd")
    parser.add_argument("state_dir")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    layout = VlabLayout.at(args.state_dir)
    logging.basicConfig(
        filename=layout.logs / "dutd.log", level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    layout.dutd_pid.write_text(f"{os.getpid()}\n")
    try:
        return asyncio.run(serve(layout, args.port))
    finally:
        with contextlib.suppress(FileNotFoundError):
            layout.dutd_pid.unlink()


if __name__ == "__main__":
    sys.exit(main())
