"""A 1 Hz sampler of one process that runs on the DUT (POSIX sh builtins only: no Python, no
forks per sample on busybox), and the host-side parser that turns its lines into CPU%, RSS, IO.

Timestamps come from /proc/uptime, so a late `sleep` does not bias the rate. CPU has two clocks:
utime+stime from /proc/PID/stat in ticks of the DUT's CLK_TCK (never assumed), and each thread's
run time in nanoseconds (se.sum_exec_runtime, the first field of /proc/PID/task/TID/schedstat).
At 7% of a core a 4 s window holds ~28 ticks, so one tick is 3.6% of the figure; the nanosecond
sum is used wherever it is whole (see SamplerResult.cpu), else ticks, and the record says which.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.measurements import CpuClock
from labwarden.lab.procfs import parse_stat

TICKS_SLACK = 3
"""How many ticks the nanosecond sum may fall short of utime+stime over a window (plus
SKEW_SLACK of the ticks counted) before it is distrusted. utime and stime are each truncated to
whole ticks (the kernel scales both from the same nanosecond total), so their sum reads up to 2
ticks low at either end; the third tick, and SKEW_SLACK, cover the sampler being preempted
between reading stat and the schedstat files while the target runs (up to ~2 ticks of 300 were
seen here with three busy threads). A larger shortfall means run time left the sum: a thread
started and exited between two samples."""

SKEW_SLACK = 0.02
"""The part of the ticks counted that the shortfall may reach on top of TICKS_SLACK: a
preempted sampler's skew grows with the target's rate (a 50 ms delay at one busy core is 5
ticks; over a 4 s window that is 1.25% of the 400 counted)."""


# $1 = pid, $2 = samples. Per sample, two lines:
#   "S uptime rss_kb read_bytes write_bytes <stat after ')'>"
#   "N tid:ns:wait ..."   -- each live thread's se.sum_exec_runtime and its run-queue wait
#                            (sched_info.run_delay), ns, read right after stat;
#                            "N" alone where the kernel has no schedstat (CONFIG_SCHED_INFO off).
# The ns values are printed, not summed: busybox built without 64-bit shell arithmetic would
# overflow past 2.1 s; the host sums them, and sees which threads came and went.
SAMPLER_SH = r"""
pid=$1; n=$2; i=0
while [ "$i" -lt "$n" ]; do
  read -r up _ < /proc/uptime || exit 3
  read -r st < "/proc/$pid/stat" 2>/dev/null || { echo "GONE $up"; exit 4; }
  ns=
  for t in /proc/"$pid"/task/*; do
    { read -r v w _ < "$t/schedstat"; } 2>/dev/null && ns="$ns ${t##*/}:$v:$w"
  done
  rss=0; rb=0; wb=0
  while read -r k v _; do [ "$k" = "VmRSS:" ] && rss=$v; done < "/proc/$pid/status"
  if [ -r "/proc/$pid/io" ]; then
    while read -r k v; do
      case $k in read_bytes:) rb=$v ;; write_bytes:) wb=$v ;; esac
    done < "/proc/$pid/io"
  fi
  echo "S $up $rss $rb $wb ${st#*) }"
  echo "N$ns"
  i=$((i+1))
  if [ "$i" -lt "$n" ]; then sleep 1; fi
done
exit 0
"""


class Sample(BaseModel):
    t: float = Field(description="DUT uptime, s")
    ticks: int = Field(description="utime + stime, clock ticks")
    starttime: int
    rss_kb: int
    read_bytes: int
    write_bytes: int
    run_ns: dict[int, int] | None = Field(None, description="each live thread's run time (tid -> "
                                          "se.sum_exec_runtime, ns); None: not read")
    wait_ns: dict[int, int] | None = Field(None, description="each live thread's time waiting "
                                           "for a CPU on a run queue (tid -> run_delay, ns)")


class CpuFigures(BaseModel):
    """A window's CPU, from one clock: the mean, the 1 Hz series, and what one step is worth."""

    clock: CpuClock
    mean: float | None = Field(description="% of one core over the window; None: the process "
                               "restarted within it")
    series: list[float] = Field(description="% of one core over each ~1 s interval")
    resolution_pct: float | None = Field(description="the mean's smallest step, % of one core")
    fallback: str | None = Field(None, description="why ticks, when nanoseconds were wanted")


def _sig(x: float) -> float:
    return float(f"{x:.3g}")


