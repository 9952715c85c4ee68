"""stad CPU% at 18/60/114 stations for each firmware stage, measured side by side in one run.

CPU% = (utime+stime) ticks over CLK_TCK from /proc, per window; 3 reps per point by default.
Every variant is flashed on the same vlab and re-pinned (topology, governor) after the flash's
reboot, so only the firmware (and its config lever) differs. Ratios are against baseline at the
same density: the machine is noisy, absolute numbers are not the claim, the shape is.

    .venv/bin/python bench/vlab_curve.py [--window 5] [--reps 3] [--dir /tmp/vlab-bench]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from labwarden.vlab import control, curve, procs, tuning
from labwarden.vlab.layout import VlabLayout


class Variant(BaseModel):
    name: str
    patches: list[str] = []
    stamon_rpc: str = "full"
    trace_level: int | None = None
    stop_stamon: bool = False


VARIANTS = [
    Variant(name="baseline"),
    Variant(name="+0901", patches=["0901"]),
    Variant(name="+0901+0902 (brief)", patches=["0901", "0902"], stamon_rpc="brief"),
    Variant(name="+0905", patches=["0905"]),
    Variant(name="+0100 (zones 400)", patches=["0100"]),
    Variant(name="+0100 (zones 200)", patches=["0100"], trace_level=200),
    Variant(name="stamon stopped", stop_stamon=True),
]


@contextlib.contextmanager
def stamon_stopped(layout: VlabLayout, stop: bool) -> Iterator[None]:
    pid = procs.read_pid(layout.run_dir / "stamon.pid")
    if stop and pid:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if stop and pid:
            os.kill(pid, signal.SIGCONT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--densities", default="18,60,114")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    args = ap.parse_args()
    dens = [int(d) for d in args.densities.split(",")]
    root = args.dir or tempfile.mkdtemp(prefix="vlab-bench-")
    console = Console(width=150)
    variants = [v for v in VARIANTS if not args.only or v.name in args.only.split(",")]
    results: dict[str, list[curve.CurvePoint]] = {}
    try:
        control.up(root)
        layout = VlabLayout.at(root)
        for v in variants:
            console.print(f"[bold]{v.name}[/bold]: flashing {v.patches or 'baseline'}")
            control.flash(root, v.patches)
            tuning.pin(layout, stamon_rpc=v.stamon_rpc, trace_level=v.trace_level or 400)
            control.restart_services(root)
            with stamon_stopped(layout, v.stop_stamon), console.status(v.name) as status:
                results[v.name] = curve.measure_curve(
                    root, dens, reps=args.reps, window_s=args.window,
                    progress=lambda m, name=v.name, st=status: st.update(f"{name}: {m}"))
    finally:
        control.down(root)

    table = Table(title=f"stad CPU % of one core ({args.reps} reps x {args.window:g} s, "
                  f"{os.cpu_count()} cores)")
    table.add_column("variant")
    for d in dens:
        table.add_column(f"{d} st: mean ± stdev", justify="right")
        table.add_column(f"{d} st: / base", justify="right")
    base = {p.stations: p.cpu_mean for p in results.get("baseline", [])}
    for name, points in results.items():
        row = [name]
        for p in points:
            row.append(f"{p.cpu_mean:.1f} ± {p.cpu_stdev:.2f}")
            row.append(f"{p.cpu_mean / base[p.stations]:.2f}" if base.get(p.stations) else "-")
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
