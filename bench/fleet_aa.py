"""A/A across a fleet's places run concurrently: does one place's load move another's
measurement? Brings up `vlab up --places 2` (each DUT pinned to its own CPU, a real labgrid
coordinator and exporter), then on both places at once screens the baseline against itself
with the lab's pre-registered [decision] rule (the experiment's screening: adaptive windows at
the densest point), again and again until the time is up. A false "improved" (or "regressed")
is a screening the rule decided on an A/A.

A few live screenings cannot show a rate of 1%, so each place's windows (every A and B window of
its screenings: one image, measured while the other place ran its own) are also pooled and
resampled as bench/decision.py does: `--draws` A/A comparisons drawn from them without
replacement, on the adaptive schedule. Cross-talk between places would show in both.

    .venv/bin/python bench/fleet_aa.py --minutes 10 [--draws 2000]

Target: false "improved" <= 1% (the rule's own alpha, 0.02 two-sided over its looks, is the
floor a lab without cross-talk reaches; cross-talk between places would raise it).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from decision import _rates, adaptive  # bench/decision.py: the same resampling
from rich.console import Console
from rich.table import Table

from labwarden.core.decision import DecisionRule
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.host.builds import compiled, recipe
from labwarden.runtime.fleet import open_fleet
from labwarden.runtime.session import LabSession
from labwarden.tools import abtest
from labwarden.vlab import fleet

Screened = tuple[str, str, float, list[float]]
"""(place, verdict, delta %, the screening's windows: A's and B's, one image)"""


async def screen_until(ctx: LabSession, deadline: float, out: list[Screened]) -> None:
    """A/A screenings of the baseline on `ctx`'s place until `deadline` (monotonic)."""
    manifest, _ = await compiled(recipe(ctx.profile), [], "HEAD")
    dec = ctx.profile.decision
    stations = load_drivers.points(ctx.profile)[-1]
    while time.monotonic() < deadline:
        scr = await abtest.AB(ctx, manifest.build_id, manifest.build_id, stations=stations, rule=dec,
                              window_s=dec.window_s, interleave=dec.interleave).run()
        out.append((ctx.place_name or "?", scr.final.verdict, scr.final.delta_pct,
                    [*scr.a.values, *scr.b.values]))


async def run(lab: Path, minutes: float) -> tuple[list[Screened], DecisionRule]:
    profile = LabProfile.from_file(lab)
    rule = DecisionRule.model_validate(profile.decision.model_dump(include=set(DecisionRule.model_fields)))
    results: list[Screened] = []
    async with open_fleet(profile, client="bench") as (_home, pool):
        places = await pool.good_places()
        async with pool.session(prefer=places[0]) as a, pool.session(exclude={a.place_name or ""}) as b:
            deadline = time.monotonic() + minutes * 60
            await asyncio.gather(screen_until(a, deadline, results), screen_until(b, deadline, results))
    return results, rule


def resampled(console: Console, results: list[Screened], rule: DecisionRule, draws: int) -> None:
    """Each place's pooled windows, resampled into `draws` A/A comparisons."""
    t = Table(title=f"A/A resampled from each place's windows, {draws} comparisons per place")
    for col in ("place", "windows", "mean", "sd/mean", "improved (false)", "same", "unknown",
                "regressed (false)"):
        t.add_column(col, justify="right")
    rng = random.Random(1)
    for place in sorted({r[0] for r in results}):
        pool = [v for r in results if r[0] == place for v in r[3]]
        if len(pool) < 2 * rule.max_windows:
            console.print(f"{place}: {len(pool)} windows, fewer than two arms at the cap "
                          f"({2 * rule.max_windows}): run longer to resample")
            continue
        c = _rates([adaptive(pool, rule, rng, 0.0) for _ in range(draws)])
        mean = statistics.fmean(pool)
        t.add_row(place, str(len(pool)), f"{mean:.2f}", f"{100 * statistics.stdev(pool) / mean:.1f}%",
                  *(f"{100 * c[v] / draws:.2f}%" for v in ("improved", "same", "unknown", "regressed")))
    console.print(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--draws", type=int, default=2000, help="resampled A/A comparisons per place")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-fleet-aa-")) / "fleet"
    try:
        info = fleet.up(root, 2, progress=lambda m: print(m, flush=True))
        results, rule = asyncio.run(run(Path(info.lab_toml), args.minutes))
    finally:
        fleet.down(root)
    console = Console(width=120)
    t = Table(title=f"A/A screenings on 2 places at once ({args.minutes:g} min)")
    for col in ("place", "screenings", "same", "unknown", "improved (false)", "regressed (false)"):
        t.add_column(col, justify="right")
    for place in sorted({r[0] for r in results}):
        c = Counter(r[1] for r in results if r[0] == place)
        t.add_row(place, str(sum(c.values())), str(c["same"]), str(c["unknown"]), str(c["improved"]),
                  str(c["regressed"]))
    console.print(t)
    n = len(results)
    improved = sum(1 for r in results if r[1] == "improved")
    console.print(f"false improved: {improved}/{n} = {100 * improved / max(n, 1):.1f}% (target <= 1%; "
                  f"with {n} screenings one false call is {100 / max(n, 1):.1f}%)")
    resampled(console, results, rule, args.draws)


if __name__ == "__main__":
    main()
