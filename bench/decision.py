"""Error rates of the decision rule (the lab profile's [decision]) on any lab: one image recorded
for a long run at the densest point; >= 200 A/A comparisons drawn from it by resampling windows
(the adaptive schedule, without replacement); the same with B scaled by a 5% and a 10% effect
(windows needed to decide); and live A/A comparisons -- HEAD against HEAD plus a comment, so two
images with the same code, flashed alternately as the experiment tool does.

    .venv/bin/python bench/decision.py [--windows 60] [--draws 2000] [--live 10]
        [--lab-kind vlab|qlab [--clock CLOCK] | --lab PROFILE]

--lab-kind brings a vlab or a qlab up for the run (and down after; the qlab's flash budget is
lifted for this run only: the live part flashes twice per comparison); --lab calibrates the rule
on a lab of your own, through its profile as it stands (nothing is brought up or down, its
budgets hold).

Targets: false "improved" <= 1% (the rule bounds it by alpha/2); every live A/A decided "same"
or left "unknown", never "improved".
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.core.decision import DecisionRule, Judgement, judge, next_windows
from labwarden.core.measurements import MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.qlab import control as qlab_control
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


def adaptive(pool: list[float], rule: DecisionRule, rng: random.Random, effect: float) -> Judgement:
    """One comparison as the experiment runs it, on windows drawn from one recording: A and B
    take disjoint windows; B's are scaled by (1 - effect)."""
    draw = rng.sample(pool, 2 * rule.max_windows)
    a, b = draw[:rule.max_windows], [x * (1 - effect) for x in draw[rule.max_windows:]]
    n = rule.min_windows
    while True:
        j = judge(a[:n], b[:n], rule)
        if j.decided:
            return j
        n = next_windows(n, rule)


async def record(profile: LabProfile, windows: int) -> tuple[list[float], LabProfile]:
    """The long recording: one image, the densest point, the rule's window length."""
    dec = profile.decision
    async with open_lab(profile, client="bench") as ctx:
        verify = {"build_id": profile.build.baseline}
        for name, args in (("fingerprint_verify", verify), ("env_pin", {})):
            rec = await call_tool(ctx, name, args)
            assert rec.ok, (name, rec.error)
        values: list[float] = []
        while len(values) < windows:  # the measure tool takes 10 windows a call
            reps = min(10, windows - len(values))
            rec = await call_tool(ctx, "measure", {"stations": load_drivers.points(profile)[-1],
                                                   "window_s": dec.window_s, "reps": reps,
                                                   "perf": False, "settle_s": dec.settle_s})
            assert rec.ok and rec.result, rec.error
            values += RecordStore(ctx.data_dir).load("prof", rec.result["profile_id"],
                                                     MeasurementRecord).cpu_values()
        return values, profile


async def live(profile: LabProfile, n: int) -> tuple[list[Judgement], list[int], float]:
    dec = profile.decision
    looks: list[Judgement] = []
    flashes: list[int] = []
    t0 = time.monotonic()
    async with open_lab(profile, client="bench") as ctx:
        diff = no_op_diff(profile)
        sub = await call_tool(ctx, "patch_submit", {"name": "aa-comment", "diff": diff})
        assert sub.ok and sub.result, sub.error
        a, b = profile.build.baseline, sub.result["build_id"]
        assert a
        for i in range(n):
            scr = await abtest.AB(ctx, a, b, stations=load_drivers.points(profile)[-1], rule=dec,
                                  window_s=dec.window_s, interleave=dec.interleave).run()
            looks.append(scr.final)
            flashes.append(scr.flashes)
            print(f"  live A/A {i + 1}/{n}: {scr.final.describe()}", flush=True)
    return looks, flashes, time.monotonic() - t0


def _rates(js: list[Judgement]) -> Counter[str]:
    return Counter(j.verdict for j in js)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=60, help="windows of the long recording")
    ap.add_argument("--draws", type=int, default=2000, help="resampled comparisons per case (>= 200)")
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
    if not profile.build.baseline:
        sys.exit("[build] baseline: not set -- `labwarden call build --lab LAB`, then `flash` and "
                 "`fingerprint_verify` with its build_id, and set `baseline` to that build_id")
    t0 = time.monotonic()
    pool, profile = asyncio.run(record(profile, args.windows))
    # the resampled part is printed before the live one starts: a long live part that is cut
    # short must not take the recording's figures with it
    resampled(console, pool, profile, args.draws, args.seed, time.monotonic() - t0)
    if args.live:
        lives, flashes, live_s = asyncio.run(live(profile, args.live))
        report_live(console, lives, flashes, live_s)


