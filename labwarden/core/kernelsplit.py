"""The kernel's CPU split over an interval (a window): per core and in total, % of the interval
in user, system, irq, softirq, idle, ..., and how often each softirq ran. Made on the DUT side by
lab/dut/kstat.py (from /proc/stat and /proc/softirqs); stored on a Window (core/measurements.py).
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field


class CpuSplit(BaseModel):
    """One core's (or all cores') time over an interval, % of that interval."""

    cpu: str = Field(description='"all" or "cpuN"')
    ticks: int = Field(description="USER_HZ ticks elapsed (all fields summed); 0: no time passed")
    user_pct: float
    nice_pct: float
    system_pct: float
    irq_pct: float
    softirq_pct: float
    idle_pct: float
    iowait_pct: float
    steal_pct: float
    busy_pct: float = Field(description="user + nice + system + irq + softirq")
    softirq_system_pct: float = Field(description="softirq + system: the kernel's packet work")


class SoftirqDelta(BaseModel):
    """How often one softirq type ran over an interval."""

    per_cpu: list[int] = Field(description="count per CPU column of /proc/softirqs")
    total: int
    per_s: float | None = Field(description="total / interval (None: no uptime in the snapshots)")


class KernelSplit(BaseModel):
    """The delta of two snapshots: the CPU split per core and in total, and softirq counts."""

    wall_s: float | None = Field(description="interval from /proc/uptime, s (None: unknown)")
    total: CpuSplit = Field(description="all cores together: % of the cores' summed time")
    per_cpu: list[CpuSplit] = Field(description="each core online in both snapshots, by index")
    softirqs: dict[str, SoftirqDelta] = Field(description="type (NET_RX, NET_TX, TIMER, ...) -> delta")
    busiest_cpu: str | None = Field(description="the core with the highest softirq + system share")
    busiest_softirq_system_pct: float = Field(description="that core's softirq + system, % of it")
    ksoftirqd: dict[str, float] = Field(default_factory=dict, description="ksoftirqd/N -> its CPU, "
                                        "% of one core (softirq work deferred to the thread)")

    def busiest_ksoftirqd(self) -> tuple[str, float] | None:
        """(thread, % of one core) of the busiest ksoftirqd; None when none ran."""
        hot = max(self.ksoftirqd.items(), key=lambda kv: kv[1], default=None)
        return hot if hot and hot[1] > 0 else None

    def summary(self) -> str:
        """One line for a person: the busiest core's kernel share, the total, NET_RX rate."""
        t = self.total
        parts = [f"all cores: softirq {t.softirq_pct:.1f}% system {t.system_pct:.1f}% "
                 f"user {t.user_pct:.1f}% idle {t.idle_pct:.1f}%"]
        if self.busiest_cpu is not None:
            b = next(c for c in self.per_cpu if c.cpu == self.busiest_cpu)
            parts.insert(0, f"busiest {b.cpu}: softirq+system {b.softirq_system_pct:.1f}% "
                         f"(softirq {b.softirq_pct:.1f}%, system {b.system_pct:.1f}%)")
        for name in ("NET_RX", "NET_TX"):
            d = self.softirqs.get(name)
            if d is not None and d.per_s is not None:
                parts.append(f"{name} {d.per_s:.0f}/s")
        if (hot := self.busiest_ksoftirqd()) is not None:
            parts.append(f"{hot[0]} {hot[1]:.1f}% of a core")
        return "; ".join(parts)


class KernelSummary(BaseModel):
    """The DUT's kernel CPU split over the windows (details per window in the record)."""

    softirq_pct: float = Field(description="all cores: softirq, % of the cores' time, mean of reps")
    system_pct: float = Field(description="all cores: system, % of the cores' time, mean of reps")
    busiest_cpu: str | None = Field(description="the core with the highest softirq + system share "
                                    "(in the rep where it was highest)")
    busiest_softirq_system_pct: float = Field(description="that core's softirq + system, % of it "
                                              "(highest over the reps)")
    net_rx_per_s: float | None = Field(description="NET_RX softirqs per second, mean of reps")
    ksoftirqd_max_pct: float = Field(0.0, description="the busiest ksoftirqd/N, % of one core "
                                     "(highest over the reps; 0: none ran)")
    per_rep: list[str] = Field(description="one line per window: busiest core, all cores, NET_RX/TX")

    @classmethod
    def of(cls, splits: list[KernelSplit]) -> KernelSummary | None:
        """The windows' splits in a few numbers (None when no window has one)."""
        if not splits:
            return None
        top = max(splits, key=lambda k: k.busiest_softirq_system_pct)
        rx = [d.per_s for k in splits if (d := k.softirqs.get("NET_RX")) and d.per_s is not None]
        return cls(softirq_pct=round(statistics.fmean(k.total.softirq_pct for k in splits), 2),
                   system_pct=round(statistics.fmean(k.total.system_pct for k in splits), 2),
                   busiest_cpu=top.busiest_cpu,
                   busiest_softirq_system_pct=top.busiest_softirq_system_pct,
                   net_rx_per_s=round(statistics.fmean(rx), 1) if rx else None,
                   ksoftirqd_max_pct=max(((h or ("", 0.0))[1] for h in
                                          (k.busiest_ksoftirqd() for k in splits)), default=0.0),
                   per_rep=[k.summary() for k in splits])
