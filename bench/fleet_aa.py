"""A/A across a fleet's places run concurrently: does one place's load move another's
measurement? Brings up `vlab up --places 2` (each DUT pinned to its own CPU, a real labgrid
coordinator and exporter), then on both places at once screens the baseline against itself
with the lab's pre-registered [decision] rule (the experiment's screening: adaptive windows at
the densest point), again and again until the time is up. A false "improved" (or "regressed")
is a screening the rule decided on an A/A.

    .venv/bin/python bench/fleet_aa.py --minutes 10

Target: false "improved" <= 1% (the rule's own alpha, 0.02 two-sided over its looks, is the
floor a lab without cross-talk reaches; cross-talk between places would raise it).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.host.builds import compiled, recipe
from labwarden.runtime.fleet import open_fleet
from labwarden.runtime.session import LabSession
from labwarden.tools import abtest
from labwarden.vlab import fleet


async def screen_until(ctx: LabSession, deadline: float, out: list[tuple[str, str, float]]) -> None:
    """A/A screenings of the baseline on `ctx`'s place until `deadline` (monotonic)."""
    manifest, _ = await compiled(recipe(ctx.profile), [], "HEAD")
    dec = ctx.profile.decision
    stations = load_drivers.points(ctx.profile)[-1]
    while time.monotonic() < deadline:
        scr = await abtest.AB(ctx, manifest.build_id, manifest.build_id, stations=stations, rule=dec,
                              window_s=dec.window_s, interleave=dec.interleave).run()
        out.append((ctx.place_name or "?", scr.final.verdict, scr.final.delta_pct))


async def run(lab: Path, minutes: float) -> list[tuple[str, str, float]]:
    results: list[tuple[str, str, float]] = []
    async with open_fleet(LabProfile.from_file(lab), client="bench") as (_home, pool):
        places = await pool.good_places()
        async with pool.session(prefer=places[0]) as a, pool.session(exclude={a.place_name or ""}) as b:
            deadline = time.monotonic() + minutes * 60
            await asyncio.gather(screen_until(a, deadline, results), screen_until(b, deadline, results))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-fleet-aa-")) / "fleet"
    try:
        info = fleet.up(root, 2, progress=lambda m: print(m, flush=True))
        results = asyncio.run(run(Path(info.lab_toml), args.minutes))
    finally:
        fleet.down(root)
    console = Console(width=120)
    t = Table(title=f"A/A screenings on 2 places at once ({args.minutes:g} min)")
    for col in ("place", "screenings", "same", "unknown", "improved (false)", "regressed (false)"):
        t.add_column(col, justify="right")
    for place in sorted({p for p, _, _ in results}):
        c = Counter(v for p, v, _ in results if p == place)
        t.add_row(place, str(sum(c.values())), str(c["same"]), str(c["unknown"]), str(c["improved"]),
                  str(c["regressed"]))
    console.print(t)
    n = len(results)
    improved = sum(1 for _, v, _ in results if v == "improved")
    console.print(f"false improved: {improved}/{n} = {100 * improved / max(n, 1):.1f}% (target <= 1%; "
                  f"with {n} screenings one false call is {100 / max(n, 1):.1f}%)")


if __name__ == "__main__":
    main()