def resampled(console: Console, pool: list[float], profile: LabProfile, draws: int, seed: int,
              rec_s: float) -> None:
    dec = profile.decision
    rule = DecisionRule.model_validate(dec.model_dump(include=set(DecisionRule.model_fields)))
    assert 2 * rule.max_windows <= len(pool), "record more windows than two arms at the cap"
    rng = random.Random(seed)
    mean, sd = statistics.fmean(pool), statistics.stdev(pool)
    console.print(f"recording: {len(pool)} windows of {dec.window_s:g} s at "
                  f"{load_drivers.points(profile)[-1]} clients "
                  f"in {rec_s:.0f} s: mean {mean:.2f}%, stdev {sd:.2f} pp ({100 * sd / mean:.1f}%), "
                  f"min {min(pool):.2f}, max {max(pool):.2f}")
    console.print(f"windows: {' '.join(f'{v:.1f}' for v in pool)}")
    console.print(f"rule: alpha {rule.alpha:g} and beta {rule.beta:g} over looks at {rule.looks()} "
                  f"windows per arm ({rule.alpha_per_look():.4g} and {rule.beta_per_look():.4g} "
                  f"each), band +-{rule.min_effect_pct:g}%")
    t = Table(title=f"decision rule, {draws} resampled comparisons per case")
    for col in ("case", "improved", "same", "unknown", "regressed", "windows/arm median", "p90", "mean"):
        t.add_column(col, justify="right")
    results = {}
    for label, effect in (("A/A (resampled)", 0.0), ("B 5% lower", 0.05), ("B 10% lower", 0.10)):
        js = [adaptive(pool, rule, rng, effect) for _ in range(draws)]
        results[label] = js
        c, n = _rates(js), len(js)
        ws = sorted(j.n_b for j in js)
        t.add_row(label,
                  *(f"{100 * c[v] / n:.2f}%" for v in ("improved", "same", "unknown", "regressed")),
                  str(statistics.median(ws)), str(ws[int(0.9 * (n - 1))]), f"{statistics.fmean(ws):.1f}")
    console.print(t)
    aa = results["A/A (resampled)"]
    false_improved = sum(j.verdict == "improved" for j in aa) / len(aa)
    console.print(f"false 'improved' on A/A: {100 * false_improved:.2f}% of {len(aa)} (target <= 1%; "
                  f"bound alpha/2 = {100 * rule.alpha / 2:g}%)")
    # side by side, on the same recording: the first version's rule (one budget for both answers,
    # 11 windows at most) against the profile's -- how many A/A stay undecided, and at what cost
    first = rule.model_copy(update={"beta": rule.alpha / 2, "max_windows": min(rule.max_windows, 11)})
    for name, r in (("profile's rule", rule), ("first version's rule (one budget, cap 11)", first)):
        rng_v = random.Random(seed + 1)
        js = [adaptive(pool, r, rng_v, 0.0) for _ in range(draws)]
        console.print(f"A/A with the {name}: unknown {100 * _rates(js)['unknown'] / len(js):.2f}%, "
                      f"mean {statistics.fmean(j.n_b for j in js):.1f} windows per arm")
    edge = results["B 5% lower"]
    if rule.min_effect_pct == 5.0:  # the effect at the band's edge: a false "same" is bounded by beta
        false_same = sum(j.verdict == "same" for j in edge) / len(edge)
        console.print(f"false 'same' on a 5% effect (the band's edge): {100 * false_same:.2f}% of "
                      f"{len(edge)} (bound beta = {100 * rule.beta:g}%)")
    for label in ("B 5% lower", "B 10% lower"):
        js = [j for j in results[label] if j.verdict == "improved"]
        ws = sorted(j.n_b for j in js)
        if ws:
            console.print(f"{label}: decided 'improved' in {100 * len(js) / len(results[label]):.1f}% "
                          f"of draws, after a median of {statistics.median(ws)} windows per arm "
                          f"({statistics.median(ws) * dec.window_s:g} s of window per arm)")
        else:
            console.print(f"{label}: never decided 'improved' within {rule.max_windows} windows per arm")


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
