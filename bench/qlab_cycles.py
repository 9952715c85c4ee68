"""The qlab holds its clients through flashes and heals: N cycles of flash (the other build: a
real reboot, whose drift turns the three scaling VAPs off and unpins the channels) ->
fingerprint_verify -> `associate 114` (which heals the topology, then holds) -> 114 stations
split evenly, checked on both sides without lw-sta: the DUT side (the firmware's datamodel, and
each AP's `iw dev ... station dump` in the guest kernel) and the client side (each station's
`wpa_cli status`: COMPLETED, on which AP's BSSID). Every step goes through the tool runner, as
an agent's calls do. Target: every cycle even on both sides, each station on its round-robin VAP.

The flash budget of the profile (6 flashes per hour on a real lab) is lifted for this run only.

    .venv/bin/python bench/qlab_cycles.py [--cycles 10] [--stations 114] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from labwarden.lab.config import LabProfile
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.qlab import control, guestssh
from labwarden.qlab.layout import QlabLayout
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab

# each AP's BSSID and stations, and every station's wpa_supplicant state -- straight from the
# kernel and wpa_cli, not through lw-sta
SIDES = r"""
for k in 0 1 2 3 4 5; do
  echo "ap vap$k $(cat /sys/class/net/wlan$k/address) $(iw dev wlan$k station dump | grep -c '^Station')"
  iw dev wlan$k station dump | awk -v v=vap$k '$1 == "Station" {print "apsta", v, $2}'
done
for i in $(seq 1 "$1"); do echo "interface sta$i"; echo status; done \
  | ip netns exec clients wpa_cli -p /run/lw-sta/ctrl 2>/dev/null \
  | awk '/^Connected to interface/ {gsub(/[\047.]/, "", $4); s = $4}
         /^wpa_state=|^bssid=|^address=/ {split($0, kv, "="); print "sta", s, kv[1], kv[2]}'
