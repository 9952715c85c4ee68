"""Long DUT work (perf record, perf stat, the sampler, lw-pause) as jobs that labwarden can stop
itself: closing an SSH session does not stop what it runs (OpenSSH and dropbear send SIGHUP only
to sessions with a terminal), so a cancelled or failed measurement kills its jobs over a fresh
command instead.

A job group is a directory in the DUT's tmp. Each job is a fresh SSH exec of a constant POSIX sh
wrapper that writes its pid there (`NAME.pid`), checks that the group is not being stopped, and
then `exec`s the command (so the pid is the command's own). Stopping the group marks it stopped
(a job that starts afterwards exits at once), then sends TERM to every job and its descendants
(from /proc's parent links: perf's `sleep` workload, the sampler's `sleep 1`), and KILL to what
is left after STOP_GRACE_S. Only busybox sh and /proc are needed; no `setsid`, no process groups
(they depend on the server).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType

from labwarden.lab.dut.commands import RunResult
from labwarden.lab.dut.protocol import DutAccess

Shield = Callable[[Awaitable[object]], Awaitable[object]]

JOB_SH = ('d=$1; n=$2; shift 2; read -r s < /proc/$$/stat; s=${s##*)}; i=0; '
          'for w in $s; do i=$((i + 1)); [ $i = 20 ] && break; done; '
          'echo "$$ $w" > "$d/$n.pid" 2>/dev/null || exit 125; '
          '[ -e "$d/stop" ] && exit 125; exec "$@"')
"""$1 = group dir, $2 = job name, then the argv. The pid file holds the pid and its start time
(stat field 22), so a stop never signals a process that merely reuses the pid. Exit 125: the
group was stopped or removed before the job started (it never ran)."""

STOP_SH = r"""
d=$1; only=$2; grace=$3
[ -d "$d" ] || exit 0
[ -n "$only" ] || : > "$d/stop"
want=" "
for f in "$d"/*.pid; do
  [ -r "$f" ] || continue
  case $only in ''|"${f##*/}") ;; *) continue ;; esac
  read -r p t < "$f" || continue
  read -r l < "/proc/$p/stat" 2>/dev/null || continue
  r="${l##*)}"; set -- $r; shift 19
  [ "$1" = "$t" ] && want="$want$p "
done
[ "$want" != " " ] || exit 0
all=""
for s in /proc/[0-9]*/stat; do
  read -r l < "$s" 2>/dev/null || continue
  r="${l##*)}"; set -- $r
  all="$all ${l%% *}:$2"
done
grown=1
while [ $grown = 1 ]; do
  grown=0
  for e in $all; do
    p=${e%%:*}
    case $want in *" ${e#*:} "*)
      case $want in *" $p "*) ;; *) want="$want$p "; grown=1 ;; esac ;;
    esac
  done
done
kill -TERM $want 2>/dev/null
i=0
while :; do
  left=""
  for p in $want; do [ -d "/proc/$p" ] && left="$left $p"; done
  [ -n "$left" ] || break
  if [ $i -ge $grace ]; then kill -KILL $left 2>/dev/null; echo "killed$left"; break; fi
  sleep 0.05; i=$((i + 1))
done
echo "stopped$want"
"""
"""$1 = group dir, $2 = one job's pid file name ('' for all: the group is then marked stopped),
$3 = grace in 50 ms steps. Prints the pids it signalled, and those that needed KILL."""

STOP_GRACE_S = 0.75
"""TERM first (perf writes its file and closes its events; lw-pause detaches), KILL after this."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")


class DutJobs:
    """The long-running commands of one measurement on one DUT, stoppable as a group.

    `async with DutJobs(dev, tmp) as jobs:` -- `jobs.exec(name, argv)` starts one; leaving the
    block with an exception (a failure, a cancel) stops every job, shielded; leaving it in any
    way removes the group's directory."""

    def __init__(self, dev: DutAccess, tmp: str, *, shield: Shield = asyncio.shield):
        self.dev = dev
        self.dir = f"{tmp.rstrip('/')}/lw-jobs-{secrets.token_hex(4)}"
        self.shield = shield
        self.stopped: list[str] = []
        """What the last stop() reported (pids signalled; 'killed ...' when TERM was not enough)."""

    async def __aenter__(self) -> DutJobs:
        await self.dev.run(["mkdir", "-p", self.dir], check=True, timeout=10)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        # shielded: in a cancelled scope anyio cancels every await, clean-up included
        await self.shield(self._finish(stop=exc_type is not None))

    async def _finish(self, stop: bool) -> None:
        if stop:
            await self.stop()
        await self.dev.run(["rm", "-rf", self.dir], timeout=10)

    def exec(self, name: str, argv: Sequence[str], *, timeout: float,
             cap: int = 65536) -> Awaitable[RunResult]:
        """Start argv as job `name` (a fresh SSH exec); await the result for its output."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"job name must be letters, digits, - or _ (got {name!r})")
        return self.dev.exec(["sh", "-c", JOB_SH, "lw-job", self.dir, name, *argv],
                             timeout=timeout, cap=cap)

    async def stop(self, name: str | None = None) -> list[str]:
        """TERM (then KILL) job `name`, or every job of the group (which is then marked stopped:
        a job not yet started never runs). Returns the stop script's report lines."""
        if name is not None and not _NAME.fullmatch(name):
            raise ValueError(f"job name must be letters, digits, - or _ (got {name!r})")
        grace = str(max(1, round(STOP_GRACE_S / 0.05)))
        res = await self.dev.run(["sh", "-c", STOP_SH, "lw-stop", self.dir,
                                  f"{name}.pid" if name else "", grace], timeout=15)
        self.stopped = res.stdout.split("\n")[:-1] if res.stdout else []
        return self.stopped
