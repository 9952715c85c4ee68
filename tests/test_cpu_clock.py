"""The sampler's two CPU clocks: each thread's run time in ns (/proc/PID/task/*/schedstat) where
it is whole, else utime+stime ticks, and the record says which. The real SAMPLER_SH (sh -c, as
sampler.argv gives it; and under dash and busybox ash) against real busy processes; the parser's
fallbacks from hand-written sampler text (a DUT without schedstat prints no figures).

Every figure compared here is two clocks of one process read at the same moments, so a loaded
host changes both alike: the assertions hold however busy the host is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwarden.core.measurements import MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.lab.config import TargetSection
from labwarden.lab.dut import sampler
from labwarden.report.data import WindowRow

CLK = 100  # the parser's figures below are in ticks of 100 Hz; the live ones use the host's
SHELLS = [pytest.param(["sh"], id="sh"),
          pytest.param(["dash"], id="dash", marks=pytest.mark.skipif(
              not shutil.which("dash"), reason="no dash")),
          pytest.param(["busybox", "sh"], id="busybox", marks=pytest.mark.skipif(
              not shutil.which("busybox"), reason="no busybox"))]

THREADS = """
import sys, threading, time
stop = threading.Event()
def spin():
    while not stop.is_set():
        pass
workers = [threading.Thread(target=spin) for _ in range(3)]
for w in workers:
    w.start()
sys.stdin.readline()  # a line: the workers exit
stop.set()
for w in workers:
    w.join()
