"""The DUT's process manager: starts stad then stamon, respawns them while it is enabled.

Children get PR_SET_PDEATHSIG(SIGKILL) so that nothing outlives the DUT daemon, even a kill -9.
Confined (vlab/confine.py), each service is a tenant with a uid and a cgroup of its own: when the
service ends -- a crash, a respawn, a reboot, a flash, `down` -- its cgroup is killed, and with it
everything the firmware started.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import time

from labwarden.lab import uci
from labwarden.vlab import confine
from labwarden.vlab.layout import SERVICES, VlabLayout

log = logging.getLogger("labwarden.vlab.supervisor")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


async def _gone(pid: int) -> None:
    """Until the process `pid` has ended (a pidfd: it need not be our child)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(None)
    loop.add_reader(fd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class ProcessManager:
    def __init__(self, layout: VlabLayout):
        self.layout = layout
        self.tenants: dict[str, confine.Tenant] = confine.tenants(layout) if confine.available() else {}
        """Each service's uid and cgroup (none unconfined: the services run as the daemon's user)."""
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.pids: dict[str, int] = {}
        """Each service's own pid (under bwrap, not bwrap's: bwrap forwards no signal)."""
        self.respawns: dict[str, int] = dict.fromkeys(SERVICES, 0)
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._stopping = False

    def enabled(self) -> bool:
        try:
            main = uci.get(uci.load(self.layout.config_dir / "procmgr"), "main")
        except (OSError, KeyError, uci.UciError):
            return True
        return main.options.get("enabled", "1") == "1"

    def argv(self, name: str) -> list[str]:
        return [str(self.layout.binary(name)), "--config", str(self.layout.config_dir),
                "--socket", str(self.layout.socket)]

    async def _spawn(self, name: str) -> asyncio.subprocess.Process:
        logf = (self.layout.logs / f"{name}.log").open("ab")
        argv, info_r = self.argv(name), None
        keep: tuple[int, ...] = ()
        tenant = self.tenants.get(name)
        if tenant is not None:  # the firmware runs as a tenant, not root (vlab/confine.py)
            info_r, info_w = os.pipe()
            argv = tenant.cgroup.enter(confine.wrap(argv, self.layout, info_w, tenant.uid,
                                                    self.tenants["stad"].uid))
            keep = (info_w,)
        else:
            self.layout.socket.parent.mkdir(parents=True, exist_ok=True)
        if name == "stad":  # a socket left by the last stad must not pass for the new one's
            with contextlib.suppress(FileNotFoundError):
                self.layout.socket.unlink()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=logf, stderr=logf,
                env=self.layout.dut_env(), cwd=str(self.layout.root), preexec_fn=_die_with_parent,
                pass_fds=keep)
        finally:
            logf.close()
            for fd in keep:
                os.close(fd)
        pid: int | None = proc.pid
        if info_r is not None and tenant is not None:  # the service's own pid, not bwrap's
            init = await asyncio.to_thread(confine.child_pid, info_r)
            pid = init and await asyncio.to_thread(confine.service_pid, init, tenant.cgroup)
            if pid is None:  # it ended before it was seen: end what it left, respawn as a crash
                await asyncio.to_thread(tenant.cgroup.kill)
        self.procs[name] = proc
        self.pids[name] = pid or proc.pid
        (self.layout.run_dir / f"{name}.pid").write_text(f"{pid or proc.pid}\n")
        log.info("started %s pid %s", name, pid)
        if name == "stad":  # stamon needs the socket: wait for stad to listen
            deadline = time.monotonic() + 5
            while not self.layout.socket.exists() and time.monotonic() < deadline:
                if proc.returncode is not None:
                    break
                await asyncio.sleep(0.02)
            if tenant is not None:
                confine.open_socket(self.layout, self.tenants["stamon"].lease.gid)
        return proc

    async def _ended(self, name: str) -> int:
        """Wait for the service itself, then end everything it started (its cgroup): bwrap's
        init waits for every process in the namespace, so bwrap alone would wait for whatever
        the service left running."""
        tenant = self.tenants.get(name)
        if tenant is not None:
            await _gone(self.pids[name])
            await asyncio.to_thread(tenant.cgroup.kill)
        return await self.procs[name].wait()

    async def start_all(self) -> None:
        self._stopping = False
        with contextlib.suppress(FileNotFoundError):
            self.layout.socket.unlink()
        for name in SERVICES:
            await self._spawn(name)
            self._watchers[name] = asyncio.create_task(self._watch(name))

    async def _watch(self, name: str) -> None:
        backoff = 0.2
        while True:
            proc = self.procs[name]
            started = time.monotonic()
            rc = await self._ended(name)
            if self._stopping:
                return
            log.warning("%s pid %d exited with %s", name, self.pids.get(name, proc.pid), rc)
            if not self.enabled():
                log.warning("process manager disabled: %s stays down", name)
                return
            # Crash loops back off (up to 5 s); a long healthy run resets the backoff.
            backoff = 0.2 if time.monotonic() - started > 10 else min(backoff * 2, 5.0)
            await asyncio.sleep(backoff)
            if self._stopping:
                return
            self.respawns[name] += 1
            await self._spawn(name)

    async def stop_all(self, timeout: float = 3.0) -> None:
        self._stopping = True
        for task in self._watchers.values():
            task.cancel()
        for name in reversed(SERVICES):
            await self._stop(name, timeout)
        for name in SERVICES:
            with contextlib.suppress(FileNotFoundError):
                (self.layout.run_dir / f"{name}.pid").unlink()
        self._watchers.clear()

    async def _stop(self, name: str, timeout: float) -> None:
        """SIGTERM the service itself (bwrap forwards no signal), SIGKILL after `timeout`; then
        its cgroup, whatever the service did or left."""
        proc, tenant = self.procs.get(name), self.tenants.get(name)
        if proc is not None and proc.returncode is None:
            own = self.pids.get(name, proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(own, signal.SIGTERM)
            try:
                await asyncio.wait_for(_gone(own), timeout)
            except TimeoutError:
                for pid in {own, proc.pid} if tenant is None else ():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        if tenant is not None:  # a service that was never started may have a dead daemon's left
            await asyncio.to_thread(tenant.cgroup.kill)
        if proc is not None:
            await proc.wait()

    def close(self) -> None:
        """Remove the services' cgroups and give their uids back (at power-off)."""
        for tenant in self.tenants.values():
            tenant.close(self.layout)
        self.tenants = {}
