"""The lease: one mutating session per DUT at a time, with expiry and renewal.

Held on the DUT itself, so two servers on two hosts see the same lock (with the labgrid backend
the place is acquired too: open_lab). The lease is one file, `<run>/labwarden.lease`, holding
"HOLDER EXPIRY" (expiry in the DUT's clock, the one clock every contender shares):
- taking a free lease is one `ln` of a complete file (atomic; it fails if the lease exists), so
  nobody ever sees a half-written lease;
- renewing, taking over an expired lease and releasing happen under a short mutex (`mkdir
  <lease>.lock`), after reading the lease again inside it: two contenders for an expired lease
  cannot both win, and a renewal never revives a lease somebody else has taken over;
- a live holder (its expiry in the future) is never taken over: the runner renews the lease
  while a call runs (runtime/leasekeeper.py), so a sweep longer than the TTL keeps it;
- a renewal that finds no lease file takes it again with the same atomic `ln`: the run dir is
  a tmpfs on most DUTs, so a flash's reboot wipes the lease in the middle of an experiment.
Each step is one POSIX sh script on the persistent channel (busybox has all it uses).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

from pydantic import BaseModel

from labwarden.core.devtext import quote
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError

TTL_S = 300.0
STALE_LOCK_S = 30
"""A mutex older than this was left by a contender killed inside it: removed."""

_SCRIPT = r"""
op=$1; f=$2; me=$3; ttl=$4; from=$5
now=$(date +%s)
read_lease() {
  if [ -d "$f" ]; then line=$(cat "$f/owner" 2>/dev/null); else line=$(cat "$f" 2>/dev/null); fi
  owner=${line% *}; until=${line##* }
}
say() { printf '%s %s %s\n' "$1" "$now" "$line"; }
read_lease
# no lease at all: taken with one atomic ln -- a free acquire, or a renewal whose lease a reboot
# wiped (the run dir is a tmpfs and a flash reboots the DUT), never a renewal of someone else's
if { [ "$op" = acquire ] || [ "$op" = renew ]; } && [ ! -e "$f" ]; then
  printf '%s %s\n' "$me" $((now + ttl)) > "$f.$$" && ln "$f.$$" "$f" 2>/dev/null; rc=$?
  rm -f "$f.$$"
  if [ "$rc" -eq 0 ]; then line="$me $((now + ttl))"; say ok; exit 0; fi
  read_lease
fi
if ! mkdir "$f.lock" 2>/dev/null; then
  t=$(stat -c %Y "$f.lock" 2>/dev/null || echo "$now")
  if [ $((now - t)) -gt STALE ]; then rmdir "$f.lock" 2>/dev/null; fi
  say busy; exit 3
fi
trap 'rmdir "$f.lock" 2>/dev/null' EXIT
trap 'exit 1' HUP INT TERM PIPE  # a broken connection's hangup still frees the mutex
read_lease
live=0
case $until in ''|*[!0-9]*) ;; *) if [ "$until" -gt "$now" ]; then live=1; fi ;; esac
case $op in
  release)
    if [ "$owner" = "$me" ]; then rm -rf "$f"; say released; else say notours; fi ;;
  adopt)
    if [ "$owner" != "$from" ]; then say held; exit 2; fi
    if [ -d "$f" ]; then rm -rf "$f"; fi
    printf '%s %s\n' "$me" $((now + ttl)) > "$f.$$" && mv -f "$f.$$" "$f"
    line="$me $((now + ttl))"; say ok ;;
  renew|acquire)
    if [ "$owner" != "$me" ] && [ "$live" -eq 1 ]; then say held; exit 2; fi
    if [ "$op" = renew ] && [ "$owner" != "$me" ]; then say lost; exit 2; fi
    if [ -d "$f" ]; then rm -rf "$f"; fi
    printf '%s %s\n' "$me" $((now + ttl)) > "$f.$$" && mv -f "$f.$$" "$f"
    line="$me $((now + ttl))"; say ok ;;
esac
""".replace("STALE", str(STALE_LOCK_S))


class LeaseInfo(BaseModel):
    holder: str
    expires: float
    """Unix time in the DUT's clock."""
    now: float | None = None
    """The DUT's clock when this was read (None: use this host's)."""

    def describe(self) -> str:
        """The holder as read from the DUT (device text: quoted) and the expiry."""
        left = self.expires - (self.now if self.now is not None else time.time())
        who = quote(self.holder, 160)
        return f"{who} (expires in {left:.0f} s)" if left > 0 else f"{who} (expired)"