time.sleep(60)
"""
"""A leader that sleeps and three busy threads, which exit when a line arrives on stdin."""


def _clk() -> int:
    return os.sysconf("SC_CLK_TCK")


def _sample(pid: int, n: int, shell: list[str] | None = None) -> sampler.SamplerResult:
    argv = sampler.argv(pid, n)
    if shell is not None:
        argv = [*shell, *argv[1:]]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=n + 30)
    assert res.returncode == 0 and not res.stderr, res.stderr
    return sampler.parse(res.stdout)


def _tasks(pid: int) -> list[int]:
    return sorted(int(p.name) for p in Path(f"/proc/{pid}/task").iterdir())


def _agree(got: sampler.SamplerResult) -> None:
    """ns chosen, and within the slack of the ticks figure (utime and stime are each truncated
    to a tick at either end; a sampler preempted between stat and schedstat skews them)."""
    ns, ticks = got.cpu(_clk()), got.cpu(_clk(), "ticks")
    assert ns.clock == "schedstat_ns" and ns.fallback is None, ns
    assert ticks.clock == "ticks" and ticks.fallback is None  # asked for: not a fallback
    assert ns.mean is not None and ticks.mean is not None and ticks.resolution_pct
    counted = ticks.mean / ticks.resolution_pct  # ticks in the window
    assert abs(ns.mean - ticks.mean) <= ticks.resolution_pct * (
        sampler.TICKS_SLACK + sampler.SKEW_SLACK * counted), (ns, ticks)
    # ns has no count step, only the timestamps' (mean x 10 ms / span): finer than one tick
    # below a full core; a process at 100% of a core reads the same step either way (a quiet
    # box: 0.334 vs 0.333 -- the ns mean 100.2%, the ticks' 100.0%)
    span = got.samples[-1].t - got.samples[0].t
    assert ns.resolution_pct == pytest.approx(abs(ns.mean) * 0.01 / span, rel=0.02), ns
    one_tick = 100.0 / _clk() / span
    assert ns.resolution_pct < one_tick or ns.mean >= 99.0, (ns, one_tick)
    assert len(ns.series) == len(got.samples) - 1


def test_a_busy_process_is_measured_in_ns() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        got = _sample(busy.pid, 4)
        assert all(s.run_ns is not None and list(s.run_ns) == [busy.pid] for s in got.samples)
        _agree(got)
        assert got.cpu_mean(_clk()) == got.cpu(_clk()).mean  # the old door uses the finer clock
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.parametrize("shell", SHELLS)
def test_the_ns_sum_covers_every_thread(shell: list[str]) -> None:
    """Three busy threads and a sleeping leader: /proc/PID/schedstat alone (the leader) would
    read ~0; the sum over /proc/PID/task/* holds the workers' time."""
    proc = subprocess.Popen([sys.executable, "-c", THREADS], stdin=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            if len(_tasks(proc.pid)) == 4:
                break
            time.sleep(0.01)
        got = _sample(proc.pid, 4, shell)
        first, last = got.samples[0].run_ns, got.samples[-1].run_ns
        assert first is not None and last is not None and len(first) == len(last) == 4
        total = sum(last.values()) - sum(first.values())
        leader = last[proc.pid] - first[proc.pid]
        assert total > 0 and leader < 0.1 * total, (leader, total)
        _agree(got)
    finally:
        proc.kill()
        proc.wait()


def test_threads_that_exit_mid_window_fall_back_to_ticks() -> None:
    """The workers exit after the first sample: their time leaves the ns sum (it drops), so the
    window is measured in ticks, which keep a dead thread's time, and says why."""
    proc = subprocess.Popen([sys.executable, "-c", THREADS], stdin=subprocess.PIPE, text=True)
    try:
        for _ in range(500):  # the workers have run a while: their exit drops the sum
            tasks = _tasks(proc.pid)
            if len(tasks) == 4 and sum(int(Path(f"/proc/{proc.pid}/task/{t}/schedstat").read_text()
                                           .split()[0]) for t in tasks[1:]) > 50e6:
                break
            time.sleep(0.01)
        run = subprocess.Popen(sampler.argv(proc.pid, 4), stdout=subprocess.PIPE, text=True)
        assert run.stdout is not None
        head = [run.stdout.readline(), run.stdout.readline()]  # the first sample: S and N
        assert head[0].startswith("S ") and len(head[1].split()) == 5, head
        assert proc.stdin is not None
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        got = sampler.parse("".join(head) + run.stdout.read())
        assert run.wait(30) == 0
        assert got.samples[0].run_ns is not None and got.samples[-1].run_ns is not None
        assert list(got.samples[-1].run_ns) == [proc.pid]  # the leader alone
        assert sampler._ns(got.samples[-1]) < sampler._ns(got.samples[0])  # the ns sum dropped
        cpu = got.cpu(_clk())
        assert cpu.clock == "ticks" and cpu.fallback is not None and "exited" in cpu.fallback
        assert cpu.mean is not None and cpu.mean >= 0
        assert cpu.resolution_pct == pytest.approx(
            100 / _clk() / (got.samples[-1].t - got.samples[0].t), rel=0.01)
    finally:
        proc.kill()
        proc.wait()


def _s(t: float, ticks: int) -> str:
    """One sampler "S" line: uptime t, utime = ticks, stime 0 (the rest as /proc/PID/stat)."""
    return (f"S {t:.2f} 1234 0 0 S 1 4242 4242 0 -1 4194560 100 0 0 0 {ticks} 0 0 0 20 0 1 0 "
            "98765 1000000 321 18446744073709551615\n")


def test_ns_from_sampler_text_and_its_step() -> None:
    text = (_s(100.0, 300) + "N 4242:1000000000 4243:5\n" + _s(101.0, 303) +
            "N 4242:1030000000 4243:5\n" + _s(102.0, 307) + "N 4242:1060000000 4243:10000005 9:1\n")
    got = sampler.parse(text)
    cpu = got.cpu(CLK)
    assert cpu.clock == "schedstat_ns" and cpu.fallback is None
    assert cpu.mean == pytest.approx(3.5) and cpu.series == pytest.approx([3.0, 4.0])
    # the span's 10 ms timestamps move 3.5% by 3.5 * 0.01 / 2 s; one tick in 2 s is 0.5
    assert cpu.resolution_pct == pytest.approx(0.0175)
    ticks = got.cpu(CLK, "ticks")
    assert ticks.mean == pytest.approx(3.5) and (ticks.resolution_pct, ticks.fallback) == (0.5, None)


@pytest.mark.parametrize(("ns_lines", "why"), [
    (["", "", ""], "no /proc/PID/task/*/schedstat"),  # no N lines: busybox DUT, no schedstat
    (["N\n", "N\n", "N\n"], "no /proc/PID/task/*/schedstat"),  # the sampler found none
    (["N 4242:0\n", "N 4242:0\n", "N 4242:0\n"], "sched_info is off"),  # reads "0 0 0"
    (["N 4242:1000000000\n", "", "N 4242:1070000000\n"], "lacks"),
    (["N 4242:1000000000 4243:7\n", "N 4242:1030000000\n", "N 4242:1070000000\n"], "exited"),
    (["N 4242:1000000000\n", "N 4242:1000000000\n", "N 4242:1000000000\n"], "fell short"),
])
def test_the_parser_falls_back_to_ticks(ns_lines: list[str], why: str) -> None:
    text = "".join(s + n for s, n in zip([_s(100.0, 300), _s(101.0, 303), _s(102.0, 307)],
                                         ns_lines, strict=True))
    cpu = sampler.parse(text).cpu(CLK)
    assert cpu.clock == "ticks" and cpu.fallback is not None and why in cpu.fallback, cpu
    assert cpu.mean == pytest.approx(3.5) and cpu.resolution_pct == 0.5


