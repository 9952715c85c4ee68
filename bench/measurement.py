"""Measurement quality on the vlab: stdev of CPU% across reps at each density (the noise an A/B
must beat), and perf.data bytes per second of window with -z.

    .venv/bin/python bench/measurement.py [--window 5] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.core.measurements import MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import control


async def measure(lab: Path, window: float, reps: int) -> tuple[list[dict], list[MeasurementRecord]]:  # type: ignore[type-arg]
    profile = LabProfile.from_file(lab)
    async with open_lab(profile, client="bench") as ctx:
        assert (await call_tool(ctx, "fingerprint_verify", {"build_id": profile.build.baseline})).ok
        rec = await call_tool(ctx, "sweep", {"densities": [18, 60, 114], "reps": reps, "window_s": window})
        assert rec.ok and rec.result, rec.error
        prof = await call_tool(ctx, "measure", {"stations": 114, "window_s": window, "reps": 2})
        assert prof.ok and prof.result, prof.error
        store = RecordStore(ctx.data_dir)
        return rec.result["points"], [store.load("prof", prof.result["profile_id"], MeasurementRecord)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-meas-")) / "vlab"
    try:
        control.up(root)
        points, profs = asyncio.run(measure(root / "lab.toml", args.window, args.reps))
    finally:
        control.down(root)
    console = Console(width=120)
    t = Table(title=f"baseline stad CPU % over {args.reps} reps x {args.window:g} s")
    for col in ("clients", "mean", "stdev", "stdev / mean", "per rep"):
        t.add_column(col, justify="right")
    for p in points:
        reps = " ".join(f"{x:.1f}" for x in p["cpu_per_rep"])
        t.add_row(str(p["stations"]), f"{p['cpu_mean']:.2f}", f"{p['cpu_stdev']:.2f}",
                  f"{100 * p['cpu_stdev'] / p['cpu_mean']:.1f}%", reps)
    console.print(t)
    w = [x for p in profs for x in p.windows if x.perf_bytes]
    rate = sum(x.perf_bytes or 0 for x in w) / sum(x.duration_s for x in w)
    console.print(f"perf.data with -z at 114 clients: {rate / 1024:.0f} KiB per second of window "
                  f"({len(w)} windows; a 60 s window is ~{rate * 60 / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
