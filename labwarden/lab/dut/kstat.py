"""The kernel's CPU split on a DUT: where a core's time went (user, system, irq, softirq, idle, ...)
and which softirqs ran, between two snapshots of `/proc/stat` and `/proc/softirqs` (the result
models live in core/kernelsplit.py, so a Window can hold them; they are re-exported here).

One DUT command per snapshot: a constant POSIX sh script (busybox ash is enough) that cats
/proc/uptime, /proc/stat and /proc/softirqs, then prints the stat line of each `ksoftirqd/N`
thread (found by /proc/PID/comm with shell builtins: no fork per process); everything else
happens here. The same parser reads this host's /proc in tests.

ksoftirqd/N's share is its utime+stime over the interval divided by one core's ticks in it (the
total ticks over the cores): the kernel defers softirq work to it when softirqs keep coming back
-- the sign that packet work has filled core N.

The tick fields of /proc/stat are in USER_HZ (the DUT's CLK_TCK), but shares are ratios of ticks
of the same interval, so CLK_TCK cancels out. `guest` and `guest_nice` are already counted in
`user` and `nice`, so they are left out of the total (as top does). A counter that goes backwards
(iowait can, on some kernels; a CPU hot-plugged between snapshots) counts as 0, never negative.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.core.kernelsplit import CpuSplit, KernelSplit, SoftirqDelta
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.dut.protocol import DutAccess
from labwarden.lab.procfs import parse_stat

__all__ = ["CpuSplit", "CpuTicks", "KernelSplit", "KstatSnapshot", "SoftirqDelta", "argv",
           "delta", "parse", "snapshot", "snapshot_or_reason"]

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_UPTIME = re.compile(r"^\d+(?:\.\d+)? \d+(?:\.\d+)?$")
_CPU = re.compile(r"^cpu(\d*)\s")
_KSOFTIRQD = "KSOFTIRQD "
SNAPSHOT_SH = r"""
cat /proc/uptime /proc/stat /proc/softirqs || exit $?
for d in /proc/[0-9]*; do
  read -r c 2>/dev/null < "$d/comm" || continue
  case $c in ksoftirqd/*) read -r st 2>/dev/null < "$d/stat" && echo "KSOFTIRQD $st" ;; esac
done
exit 0
"""
"""Constant: no input reaches it. A process that exits mid-loop is skipped."""


class CpuTicks(BaseModel):
    """One `cpu` line of /proc/stat, in USER_HZ ticks since boot."""

    user: int = 0
    nice: int = 0
    system: int = 0
    idle: int = 0
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0

    def total(self) -> int:
        return sum(getattr(self, f) for f in FIELDS)


class KstatSnapshot(BaseModel):
    """/proc/stat's cpu lines and /proc/softirqs at one moment."""

    uptime_s: float | None = Field(None, description="DUT /proc/uptime (None: not in the text)")
    total: CpuTicks = Field(description="the `cpu` line: all cores summed")
    cpus: dict[int, CpuTicks] = Field(description="`cpuN` lines by N (online cores only)")
    softirqs: dict[str, list[int]] = Field(
        default_factory=dict, description="/proc/softirqs: type (NET_RX, ...) -> count per CPU column")
    ksoftirqd: dict[str, int] = Field(default_factory=dict, description="ksoftirqd/N -> its "
                                      "utime + stime, USER_HZ ticks")


def argv() -> list[str]:
    """The snapshot command: a constant argv (no input reaches it)."""
    return ["sh", "-c", SNAPSHOT_SH, "lw-kstat"]


def parse(text: str) -> KstatSnapshot:
    """Parse the snapshot's output: `cat [/proc/uptime] /proc/stat [/proc/softirqs]` then
    optional `KSOFTIRQD <stat line>` lines (each part's own format is recognised, so the plain
    cat of /proc/stat alone parses too). ValueError without a `cpu` line."""
    uptime: float | None = None
    total: CpuTicks | None = None
    cpus: dict[int, CpuTicks] = {}
    softirqs: dict[str, list[int]] = {}
    ksoftirqd: dict[str, int] = {}
    columns = 0
    for line in text.splitlines():
        if line.startswith(_KSOFTIRQD):
            st = parse_stat(line[len(_KSOFTIRQD):])
            ksoftirqd[st.comm] = st.utime + st.stime
            continue
        if uptime is None and total is None and _UPTIME.match(line.strip()):
            uptime = float(line.split()[0])
            continue
        m = _CPU.match(line)
        if m:
            ticks = CpuTicks(**dict(zip(FIELDS, (int(v) for v in line.split()[1:9]), strict=False)))
            if m.group(1):
                cpus[int(m.group(1))] = ticks
            else:
                total = ticks
            continue
        words = line.split()
        if words and all(w.startswith("CPU") for w in words):
            columns = len(words)  # the /proc/softirqs header: CPU0 CPU1 ...
        elif columns and words and words[0].endswith(":") and len(words) > 1:
            softirqs[words[0][:-1]] = [int(v) for v in words[1:columns + 1]]
    if total is None:
        raise ValueError("no `cpu` line: the text is not /proc/stat output")
    return KstatSnapshot(uptime_s=uptime, total=total, cpus=cpus, softirqs=softirqs,
                         ksoftirqd=ksoftirqd)


def _split(cpu: str, a: CpuTicks, b: CpuTicks) -> CpuSplit:
    d = {f: max(0, getattr(b, f) - getattr(a, f)) for f in FIELDS}
    ticks = sum(d.values())

    def pct(*names: str) -> float:
        return round(100.0 * sum(d[n] for n in names) / ticks, 3) if ticks else 0.0

    return CpuSplit(cpu=cpu, ticks=ticks, **{f"{f}_pct": pct(f) for f in FIELDS},
                    busy_pct=pct("user", "nice", "system", "irq", "softirq"),
                    softirq_system_pct=pct("softirq", "system"))


def delta(before: KstatSnapshot, after: KstatSnapshot) -> KernelSplit:
    """The split over the interval between two snapshots of the same DUT (before first)."""
    wall = None
    if before.uptime_s is not None and after.uptime_s is not None:
        if after.uptime_s < before.uptime_s:
            raise ValueError("the snapshots are out of order or the DUT rebooted between them "
                             f"(uptime {before.uptime_s} -> {after.uptime_s} s)")
        wall = round(after.uptime_s - before.uptime_s, 3)
    per_cpu = [_split(f"cpu{n}", before.cpus[n], after.cpus[n])
               for n in sorted(before.cpus.keys() & after.cpus.keys())]
    soft: dict[str, SoftirqDelta] = {}
    for name, counts in after.softirqs.items():
        prev = before.softirqs.get(name, [])
        per = [max(0, c - (prev[i] if i < len(prev) else 0)) for i, c in enumerate(counts)]
        raised = sum(per)
        soft[name] = SoftirqDelta(per_cpu=per, total=raised,
                                  per_s=round(raised / wall, 1) if wall else None)
    busiest = max(per_cpu, key=lambda c: c.softirq_system_pct, default=None)
    total = _split("all", before.total, after.total)
    core_ticks = total.ticks / len(per_cpu) if per_cpu else 0  # one core's ticks in the interval
    ksoft = {name: round(100.0 * max(0, t - before.ksoftirqd[name]) / core_ticks, 2)
             for name, t in sorted(after.ksoftirqd.items())
             if name in before.ksoftirqd and core_ticks}
    return KernelSplit(wall_s=wall, total=total, per_cpu=per_cpu, softirqs=soft, ksoftirqd=ksoft,
                       busiest_cpu=busiest.cpu if busiest else None,
                       busiest_softirq_system_pct=busiest.softirq_system_pct if busiest else 0.0)


async def snapshot(dev: DutAccess, timeout: float = 10) -> KstatSnapshot:
    """One snapshot from the DUT (one command on the persistent channel)."""
    res = await dev.run(argv(), timeout=timeout, cap=1 << 20, check=True)
    return parse(res.stdout)


async def snapshot_or_reason(dev: DutAccess, timeout: float = 10) -> tuple[KstatSnapshot | None, str | None]:
    """(snapshot, None), or (None, why) when the DUT cannot give one (device text in `why` is
    quoted: DeviceError quotes its own, a parse error is quoted here)."""
    try:
        return await snapshot(dev, timeout), None
    except DeviceError as exc:
        return None, exc.problem
    except ValueError as exc:
        return None, f"/proc/stat or /proc/softirqs unreadable: {quote(exc)}"