def test_an_output_cut_short_leaves_out_its_last_line() -> None:
    text = _s(100.0, 300) + "N 4242:1000000000\n" + _s(102.0, 307) + "N 4242:1070000000\n"
    cut = text + _s(103.0, 399)[:40]
    assert sampler.parse(cut) == sampler.parse(text)
    assert sampler.parse(text[:-4]).samples[-1].run_ns is None  # "N 4242:10700" is not a figure


def test_the_profile_knob_forces_ticks() -> None:
    assert TargetSection(process="stad").cpu_clock == "auto"
    assert TargetSection(process="stad", cpu_clock="ticks").cpu_clock == "ticks"
    with pytest.raises(ValueError, match="cpu_clock"):
        TargetSection(process="stad", cpu_clock="ns")  # type: ignore[arg-type]


OLD_WINDOW = {
    "rep": 0, "started_at": "2026-11-20T00:00:00Z", "duration_s": 4.02, "cpu_pct": 7.0,
    "cpu_series": [7.0, 6.0, 8.0, 7.0], "rss_kb": 1, "io_read_bytes": 0, "io_write_bytes": 0,
    "counters": {}, "datamodel_start": None, "datamodel_end": None, "restarted": False,
    "perf_data": None, "perf_bytes": None, "kernel": None,
    "conditions": {"build_id": None, "fingerprint_verified": False, "governors": [], "boost": "",
                   "clk_tck": 100, "vaps_enabled": [], "channels": {}, "stations": 0,
                   "host": "h", "target": "stad", "perf": None, "labwarden": "old"}}
"""A window as stored before the finer clock: no cpu_clock, no resolution_pct."""


def test_an_old_record_reads_as_ticks(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    path = store.root / "prof" / "prof-000000000001.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "prof-000000000001", "stations": 0, "window_s": 4,
                                "build_id": None, "target_pid": 1, "windows": [OLD_WINDOW]}))
    rec = store.load("prof", "prof-000000000001", MeasurementRecord)
    w = rec.windows[0]
    assert (w.cpu_clock, w.resolution_pct) == ("ticks", None)
    row = WindowRow(stage="s", stations=0, rep=0, cpu_pct=w.cpu_pct, build_id=None,
                    verified=False, governors="", boost="", clk_tck=100, host="h",
                    cpu_clock=w.cpu_clock, resolution_pct=w.resolution_pct)
    assert row.cpu_step == "ticks"
    assert row.model_copy(update={"resolution_pct": 0.25}).cpu_step == \
        "ticks, one tick 0.25 = 3.6% of it"
    assert row.model_copy(update={"cpu_clock": "schedstat_ns", "resolution_pct": 0.0175}) \
        .cpu_step == "schedstat ns, step 0.018 = 0.25% of it"


def test_a_sampler_line_without_the_wait_still_parses() -> None:
    """Sampler text of the first ns format ("tid:ns", no wait): run time read, wait None."""
    text = ("S 100.00 1000 0 0 R 1 1 1 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 500 0 0\nN 7:100000000\n"
            "S 101.00 1000 0 0 R 1 1 1 0 -1 0 0 0 0 0 20 5 0 0 20 0 1 0 500 0 0\nN 7:200000000\n")
    got = sampler.parse(text)
    assert got.samples[0].run_ns == {7: 100_000_000} and got.wait_pct() is None
    both = text.replace("N 7:100000000", "N 7:100000000:5000000").replace(
        "N 7:200000000", "N 7:200000000:255000000")
    assert sampler.parse(both).wait_pct() == pytest.approx(25.0)
