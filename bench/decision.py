"""Error rates of the decision rule (the lab profile's [decision]) on any lab: one image recorded
for a long run at the densest point through the `calibrate` tool (a calibration record); its
simulated comparisons in the design the lab gets (labwarden/core/calibration.py: the windows in
the order they were taken, so drift reaches them) -- A/A, and B scaled by a 5% and a 10% effect
(windows needed to decide); and live A/A comparisons -- the base against the base plus a
comment, so two images with the same code, flashed as the experiment tool does.

    .venv/bin/python bench/decision.py [--windows 60] [--draws 2000] [--live 10]
        [--lab-kind vlab|qlab [--clock CLOCK] | --lab PROFILE]

--lab-kind brings a vlab or a qlab up for the run (and down after; the qlab's flash budget is
lifted for this run only: the live part flashes twice per comparison); --lab calibrates the rule
on a lab of your own, through its profile as it stands (nothing is brought up or down, its
budgets hold). A is the profile's base -- the firmware at HEAD, built here -- running verified:
flashed and verified only when the board does not run it so already (no hand-made [build]
baseline, and no verification asked of an image the board may not run); the board is left on
it.

Targets: false "improved" <= 1% (the rule bounds it by alpha/2); every live A/A decided "same"
or left "unknown", never "improved".
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.agent.calibrated import base_build, put_on_board
from labwarden.core.calibration import CalibrationRecord, Case, Simulator
from labwarden.core.decision import Judgement
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.qlab import control as qlab_control
from labwarden.results.calibrate import CalibrateOutput
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools import abtest
from labwarden.vlab import control as vlab_control

NO_OP_LINE = "/* labwarden A/A: a comment, the same code */\n"


def no_op_diff(profile: LabProfile) -> str:
    """The live A/A's B: a comment appended to the first tracked C file of the lab's own
    `[build] repo` at HEAD -- any lab's firmware, not only the vlab's (whose wld.c the first
    version of this bench edited, so `--lab` on another firmware could not submit it)."""
    repo = Path(profile.build.repo).expanduser()
    tracked = subprocess.run(["git", "-C", str(repo), "ls-files", "--", "*.c", "*.h"],
                             capture_output=True, text=True, check=True).stdout.split()
    if not tracked:
        sys.exit(f"[build] repo {repo}: no tracked .c or .h file to put the A/A's comment in")
    path = tracked[0]
    text = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"],
                          capture_output=True, text=True, check=True).stdout
    after = text + ("" if text.endswith("\n") else "\n") + NO_OP_LINE
    return "".join(difflib.unified_diff(text.splitlines(True), after.splitlines(True),
                                        f"a/{path}", f"b/{path}"))


async def record(profile: LabProfile, windows: int, draws: int, seed: int) -> CalibrationRecord:
    """The long recording: the base, the densest point, the rule's window length -- a
    calibration (kind cal) like the one the loop requires."""
    async with open_lab(profile, client="bench") as ctx:
        await put_on_board(ctx, await base_build(ctx))
        pinned = await call_tool(ctx, "env_pin", {})
        assert pinned.ok, pinned.error
        rec = await call_tool(ctx, "calibrate", {"windows": windows, "draws": draws, "seed": seed})
        assert rec.ok and rec.result, rec.error
        out = CalibrateOutput.model_validate(rec.result)
        return RecordStore(ctx.data_dir).load("cal", out.calibration_id, CalibrationRecord)


async def live(profile: LabProfile, n: int) -> tuple[list[Judgement], list[int], float]:
    dec = profile.decision
    looks: list[Judgement] = []
    flashes: list[int] = []
    t0 = time.monotonic()
    async with open_lab(profile, client="bench") as ctx:
        a = await base_build(ctx)
        diff = no_op_diff(profile)
        sub = await call_tool(ctx, "patch_submit", {"name": "aa-comment", "diff": diff})
        assert sub.ok and sub.result, sub.error
        b = sub.result["build_id"]
        for i in range(n):
            scr = await abtest.AB(ctx, a, b, stations=load_drivers.points(profile)[-1], rule=dec,
                                  window_s=dec.window_s, interleave=dec.interleave).run()
            looks.append(scr.final)
            flashes.append(scr.flashes)
            print(f"  live A/A {i + 1}/{n}: {scr.final.describe()}", flush=True)
        _, why = await abtest.leave_on(ctx, a, "A, the base")
        print(f"  {why}", flush=True)
    return looks, flashes, time.monotonic() - t0


def _rates(js: list[Judgement]) -> Counter[str]:
    return Counter(j.verdict for j in js)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=60, help="windows of the long recording")
    ap.add_argument("--draws", type=int, default=2000, help="simulated comparisons per case at most "
                    "(100-5000; a recording holds fewer distinct ones: all of them then)")
    ap.add_argument("--live", type=int, default=10, help="live A/A comparisons")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lab-kind", choices=["vlab", "qlab"], default="vlab",
                    help="the lab brought up for the run")
    ap.add_argument("--clock", default=None, help="qlab: the guest clock (`qlab up --clock`)")
    ap.add_argument("--lab", type=Path, default=None,
                    help="a lab profile of your own instead (nothing brought up or down)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-decision-")) / args.lab_kind
    console = Console(width=130)
    if args.lab is not None:
        run(console, LabProfile.from_file(args.lab), args)
        return
    try:
        if args.lab_kind == "qlab":
            info = qlab_control.up(root, clock=args.clock)
            console.print(f"qlab: {info.accel.name}, clock {info.clock.spec}; up in "
                          f"{info.timings['total']:.0f} s")
        else:
            vlab_control.up(root)
        profile = LabProfile.from_file(root / "lab.toml")
        if args.lab_kind == "qlab":  # this run only: every live comparison flashes twice
            profile.policy.budgets.flashes_per_hour = None
        run(console, profile, args)
    finally:
        (qlab_control if args.lab_kind == "qlab" else vlab_control).down(root)


def run(console: Console, profile: LabProfile, args: argparse.Namespace) -> None:
    rec = asyncio.run(record(profile, args.windows, args.draws, args.seed))
    # the resampled part is printed before the live one starts: a long live part that is cut
    # short must not take the recording's figures with it
    resampled(console, rec, args.draws, args.seed)
    if args.live:
        lives, flashes, live_s = asyncio.run(live(profile, args.live))
        report_live(console, lives, flashes, live_s)


def resampled(console: Console, rec: CalibrationRecord, draws: int, seed: int) -> None:
    rule, cal, pool = rec.rule, rec.result, rec.values
    nz = cal.noise
    console.print(f"recording {rec.id}: {len(pool)} windows of {rec.window_s:g} s at {rec.workload} "
                  f"on {rec.build_id} in {rec.measure_s:.0f} s: mean {nz.mean:.2f}%, stdev "
                  f"{nz.sd:.2f} pp ({nz.cv_pct:.1f}%), min {min(pool):.2f}, max {max(pool):.2f}, "
                  f"lag-1 autocorrelation {nz.lag1}, drift {nz.drift_pct_per_min}%/min")
    console.print(f"windows: {' '.join(f'{v:.1f}' for v in pool)}")
    console.print(f"rule: alpha {rule.alpha:g} and beta {rule.beta:g} over looks at {rule.looks()} "
                  f"windows per arm ({rule.alpha_per_look():.4g} and {rule.beta_per_look():.4g} "
                  f"each), band +-{rule.min_effect_pct:g}%; design {rec.design} (switch "
                  f"{rec.switch_s} s, [decision] interleave = {rec.interleave})", markup=False)
    sim = Simulator(pool, rule, rec.design, draws=draws, seed=seed, drift_check=rec.drift_check)
    t = Table(title=f"decision rule, {len(sim.draws)} simulated comparisons per case "
              f"({sim.distinct} distinct in the recording)")
    for col in ("case", "improved", "same", "unknown", "regressed", "windows/arm mean", "p90",
                "lab min"):
        t.add_column(col, justify="right")
    effects = sorted({0.0, rule.min_effect_pct, 5.0, 10.0})
    cases: dict[float, Case] = {}
    for effect in effects:
        c = cases[effect] = sim.case(effect, cal.lab_time)
        t.add_row("A/A" if effect == 0 else f"B {effect:g}% lower",
                  *(f"{v:.2f}%" for v in (c.improved_pct, c.same_pct, c.unknown_pct, c.regressed_pct)),
                  f"{c.windows_per_arm:.1f}", str(c.windows_p90), f"{c.minutes:.1f}")
    console.print(t)
    aa = cases[0.0]
    console.print(f"false 'improved' on A/A: {aa.improved_pct:.2f}% of {aa.draws} (target <= 1%; "
                  f"bound alpha/2 = {100 * rule.alpha / 2:g}%)")
    # side by side, on the same recording: the first version's rule (one budget for both answers,
    # 11 windows at most) against the profile's -- how many A/A stay undecided, and at what cost
    first = rule.model_copy(update={"beta": rule.alpha / 2, "max_windows": min(rule.max_windows, 11)})
    for name, r in (("profile's rule", rule), ("first version's rule (one budget, cap 11)", first)):
        c = Simulator(pool, r, rec.design, draws=draws, seed=seed + 1,
                      drift_check=rec.drift_check).case(0.0, cal.lab_time)
        console.print(f"A/A with the {name}: unknown {c.unknown_pct:.2f}%, mean "
                      f"{c.windows_per_arm:.1f} windows per arm")
    edge = cases[rule.min_effect_pct]  # the band's edge: a false "same" is bounded by beta
    console.print(f"false 'same' on a {rule.min_effect_pct:g}% effect (the band's edge): "
                  f"{edge.same_pct:.2f}% of {edge.draws} (bound beta = {100 * rule.beta:g}%)")
    console.print(f"calibrate: {cal.summary}", markup=False)
    if cal.suggestion is not None:
        console.print("\n".join(cal.suggestion.toml), markup=False)


def report_live(console: Console, lives: list[Judgement], flashes: list[int], live_s: float) -> None:
    c, n = _rates(lives), len(lives)
    ws = sorted(j.n_b for j in lives)
    t = Table(title=f"live A/A comparisons ({n}, two images of the same code, flashed alternately)")
    for col in ("improved", "same", "unknown", "regressed", "windows/arm median", "p90", "mean"):
        t.add_column(col, justify="right")
    t.add_row(*(f"{c[v]}/{n}" for v in ("improved", "same", "unknown", "regressed")),
              str(statistics.median(ws)), str(ws[int(0.9 * (n - 1))]), f"{statistics.fmean(ws):.1f}")
    console.print(t)
    console.print(f"live A/A: {n} comparisons in {live_s:.0f} s, {statistics.fmean(flashes):.1f} flashes "
                  f"each (interleaved); false 'improved': {c['improved']}/{n}")


if __name__ == "__main__":
    main()
