"""The sampler's run-queue wait (schedstat's second field, summed over the target's threads)
against a real starved process. Measured, not light (tests/conftest.py LIGHT_MODULES): the wait
of a process alone on its CPU is a share the host's load moves -- beside make test's light
streams a worker "alone" waited 14-16% -- so this runs in the foreground of phase 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from labwarden.lab.dut import sampler


def test_the_targets_wait_for_a_cpu_shows_a_hog_beside_it() -> None:
    """The sampler reads each thread's run-queue wait too (schedstat's second field): a worker
    pinned to one CPU with three busy loops pinned beside it waits for that CPU a large part of
    the window; alone on its CPU it waits far less. Relative: both read in this run. Beside the
    suite's light streams one hog read 14 -> 23.5% and three 16.5 -> 24.4% (a waking worker waits
    about one slice, however many hogs); on a quiet box three read 0.9 -> 31.7%."""
    if not shutil.which("taskset"):
        pytest.fail("taskset (util-linux) is missing")
    cpu = str(max(os.sched_getaffinity(0)))
    worker = subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c",
                               "import time\nwhile True:\n t = time.perf_counter()\n"
                               " while time.perf_counter() - t < 0.003: pass\n time.sleep(0.007)"])
    try:
        def wait() -> float:
            got = sampler.parse(subprocess.run(sampler.argv(worker.pid, 4), capture_output=True,
                                               text=True, check=True).stdout)
            w = got.wait_pct()
            assert w is not None, got.samples[:1]
            return w

        alone = wait()
        hogs = [subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"])
                for _ in range(3)]
        try:
            beside = wait()
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    finally:
        worker.kill()
        worker.wait()
    assert beside > alone + 10, (alone, beside)