"""


def mac(i: int) -> str:
    return "02:5a:" + ":".join(f"{b:02x}" for b in i.to_bytes(4, "big"))


def sides(ep: SshEndpoint, n: int) -> dict[str, Any]:
    """per_radio as the APs list their stations and as the stations report their AP; and the
    problems: a station not COMPLETED, on the wrong VAP, or listed by the wrong AP."""
    res = guestssh.run_sync(ep, ["sh", "-c", SIDES, "sides", str(n)], timeout=300)
    if not res.ok:
        raise RuntimeError(f"the side check failed: {res.stderr[-400:]}")
    bssid: dict[str, str] = {}
    ap_list: dict[str, set[str]] = {}
    sta: dict[str, dict[str, str]] = {}
    for line in res.stdout.splitlines():
        f = line.split()
        if f[0] == "ap":
            bssid[f[2]] = f[1]
            ap_list[f[1]] = set()
        elif f[0] == "apsta":
            ap_list[f[1]].add(f[2])
        elif f[0] == "sta" and len(f) == 4:
            sta.setdefault(f[1], {})[f[2]] = f[3]
    vaps = sorted(ap_list)
    client = Counter(bssid.get(s.get("bssid", ""), "?") for s in sta.values()
                     if s.get("wpa_state") == "COMPLETED")
    problems = []
    for i in range(1, n + 1):
        want = vaps[(i - 1) % len(vaps)]
        s = sta.get(f"sta{i}", {})
        if s.get("wpa_state") != "COMPLETED" or bssid.get(s.get("bssid", "")) != want:
            problems.append(f"sta{i}: {s.get('wpa_state', 'none')} on {bssid.get(s.get('bssid', ''), '?')}")
        if mac(i) not in ap_list[want]:
            problems.append(f"{want} does not list sta{i}")
    extra = sum(len(v) for v in ap_list.values()) - n
    if extra:
        problems.append(f"the APs list {extra} station(s) more than held")
    return {"ap": [len(ap_list[v]) for v in vaps], "client": [client.get(v, 0) for v in vaps],
            "problems": problems}


async def tool(prof: LabProfile, name: str, args: dict[str, Any]) -> dict[str, Any]:
    async with open_lab(prof) as ctx:
        rec = await call_tool(ctx, name, args)
    if not rec.ok or rec.result is None:
        raise RuntimeError(f"{name} {args}: {rec.error}")
    return rec.result


def split(per_radio: list[int]) -> str:
    return "/".join(map(str, per_radio))


def datamodel(ep: SshEndpoint) -> list[int]:
    res = guestssh.run_sync(ep, ["stacli", "--socket", "/run/stad.sock", "count"], timeout=30)
    counts = dict(re.findall(r"(vap\d)=(\d+)", res.stdout))
    return [int(counts[k]) for k in sorted(counts)]


def enabled_vaps(ep: SshEndpoint) -> int:
    res = guestssh.run_sync(ep, ["wifi", "status"], timeout=30)
    return len(re.findall(r" ENABLED ", res.stdout))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--stations", type=int, default=114)
    ap.add_argument("--dir", type=Path, default=None, help="qlab state dir (default: a temp dir)")
    args = ap.parse_args()
    console = Console(width=180)
    root = args.dir or Path(tempfile.mkdtemp(prefix="qlab-cycles-"))
    rows: list[list[str]] = []
    ok_cycles = 0
    try:
        control.up(root, progress=lambda m: console.print(f"[dim]{m}[/dim]"))
        layout = QlabLayout.at(root)
        ep = control.endpoint(layout)
        prof = LabProfile.from_file(layout.lab_toml)
        prof.policy.budgets.flashes_per_hour = None  # this run only: 10 reboots in a few minutes
        assert prof.build.baseline is not None
        builds = {prof.build.baseline: "baseline",
                  asyncio.run(tool(prof, "build", {"patches": ["0901"]}))["build_id"]: "0901"}
        running = prof.build.baseline
        asyncio.run(tool(prof, "fingerprint_verify", {"build_id": running}))
        for cycle in range(1, args.cycles + 1):
            running = next(b for b in builds if b != running)  # always the build that does not run
            t0 = time.monotonic()
            asyncio.run(tool(prof, "flash", {"build_id": running}))
            flash_s = time.monotonic() - t0
            assert asyncio.run(tool(prof, "fingerprint_verify", {"build_id": running}))["verified"]
            drifted = enabled_vaps(ep)
            t1 = time.monotonic()
            held = asyncio.run(tool(prof, "associate", {"stations": args.stations}))
            hold_s = time.monotonic() - t1
            seen = sides(ep, args.stations)
            dm = datamodel(ep)
            even = (held["even_split"] and max(seen["client"]) - min(seen["client"]) <= 1
                    and held["per_radio"] == seen["ap"] == seen["client"] == dm
                    and held["datamodel_count"] == args.stations and not seen["problems"])
            ok_cycles += even
            vaps_on = sum(c.endswith(".disabled 1 -> 0") for c in held["healed"])
            pinned = sum(".channel " in c for c in held["healed"])
            rows.append([str(cycle), builds[running], f"{flash_s:.0f}", f"{drifted}/6",
                         f"{vaps_on} VAPs on, {pinned} channels pinned",
                         f"{hold_s:.0f}", split(held["per_radio"]), split(seen["ap"]), split(seen["client"]),
                         "[green]yes[/green]" if even
                         else "[red]no[/red] " + "; ".join(seen["problems"][:3])])
            console.print(" | ".join(rows[-1]))
    finally:
        control.down(root)
    table = Table("cycle", "flashed", "flash s", "VAPs up after boot", "healed by associate",
                  f"hold {args.stations} s",
                  "DUT datamodel per_radio", "APs' station dump", "clients (wpa_cli, by BSSID)",
                  "even, both sides", title=f"qlab: flash -> heal -> associate {args.stations}, "
                  f"{args.cycles} cycles")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"{ok_cycles}/{args.cycles} cycles even and verified on both sides "
                  f"(target: all)")
    return 0 if ok_cycles == args.cycles else 1


if __name__ == "__main__":
    raise SystemExit(main())