def holder_name(user: str, session_id: str) -> str:
    """`user@host:pid.start/session`: who holds a lease, and enough to tell whether that process
    still runs (resume takes over only a dead session's lease, agent/loop.py)."""
    return f"{user}@{socket.gethostname()}:{os.getpid()}.{_start_ticks(os.getpid())}/{session_id}"


def _start_ticks(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def holder_alive(holder: str) -> bool | None:
    """Whether the process named in a holder runs on this host now (None: another host, or a
    holder that names no process -- nobody here can tell)."""
    try:
        who, _sid = holder.rsplit("/", 1)
        _user, where = who.rsplit("@", 1)
        host, proc = where.rsplit(":", 1)
        pid, start = proc.split(".", 1)
    except ValueError:
        return None
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return _start_ticks(int(pid)) == start and start != "0"


class Lease:
    def __init__(self, dev: Device, run_dir: str, holder: str, ttl_s: float = TTL_S):
        self.dev = dev
        self.path = f"{run_dir.rstrip('/')}/labwarden.lease"
        self.holder = holder
        self.ttl_s = ttl_s
        self.held = False

    async def _op(self, op: str, expected: str = "") -> tuple[str, LeaseInfo | None]:
        """Run one lease step on the DUT: (status, the lease as it is after it). A busy mutex is
        waited out: a live holder keeps it for a few commands; one left by a step killed inside
        it (a connection that broke) is removed once older than STALE_LOCK_S, so the wait lasts
        past that -- giving up sooner failed every call in between (seen on the drift bench:
        three experiments in a row, each after ~7 s)."""
        deadline = time.monotonic() + STALE_LOCK_S + 10
        pause = 0.05
        while True:
            res = await self.dev.run(["sh", "-c", _SCRIPT, "lw-lease", op, self.path, self.holder,
                                      str(max(1, round(self.ttl_s))), expected], timeout=15)
            status, _, rest = res.stdout.strip().partition(" ")
            now, _, line = rest.partition(" ")
            if status != "busy":
                break
            if time.monotonic() > deadline:
                raise DeviceError(f"the DUT's lease lock {self.path}.lock stayed busy for "
                                  f"{STALE_LOCK_S + 10} s (a lock is stale after {STALE_LOCK_S} s)",
                                  f"remove {self.path}.lock on the DUT if no labwarden runs")
            await asyncio.sleep(pause)
            pause = min(2 * pause, 1.0)
        if status not in ("ok", "held", "lost", "released", "notours"):
            raise DeviceError(f"the lease step {op} failed on the DUT: {quote(res.stderr or res.stdout)}",
                              "check that the DUT's run dir is writable ([dut.paths] run)")
        return status, _parse(line, now)

    async def current(self) -> LeaseInfo | None:
        """The lease as the DUT has it now (None: free)."""
        res = await self.dev.run(["sh", "-c", 'date +%s; if [ -d "$1" ]; then cat "$1/owner"; '
                                  'else cat "$1"; fi', "lw-lease", self.path])
        now, _, line = res.stdout.partition("\n")
        return _parse(line.strip(), now.strip()) if line.strip() else None

    async def acquire(self) -> LeaseInfo | None:
        """None when acquired (or renewed, or an expired lease taken over); else the live
        holder's lease, which is never taken over."""
        status, info = await self._op("acquire")
        self.held = status == "ok"
        return None if self.held else info

    async def renew(self) -> bool:
        """Push the expiry out by the TTL, if the lease is still ours; False when it is not."""
        if not self.held:  # released (a fleet place handed back): never reach the DUT again
            return False
        status, _ = await self._op("renew")
        self.held = status == "ok"
        return self.held

    async def adopt(self, dead: str) -> bool:
        """Take over the lease of `dead` -- a holder the caller knows has died (agent resume)
        -- as ours, only if it still holds it; a holder still running here is never adopted."""
        if holder_alive(dead):
            return False
        status, _ = await self._op("adopt", dead)
        self.held = status == "ok"
        return self.held

    async def release(self) -> None:
        await self._op("release")
        self.held = False


def _parse(line: str, now: str) -> LeaseInfo | None:
    if not line:
        return None
    try:
        holder, expires = line.rsplit(" ", 1)
        return LeaseInfo(holder=holder, expires=float(expires), now=float(now))
    except ValueError:
        return LeaseInfo(holder=line or "(unreadable lease)", expires=0.0,
                         now=float(now) if now.strip().isdigit() else None)
