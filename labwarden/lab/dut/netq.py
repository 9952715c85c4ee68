"""Where a DUT's packets go when it cannot keep up: its NICs' counters (packets, drops, tx errors),
the root qdiscs' drops (`tc -s qdisc show`), the softnet backlog (/proc/net/softnet_stat: drops
and time squeezes per CPU) and the ksoftirqd threads' CPU time -- one snapshot per DUT command,
the delta of two per window. `saturate` reads it to name the limit: the CPU (softirq work spilling
into ksoftirqd, softnet squeezes) or a queue (qdisc drops, tx errors while the CPU has room).

The command is a constant POSIX sh script (busybox is enough; `tc` from iproute2 if present).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from labwarden.lab.dut.protocol import DutAccess

SCRIPT = (
    "cat /proc/uptime /proc/net/dev; echo softnet; cat /proc/net/softnet_stat; echo end; "
    "tc -s qdisc show 2>/dev/null; "
    'for p in /proc/[0-9]*; do read -r s < $p/stat 2>/dev/null || continue; '
    'case $s in *"(ksoftirqd/"*) echo "ksoftirqd $s";; esac; done'
)
"""One read of /proc/net/dev for every NIC (a `cat` per counter file would spread the snapshot
over ~0.4 s under TCG, skewing the packet rates), with the DUT's uptime as its timestamp."""
_UPTIME = re.compile(r"^\d+(?:\.\d+)? \d+(?:\.\d+)?$")
_DEV = re.compile(r"^\s*([^\s:]+):\s*(\d[\d\s]*)$")
_QDISC = re.compile(r"^qdisc \S+ \S+ dev (\S+) root")
_SENT = re.compile(r"^\s*Sent \d+ bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)")


class NicCounters(BaseModel):
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    tx_errors: int = 0
    qdisc_dropped: int = 0


class NetqSnapshot(BaseModel):
    uptime_s: float | None = Field(None, description="DUT /proc/uptime when read")
    nics: dict[str, NicCounters]
    softnet_dropped: int = Field(0, description="/proc/net/softnet_stat column 2, all CPUs")
    softnet_squeezed: int = Field(0, description="column 3 (time_squeeze), all CPUs")
    ksoftirqd_ticks: dict[str, int] = Field(default_factory=dict,
                                            description="ksoftirqd/N -> utime + stime, CLK_TCK ticks")


class NetqDelta(BaseModel):
    """Counters over a window."""

    wall_s: float = Field(description="the interval, s (the DUT's uptime)")
    nics: dict[str, NicCounters] = Field(description="per NIC: deltas")
    softnet_dropped: int
    softnet_squeezed: int
    ksoftirqd_pct: dict[str, float] = Field(description="ksoftirqd/N -> % of one core over the window")

    def queue_drops(self, nics: list[str] | None = None) -> int:
        """qdisc drops + tx drops + tx errors (on `nics`, default all)."""
        return sum(c.qdisc_dropped + c.tx_dropped + c.tx_errors for n, c in self.nics.items()
                   if nics is None or n in nics)


def argv() -> list[str]:
    return ["sh", "-c", SCRIPT]


def parse(text: str) -> NetqSnapshot:
    nics: dict[str, NicCounters] = {}
    uptime: float | None = None
    dropped = squeezed = 0
    soft: dict[str, int] = {}
    in_softnet = False
    qdisc_dev: str | None = None
    for line in text.splitlines():
        words = line.split()
        if uptime is None and not nics and len(words) == 2 and _UPTIME.match(line.strip()):
            uptime = float(words[0])
        elif line == "softnet":
            in_softnet = True
        elif line == "end":
            in_softnet = False
        elif in_softnet and len(words) >= 3:
            dropped += int(words[1], 16)
            squeezed += int(words[2], 16)
        elif (m := _DEV.match(line)) is not None:
            v = [int(w) for w in m.group(2).split()]
            if len(v) >= 12:  # rx: bytes packets errs drop ...; tx from the 9th: bytes packets errs drop
                nics[m.group(1)] = NicCounters(rx_packets=v[1], rx_dropped=v[3], tx_packets=v[9],
                                               tx_errors=v[10], tx_dropped=v[11])
        elif words[:1] == ["ksoftirqd"] and ")" in line:
            comm = line[line.index("(") + 1:line.rindex(")")]
            rest = line[line.rindex(")") + 1:].split()
            soft[comm] = int(rest[11]) + int(rest[12])  # fields 14 and 15: utime, stime
        elif (m := _QDISC.match(line)) is not None:
            qdisc_dev = m.group(1)
        elif qdisc_dev is not None and (m := _SENT.match(line)) is not None:
            nics.setdefault(qdisc_dev, NicCounters()).qdisc_dropped += int(m.group(2))
            qdisc_dev = None
    return NetqSnapshot(uptime_s=uptime, nics=nics, softnet_dropped=dropped,
                        softnet_squeezed=squeezed, ksoftirqd_ticks=soft)


def delta(before: NetqSnapshot, after: NetqSnapshot, clk_tck: int) -> NetqDelta:
    if before.uptime_s is None or after.uptime_s is None or after.uptime_s <= before.uptime_s:
        raise ValueError("the snapshots have no uptime, or are out of order (a reboot between?)")
    wall = round(after.uptime_s - before.uptime_s, 3)
    nics = {}
    for name, b in after.nics.items():
        a = before.nics.get(name, NicCounters())
        nics[name] = NicCounters(**{f: max(0, getattr(b, f) - getattr(a, f))
                                    for f in NicCounters.model_fields})
    ks = {c: round(100.0 * max(0, t - before.ksoftirqd_ticks.get(c, t)) / clk_tck / wall, 1)
          for c, t in after.ksoftirqd_ticks.items()}
    return NetqDelta(wall_s=wall, nics=nics,
                     softnet_dropped=max(0, after.softnet_dropped - before.softnet_dropped),
                     softnet_squeezed=max(0, after.softnet_squeezed - before.softnet_squeezed),
                     ksoftirqd_pct=ks)


async def snapshot(dev: DutAccess, timeout: float = 20) -> NetqSnapshot:
    res = await dev.run(argv(), timeout=timeout, cap=1 << 20, check=True)
    return parse(res.stdout)
