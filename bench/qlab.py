"""The qlab from power-on to 114 real associations, with the guest image cached: `qlab up` (the
firmware build and flash disk, the boot through labgrid until dropbear answers, hostapd up on
every AP) and then `lw-sta assoc 114` (wpa_supplicant stations created, associated and verified
from both sides: wpa_cli status and each AP's station dump). Target: <= 90 s in all.

The stations are released and the qlab is brought down afterwards (not counted). The host's load
average is printed beside the figure: a TCG guest slows down with the host's other work.

    .venv/bin/python bench/qlab.py [--stations 114] [--accel auto|kvm|tcg] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.qlab import control, image, stations
from labwarden.qlab.layout import QlabLayout

TARGET_S = 90.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stations", type=int, default=114)
    ap.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto")
    ap.add_argument("--dir", type=Path, default=None, help="qlab state dir (default: a temp dir)")
    args = ap.parse_args()
    console = Console()

    t = time.monotonic()
    img = image.ensure(lambda m: console.print(f"[dim]image: {m}[/dim]"))
    image_s = time.monotonic() - t
    root = args.dir or Path(tempfile.mkdtemp(prefix="qlab-bench-"))
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        info = control.up(root, accel=args.accel, progress=lambda m: console.print(f"[dim]{m}[/dim]"))
        ep = control.endpoint(QlabLayout.at(root))
        held = stations.associate(ep, args.stations)
        total = time.monotonic() - t0
        per_vap = " ".join(f"{k}={v}" for k, v in held.per_vap.items())
        stations.release(ep)
    finally:
        control.down(root)
    load_after = os.getloadavg()[0]

    table = Table("step", "seconds", "what", title=f"qlab: power-on to {args.stations} associated "
                  f"stations ({info.accel.name}, image {img.key})")
    table.add_row("image", f"{image_s:.1f}", "cached image found (not counted in the budget below)"
                  if image_s < 5 else "built now (not counted in the budget below)")
    table.add_row("firmware", f"{info.timings['firmware']:.1f}",
                  "nl80211 build (cached per build id), flash and data disks")
    table.add_row("boot", f"{info.timings['boot']:.1f}",
                  "labgrid QlabStrategy off -> shell: QEMU started, dropbear answers")
    table.add_row("hostapd up", f"{info.timings['wifi']:.1f}", "`wifi wait`: every AP enabled")
    table.add_row("association", f"{held.seconds:.1f}",
                  f"`lw-sta assoc {args.stations}`: created, associated, verified both sides ({per_vap})")
    table.add_row("total", f"{total:.1f}", f"target <= {TARGET_S:.0f} s: "
                  + ("[green]met[/green]" if total <= TARGET_S else "[red]missed[/red]"))
    console.print(table)
    console.print(f"{info.accel.name}: {info.accel.reason}; host load average {load_before:.1f} "
                  f"before, {load_after:.1f} after (2 cores)")
    return 0 if total <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
