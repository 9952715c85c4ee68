"""The kernel CPU split (lab/dut/kstat.py): this host's real /proc, and synthetic text for the
edges (hot-plugged cores, counters going backwards, no /proc/uptime)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwarden.core.kernelsplit import KernelSummary
from labwarden.lab.dut import kstat

STAT_A = """cpu  100 0 50 800 10 5 20 0 7 0
cpu0 50 0 20 400 5 5 10 0 7 0
cpu1 50 0 30 400 5 0 10 0 0 0
intr 1234 0 0
ctxt 999
softirq 500 0 100 1 300 0 0 0 0 0 99
"""
STAT_B = """cpu  200 0 150 900 5 5 120 20 50 0
cpu0 60 0 90 410 3 5 90 0 40 0
cpu1 140 0 60 490 2 0 30 20 10 0
intr 2234 0 0
ctxt 1999
"""
SOFT_A = """                    CPU0       CPU1
          HI:          0          0
      NET_TX:          5          0
      NET_RX:        100        200
         RCU:         10         10
"""
SOFT_B = """                    CPU0       CPU1
          HI:          0          0
      NET_TX:          7          0
      NET_RX:       1100        300
         RCU:          9         20
"""


KSOFT_A = ("KSOFTIRQD 14 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 3 230 0 0 20 0 1 0 22 0 0\n"
           "KSOFTIRQD 22 (ksoftirqd/1) S 2 0 0 0 -1 69238848 0 0 0 0 53 243 0 0 20 0 1 0 22 0 0\n")
KSOFT_B = KSOFT_A.replace(" 3 230 ", " 3 272 ")  # ksoftirqd/0: +42 ticks; ksoftirqd/1: none


def local_snapshot() -> kstat.KstatSnapshot:
    """This host's /proc through the DUT command itself (cat is the whole DUT side)."""
    out = subprocess.run(kstat.argv(), capture_output=True, text=True, check=True).stdout
    return kstat.parse(out)


def test_synthetic_delta_shares_and_softirqs() -> None:
    a = kstat.parse("1000.50 1800.00\n" + STAT_A + SOFT_A + KSOFT_A)
    b = kstat.parse("1010.50 1815.00\n" + STAT_B + SOFT_B + KSOFT_B)
    assert a.ksoftirqd == {"ksoftirqd/0": 233, "ksoftirqd/1": 296}
    assert a.uptime_s == 1000.5 and sorted(a.cpus) == [0, 1]
    assert a.total.user == 100 and a.total.total() == 985  # guest (7) left out: already in user
    d = kstat.delta(a, b)
    assert d.wall_s == 10.0
    # cpu0: user 10, system 70, idle 10, iowait -2 -> 0, softirq 80 = 170 ticks
    c0 = d.per_cpu[0]
    assert (c0.cpu, c0.ticks) == ("cpu0", 170)
    assert c0.softirq_pct == pytest.approx(100 * 80 / 170, abs=1e-3)
    assert c0.iowait_pct == 0.0
    assert c0.softirq_system_pct == pytest.approx(100 * 150 / 170, abs=1e-3)
    assert d.busiest_cpu == "cpu0" and d.busiest_softirq_system_pct == c0.softirq_system_pct
    assert d.per_cpu[1].steal_pct > 0
    assert d.softirqs["NET_RX"].per_cpu == [1000, 100]
    assert d.softirqs["NET_RX"].per_s == 110.0
    assert d.softirqs["RCU"].per_cpu == [0, 10]  # backwards counts as 0
    assert "busiest cpu0: softirq+system 88.2%" in d.summary()
    assert "NET_RX 110/s" in d.summary()
    # 420 ticks over 2 cores: one core had 210; ksoftirqd/0 used 42 of them
    assert d.ksoftirqd == {"ksoftirqd/0": 20.0, "ksoftirqd/1": 0.0}
    assert d.busiest_ksoftirqd() == ("ksoftirqd/0", 20.0)
    assert "ksoftirqd/0 20.0% of a core" in d.summary()


def test_without_uptime_hotplug_and_no_time() -> None:
    a = kstat.parse(STAT_A + SOFT_A)
    b = kstat.parse(STAT_B.replace("cpu1 140 0 60 490 2 0 30 20 10 0\n", "") + SOFT_B)
    d = kstat.delta(a, b)
    assert d.wall_s is None and d.softirqs["NET_RX"].per_s is None
    assert [c.cpu for c in d.per_cpu] == ["cpu0"]  # cpu1 went offline: only cores in both
    same = kstat.delta(a, a)
    assert same.total.ticks == 0 and same.total.busy_pct == 0.0
    with pytest.raises(ValueError, match="no `cpu` line"):
        kstat.parse(SOFT_A)
    with pytest.raises(ValueError, match="rebooted"):
        kstat.delta(kstat.parse("50.0 1.0\n" + STAT_A), kstat.parse("10.0 1.0\n" + STAT_B))


def test_this_hosts_proc_round_trips_and_sums_to_100() -> None:
    t0 = time.monotonic()
    a = local_snapshot()
    ncpu = len(Path("/sys/devices/system/cpu/online").read_text().strip().split(","))
    assert a.uptime_s and a.uptime_s > 0 and len(a.cpus) >= ncpu
    assert {"NET_RX", "NET_TX", "TIMER"} <= a.softirqs.keys()
    assert {f"ksoftirqd/{n}" for n in a.cpus} <= a.ksoftirqd.keys()  # one per online core
    assert all(len(v) >= len(a.cpus) for v in a.softirqs.values())
    assert kstat.KstatSnapshot.model_validate_json(a.model_dump_json()) == a
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        d = kstat.delta(a, local_snapshot())
        span = time.monotonic() - t0
    finally:
        busy.kill()
        busy.wait()
    # the interval between the two reads: at least the sleep between them, at most the time
    # measured around both (give or take /proc/uptime's 10 ms) -- a relation, not a time; it
    # fails for another unit or field (jiffies, idle time) read as the interval
    assert d.wall_s and 1.0 - 0.01 <= d.wall_s <= span + 0.01, (d.wall_s, span)
    for c in [d.total, *d.per_cpu]:
        s = sum(getattr(c, f"{f}_pct") for f in kstat.FIELDS)
        assert s == pytest.approx(100.0, abs=0.05) or c.ticks == 0
    # one spinning process fills at least one core's worth of user time
    assert d.total.user_pct + d.total.nice_pct > 100 / len(d.per_cpu) * 0.5
    assert d.softirqs["TIMER"].total > 0
    assert d.ksoftirqd.keys() == a.ksoftirqd.keys() and all(v >= 0 for v in d.ksoftirqd.values())
    assert kstat.KernelSplit.model_validate_json(d.model_dump_json()) == d


def test_summary_over_reps() -> None:
    a = kstat.parse("1000.50 1800.00\n" + STAT_A + SOFT_A + KSOFT_A)
    b = kstat.parse("1010.50 1815.00\n" + STAT_B + SOFT_B + KSOFT_B)
    one, none = kstat.delta(a, b), kstat.delta(a, a)
    s = KernelSummary.of([one, none])
    assert s is not None
    assert s.busiest_cpu == "cpu0" and s.busiest_softirq_system_pct == one.busiest_softirq_system_pct
    assert s.per_cpu_softirq_system_pct == {
        "cpu0": round(one.per_cpu[0].softirq_system_pct / 2, 1),
        "cpu1": round(one.per_cpu[1].softirq_system_pct / 2, 1)}
    assert s.net_rx_per_s == 110.0  # a zero-length interval has no rate: left out of the mean
    assert s.ksoftirqd_max_pct == 20.0