class SamplerResult(BaseModel):
    samples: list[Sample]
    gone: bool = Field(description="the process exited during the window")

    def ns_unusable(self, clk_tck: int) -> str | None:
        """Why the nanosecond run time cannot give this window's CPU (None: it can). It can when
        every sample read it, no thread seen in one sample is missing from the next (an exited
        thread's time leaves the sum; a thread that starts is fine: all its time is in the
        window), the process did not restart, and the sum does not fall short of utime+stime
        (which keeps exited threads' time) by more than the slack (TICKS_SLACK, SKEW_SLACK)."""
        s = self.samples
        if len(s) < 2:
            return "fewer than two samples"
        if self.restarted():
            return "the process restarted during the window"
        if all(x.run_ns is None for x in s):
            return "the DUT has no /proc/PID/task/*/schedstat (a kernel without CONFIG_SCHED_INFO)"
        if any(x.run_ns is None for x in s):
            return "a sample lacks the schedstat figures"
        if any(not any(x.run_ns.values()) for x in s if x.run_ns is not None):
            return "schedstat reads 0 on the DUT (sched_info is off)"
        for a, b in itertools.pairwise(s):
            if a.run_ns is not None and b.run_ns is not None and a.run_ns.keys() - b.run_ns.keys():
                return "a thread exited mid-window (its run time leaves the nanosecond sum)"
        ticks = s[-1].ticks - s[0].ticks
        short = ticks - (_ns(s[-1]) - _ns(s[0])) * clk_tck / 1e9
        if short > TICKS_SLACK + SKEW_SLACK * ticks:
            return ("the nanosecond sum fell short of utime+stime by more than the slack of "
                    "truncation and skew (a thread started and exited between two samples)")
        return None

    def cpu(self, clk_tck: int, want: Literal["auto", "ticks"] = "auto") -> CpuFigures:
        """The window's CPU from the finest whole clock: nanoseconds unless `want` is "ticks" or
        ns_unusable() says why not (then `fallback` says it)."""
        why = self.ns_unusable(clk_tck) if want == "auto" else None
        clock: CpuClock = "schedstat_ns" if want == "auto" and why is None else "ticks"

        def used(x: Sample) -> float:  # seconds of CPU
            return _ns(x) / 1e9 if clock == "schedstat_ns" else x.ticks / clk_tck

        series = [100.0 * (used(b) - used(a)) / (b.t - a.t)
                  for a, b in itertools.pairwise(self.samples)
                  if b.starttime == a.starttime and b.t > a.t]
        if len(self.samples) < 2 or self.restarted():
            return CpuFigures(clock=clock, mean=None, series=series, resolution_pct=None,
                              fallback=why)
        a, b = self.samples[0], self.samples[-1]
        span = b.t - a.t
        if span <= 0:
            return CpuFigures(clock=clock, mean=0.0, series=series, resolution_pct=None,
                              fallback=why)
        mean = 100.0 * (used(b) - used(a)) / span
        # The figure's step: the larger of its count's and its timestamps'. The span comes from
        # two /proc/uptime readings in 10 ms steps, so it is known to +-10 ms, which moves the
        # figure by up to mean * 0.01 / span (% of a core). Ticks count in 1/CLK_TCK s, so one
        # tick over the span is 100 / CLK_TCK / span, the larger term below 100% of a core at
        # CLK_TCK 100. The run time counts in 1 ns steps, so its step is the timestamps' (the
        # few microseconds between reading uptime and the schedstat files are not in it).
        count = 1.0 / clk_tck if clock == "ticks" else 1e-9
        step = max(100.0 * count / span, abs(mean) * 0.01 / span)
        return CpuFigures(clock=clock, mean=mean, series=series, resolution_pct=_sig(step),
                          fallback=why)

    def cpu_series(self, clk_tck: int, want: Literal["auto", "ticks"] = "auto") -> list[float]:
        """CPU% of one core over each ~1 s interval (the clock as in cpu())."""
        return self.cpu(clk_tck, want).series

    def cpu_mean(self, clk_tck: int, want: Literal["auto", "ticks"] = "auto") -> float:
        """CPU% over the whole window (first to last sample of one process instance)."""
        if self.samples and self.restarted():
            raise ValueError("the process restarted during the window")
        return self.cpu(clk_tck, want).mean or 0.0

    def wait_pct(self) -> float | None:
        """How long the target's threads waited on a run queue for a CPU over the window, % of
        one core (summed over the threads alive at both ends): a starved target -- a CPU hog
        beside it, a saturated host -- does less work per second, whatever the patch. None:
        not read, or the process restarted."""
        s = self.samples
        if len(s) < 2 or self.restarted() or s[0].wait_ns is None or s[-1].wait_ns is None:
            return None
        span = s[-1].t - s[0].t
        both = s[0].wait_ns.keys() & s[-1].wait_ns.keys()
        if span <= 0 or not both:
            return None
        return 100.0 * sum(s[-1].wait_ns[t] - s[0].wait_ns[t] for t in both) / 1e9 / span

    def restarted(self) -> bool:
        return len({s.starttime for s in self.samples}) > 1

    def rss_kb(self) -> int:
        return int(statistics.median(s.rss_kb for s in self.samples)) if self.samples else 0


def _ns(x: Sample) -> int:
    return sum(x.run_ns.values()) if x.run_ns else 0


def argv(pid: int, samples: int) -> list[str]:
    """The sampler as an argv: the script is a constant; pid and count are positional args."""
    return ["sh", "-c", SAMPLER_SH, "lw-sampler", str(int(pid)), str(int(samples))]


def _run_ns(line: str) -> tuple[dict[int, int] | None, dict[int, int] | None]:
    """An "N tid:ns[:wait] ..." line: (run time, run-queue wait) per thread; None where it holds
    no figure (no schedstat on the DUT; a line of the first format, without the wait)."""
    run: dict[int, int] = {}
    wait: dict[int, int] = {}
    for word in line.split()[1:]:
        tid, ns, *rest = word.split(":")
        run[int(tid)] = int(ns)
        if rest and rest[0]:
            wait[int(tid)] = int(rest[0])
    return run or None, wait if wait and len(wait) == len(run) else None


def parse(text: str) -> SamplerResult:
    """The sampler's output. Each "N" line belongs to the "S" line before it; a last line
    without its newline (output cut short) is left out: its numbers may be cut too."""
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()
    samples: list[Sample] = []
    gone = False
    for line in lines:
        if line.startswith("GONE"):
            gone = True
        elif line.startswith("S "):
            _, up, rss, rb, wb, rest = line.split(" ", 5)
            st = parse_stat(f"0 (x) {rest}")
            samples.append(Sample(t=float(up), ticks=st.utime + st.stime, starttime=st.starttime,
                                  rss_kb=int(rss), read_bytes=int(rb), write_bytes=int(wb)))
        elif (line == "N" or line.startswith("N ")) and samples:
            samples[-1].run_ns, samples[-1].wait_ns = _run_ns(line)
    return SamplerResult(samples=samples, gone=gone)
