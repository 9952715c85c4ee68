"""Kernel attribution vs the size of an nftables rule set, on real packets through this kernel.

For each rule count: two host namespaces joined by a veth pair, N non-matching rules on the
receiver's input hook (tests/netns_traffic.py), iperf3 UDP at -b 0 with 100-byte payloads for
the whole window; the vlab's `measure` (system_wide, one window) and `symbolize`. Plus one idle
window (no traffic) first. Each row: packets/s received (iperf3's own JSON), loss, the kernel
split (all cores' softirq %, the busiest core's softirq+system %), NET_RX/s, nft_do_chain's
share of all samples, the symfs (DSOs fetched of those mapped) and symbolize's wall time.

The vlab's DUT is this host, so other load on the host shows in the split: run it on a quiet box.

    .venv/bin/python bench/kernel_attribution.py [--rules 0,200,1000] [--window 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout
from tests.netns_traffic import netns_pair

_DSOS = re.compile(r"symbols for the (\d+) DSOs the samples touch \(of (\d+) mapped\)")


async def _call(layout: VlabLayout, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], float]:
    async with open_lab(LabProfile.from_file(layout.lab_toml)) as ctx:
        rec = await call_tool(ctx, name, args)
    assert rec.ok and rec.result is not None, rec.error
    return rec.result, rec.duration_s


async def bench(layout: VlabLayout, rules: list[int], window: float, console: Console) -> None:
    await _call(layout, "fingerprint_verify", {"build_id": LabProfile.from_file(
        layout.lab_toml).build.baseline})
    base = {"stations": 0, "window_s": window, "reps": 1, "uprobes": False, "settle_s": 0}
    table = Table(title=f"kernel attribution: UDP 100 B, -b 0, {window:g} s system-wide window")
    for col in ("rules", "rx pps", "loss %", "softirq % (all)", "busiest sirq+sys %",
                "NET_RX/s", "nft_do_chain %", "top threads", "symfs DSOs", "symbolize s"):
        table.add_column(col, justify="left" if col == "top threads" else "right")
    idle, _ = await _call(layout, "measure", {**base, "system_wide": True})
    k = idle["kernel"]
    table.add_row("idle", "-", "-", f"{k['softirq_pct']:.1f}", f"{k['busiest_softirq_system_pct']:.1f}",
                  f"{k['net_rx_per_s']:.0f}", "-", "-", "-", "-")
    for n in rules:
        console.print(f"{n} rules ...")
        with netns_pair(n) as pair, pair.udp_load(window + 2, wait=True) as load:
            prof, _ = await _call(layout, "measure", {**base, "system_wide": True})
        sym, took = await _call(layout, "symbolize", {"profile_id": prof["profile_id"],
                                                      "functions": ["nft_do_chain"]})
        s, k = load.summary or {}, prof["kernel"]
        rx = (s.get("packets", 0) - s.get("lost_packets", 0)) / max(s.get("seconds", 1), 1e-9)
        dsos = next((m for w in sym["warnings"] if (m := _DSOS.search(w))), None)
        threads = ", ".join(f"{t['thread']} {t['pct']:.0f}%" for t in sym["threads"][:3])
        table.add_row(str(n), f"{rx:,.0f}", f"{s.get('lost_percent', 0):.1f}",
                      f"{k['softirq_pct']:.1f}", f"{k['busiest_softirq_system_pct']:.1f}",
                      f"{k['net_rx_per_s']:.0f}", f"{sym['functions'][0]['total_pct']:.1f}",
                      threads, f"{dsos[1]} of {dsos[2]}" if dsos else "-",
                      f"{took:.2f}")
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rules", default="0,200,1000")
    ap.add_argument("--window", type=float, default=5)
    ap.add_argument("--dir", help="vlab state dir (default: a temp dir, removed after)")
    args = ap.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kattr-vlab-"))
    try:
        control.up(root)
        asyncio.run(bench(VlabLayout.at(root), [int(x) for x in args.rules.split(",")],
                          args.window, Console(width=200)))
    finally:
        control.down(root)
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
