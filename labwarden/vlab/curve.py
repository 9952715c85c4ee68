"""The load curve: stad CPU% at each station density, measured from /proc on the vlab host.

This is the vlab's own quick measurement (demo, bench); the guarded `sweep` tool of the lab
layer measures a DUT over SSH with its environment snapshots.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from labwarden.lab import procfs
from labwarden.vlab import control, procs
from labwarden.vlab.layout import VlabLayout


class CurvePoint(BaseModel):
    stations: int
    cpu_mean: float = Field(description="stad CPU, % of one core")
    cpu_stdev: float
    samples: list[float]


def measure_curve(root: str, densities: list[int], reps: int = 3, window_s: float = 5.0,
                  settle_s: float = 2.0,
                  progress: Callable[[str], None] = lambda _m: None) -> list[CurvePoint]:
    layout = VlabLayout.at(root)
    points = []
    for n in densities:
        progress(f"associating {n} stations")
        control.associate(root, n)
        time.sleep(settle_s)  # first syncs after association are not steady state
        pid = procs.read_pid(layout.run_dir / "stad.pid")
        assert pid is not None
        samples = []
        for rep in range(reps):
            progress(f"{n} stations: window {rep + 1}/{reps} ({window_s:g} s)")
            samples.append(round(procfs.measure_cpu(pid, window_s), 2))
        points.append(CurvePoint(stations=n, cpu_mean=round(statistics.fmean(samples), 2),
                                 cpu_stdev=round(statistics.stdev(samples), 2) if reps > 1 else 0.0,
                                 samples=samples))
    control.associate(root, 0)
    return points
