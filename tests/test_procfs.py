"""CPU accounting from /proc: the parser and a real busy/idle process."""

import subprocess
import sys

import pytest

from labwarden.lab import procfs

STAT = ("4242 (we(ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
        "250 50 0 0 20 0 1 0 98765 1000000 321 18446744073709551615")


def test_parse_stat_splits_after_last_paren() -> None:
    st = procfs.parse_stat(STAT)
    assert (st.pid, st.comm, st.state) == (4242, "we(ird) name", "S")
    assert (st.utime, st.stime, st.starttime, st.rss_pages) == (250, 50, 98765, 321)


def test_cpu_percent_uses_clk_tck_and_refuses_pid_reuse() -> None:
    a = procfs.parse_stat(STAT)
    b = a.model_copy(update={"utime": 300, "stime": 100})
    assert procfs.cpu_percent(a, b, wall_s=2.0, ticks_per_s=100) == pytest.approx(50.0)
    reused = b.model_copy(update={"starttime": 1})
    with pytest.raises(ValueError, match="replaced"):
        procfs.cpu_percent(a, reused, 2.0, 100)


def test_real_busy_and_idle_processes() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "30"])
    try:
        assert procfs.measure_cpu(busy.pid, 1.0) > 50
        assert procfs.measure_cpu(idle.pid, 0.5) < 5
    finally:
        busy.kill()
        idle.kill()
