"""bisect: between a good and a bad ref of the firmware repo, find the first commit whose
measurement regresses -- as Pinpoint and `git bisect run` do, each step judged by the same
pre-registered decision rule (A/B at the densest workload point -- the profile's, else the
load's own, 0 on a DUT without a load -- adaptive windows).

Destructive: builds and flashes each tested commit. First it shows that bad regressed against
good (otherwise there is nothing to find); then each midpoint is compared with good --
"regressed" puts it on the bad side, "same" or "improved" on the good side -- and, when that
stays undecided, with bad. The band of "same" is half the regression chased (Pinpoint sizes its
comparison by the change it bisects), at least the rule's smallest effect.

At the end every board it used is left on good's build -- the base: a bisection keeps nothing,
and good is the one image the rule measured as not regressed (the first bad commit, or bad, would
leave the regression running); `left_flashed` says so.

On a fleet the range is split over the places free when the regression is confirmed: with k
places each round tests k commits at once (each on its own place, both arms there) and keeps
the part between the last good and the first bad -- k + 1 parts a round instead of 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from labwarden.core.decision import Judgement
from labwarden.core.errors import LabError, ToolError
from labwarden.core.experiments import Arm, Bisection, BisectStep
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.host import builder
from labwarden.lab.host.builds import compiled, recipe
from labwarden.lab.host.patchstore import check_ref
from labwarden.results.bisect import BisectOutput
from labwarden.tools import abtest
from labwarden.tools.context import LabContext

MAX_COMMITS = 256
FREE_WAIT_S = 5.0
"""How long a fleet bisection waits for each extra place (one busy elsewhere is left alone)."""


class BisectInput(ToolInput):
    good: str = Field(max_length=100, description="a ref whose measurement is good (older)",
                      examples=["v1.0"])
    bad: str = Field(max_length=100, description="a later ref that regressed", examples=["HEAD"])
    metric: str = Field("cpu", max_length=64, description="'cpu' (target CPU %) or an uprobe "
                        "counter of the profile (e.g. dm_write_txns); higher is worse",
                        examples=["cpu"])


def _git(ctx: LabContext, *args: str) -> str:
    return builder.git(Path(ctx.profile.build.repo).expanduser(), *args)


def _commits(ctx: LabContext, good: str, bad: str) -> list[tuple[str, str]]:
    """(hash, subject) from good (exclusive) to bad (inclusive), oldest first."""
    for ref in (good, bad):
        if ref.startswith("-"):
            raise ToolError("invalid_input", f"{ref!r} is not a ref", "use a branch, tag or hash")
    g = _git(ctx, "rev-parse", "--verify", f"{good}^{{commit}}")
    b = _git(ctx, "rev-parse", "--verify", f"{bad}^{{commit}}")
    repo = Path(ctx.profile.build.repo).expanduser()
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", g, b]).returncode != 0:
        raise ToolError("invalid_input", f"good ({good}) is not an ancestor of bad ({bad})",
                        "give an older good ref on the history of bad")
    out = _git(ctx, "log", "--reverse", "--ancestry-path", "--format=%H %s", f"{g}..{b}")
    rows = [(h, subject) for h, _, subject in (line.partition(" ") for line in out.splitlines() if line)]
    if not rows:
        raise ToolError("invalid_input", f"no commit between {good} and {bad}", "pick two refs apart")
    if len(rows) > MAX_COMMITS:
        raise ToolError("invalid_input", f"{len(rows)} commits between the refs (limit {MAX_COMMITS})",
                        "narrow the range")
    return rows


def _side(j: Judgement, against: str) -> Literal["good", "bad", "unknown"]:
    """Where a commit lies after one comparison with an end: against good (A=good, B=it) a
    regression makes it bad; against bad (A=it, B=bad) bad regressing from it makes it good."""
    if j.verdict == "unknown":
        return "unknown"
    regressed = j.verdict == "regressed"
    if against == "good":
        return "bad" if regressed else "good"
    return "good" if regressed else "bad"


async def _build(ctx: LabContext, commit: str) -> str:
    manifest, _ = await compiled(recipe(ctx.profile), [], commit)
    return manifest.build_id


def split(lo: int, hi: int, ways: int) -> list[int]:
    """The commits to test at once with `ways` places: evenly spaced strictly inside (lo, hi) --
    one place halves the range, k places cut it into k + 1 parts."""
    n = hi - lo - 1
    k = max(1, min(ways, n))
    if k == 1:
        return [(lo + hi) // 2]
    return sorted({lo + max(1, min(n, round((i + 1) * (hi - lo) / (k + 1)))) for i in range(k)})


def narrow(lo: int, hi: int, mids: list[int],
           sides: list[Literal["good", "bad", "unknown"]]) -> tuple[int, int, int | None]:
    """The range after one round: up to the first bad commit, from the last good one before it;
    an undecided commit inside that range stops the bisection (returned third)."""
    for m, side in zip(mids, sides, strict=True):
        if side == "bad":
            hi = m
            break
    for m, side in zip(mids, sides, strict=True):
        if m < hi and side == "good":
            lo = max(lo, m)
    unknown = next((m for m, side in zip(mids, sides, strict=True)
                    if side == "unknown" and lo < m < hi), None)
    return lo, hi, unknown


async def _more_places(ctx: LabContext, stack: contextlib.AsyncExitStack) -> list[LabContext]:
    """On a fleet: sessions on the other good places free now (held for the bisection, released
    after); a place still busy with another experiment is not waited for."""
    pool = ctx.fleet
    if pool is None:
        return []
    held = {ctx.place_name} if ctx.place_name else set()
    more: list[LabContext] = []
    for _ in await pool.good_places(held):
        try:
            other = await stack.enter_async_context(pool.session(exclude=held, timeout_s=FREE_WAIT_S))
        except (TimeoutError, LabError):
            break
        more.append(other)
        held.add(other.place_name or "")
    return more


async def run(ctx: LabContext, inp: BisectInput) -> BisectOutput:
    t0 = time.monotonic()
    dec = ctx.profile.decision
    stations = load_drivers.points(ctx.profile)[-1]
    if inp.metric != "cpu" and inp.metric not in ctx.profile.target.uprobes:
        raise ToolError("invalid_input", f"metric: {inp.metric!r} is neither 'cpu' nor a counter "
                        "of the profile", f"counters: {', '.join(ctx.profile.target.uprobes) or 'none'}")
    store = RecordStore(ctx.data_dir)
    commits = await asyncio.to_thread(_commits, ctx, inp.good, inp.bad)
    rec = Bisection(id=store.new_id("bis"), good=inp.good, bad=inp.bad, metric=inp.metric,
                    stations=stations, commits=[h for h, _ in commits], outcome="failed",
                    reason="not finished", started_at=datetime.now(UTC))
    subjects = dict(commits)

    seen: dict[tuple[int, str], Arm] = {}  # (place, build) -> its windows so far: good's kept

    async def ab(on: LabContext, a: str, b: str, margin: float | None) -> tuple[Judgement, str | None]:
        prev = seen.get((id(on), a)) if dec.reuse_a_max_age_s else None
        scr = await abtest.AB(on, a, b, stations=stations, rule=dec, window_s=dec.window_s,
                              metric=inp.metric, margin_pct=margin, interleave=dec.interleave,
                              reuse_a=prev, reuse_from="an earlier step" if prev else None).run()
        for arm in (scr.a, scr.b):
            kept = [v for i, v in enumerate(arm.values) if i not in arm.left_out]
            if len(kept) >= dec.min_windows:
                seen[(id(on), arm.build_id)] = Arm(build_id=arm.build_id, values=kept,
                                                   profile_ids=arm.profile_ids)
        return scr.final, scr.a_reuse

    ends: dict[int, tuple[str, str]] = {}
    spent: str | None = None

    async def leave(on: LabContext) -> None:
        """`on`'s board left on good's build (abtest.leave_on: the nested flash + verify)."""
        built = ends.get(id(on))
        left, why = await abtest.leave_on(on, built[0] if built else None,
                                          f"good ({inp.good}, the base)", spent=spent)
        if on is ctx:
            rec.left_flashed = left
        rec.left_why.append(why)

    async def judge(on: LabContext, commit: str, margin: float) -> list[BisectStep]:
        """One commit against good, and -- when that stays undecided -- against bad; built for
        the place it runs on (a vlab fleet's DUT paths differ per place)."""
        if id(on) not in ends:
            ends[id(on)] = (await _build(on, good_commit), await _build(on, commits[-1][0]))
        good, bad = ends[id(on)]
        build = await _build(on, commit)
        steps: list[BisectStep] = []
        for against, pair in (("good", (good, build)), ("bad", (build, bad))):
            j, reuse = await ab(on, *pair, margin)
            steps.append(BisectStep(commit=commit, subject=subjects[commit], against=against,
                                    judgement=j, side=_side(j, against), a_reuse=reuse))
            if steps[-1].side != "unknown":
                break  # undecided against good: ask which end it is like
        return steps

    try:
        good_commit = await asyncio.to_thread(_git, ctx, "rev-parse", f"{inp.good}^{{commit}}")
        good_build, bad_build = await _build(ctx, good_commit), await _build(ctx, commits[-1][0])
        ends[id(ctx)] = (good_build, bad_build)
        await ctx.report(0, None, f"{len(commits)} commits; is {inp.bad} worse than {inp.good}?")
        rec.ends, _ = await ab(ctx, good_build, bad_build, None)
        if rec.ends.verdict != "regressed":
            rec.outcome = "no_regression" if rec.ends.verdict in ("same", "improved") else "undecided"
            rec.reason = f"{inp.bad} against {inp.good}: {rec.ends.describe()}"
        else:
            margin = abs(rec.ends.delta_pct) / 2
            async with contextlib.AsyncExitStack() as stack:
                workers = [ctx, *await _more_places(ctx, stack)]
                rec.places = [w.place_name for w in workers if w.place_name]
                lo, hi = -1, len(commits) - 1  # commits[lo] good (or good itself), commits[hi] bad
                while hi - lo > 1:
                    mids = split(lo, hi, len(workers))
                    await ctx.report(len(rec.steps) + 1, None, "testing " + ", ".join(
                        f"{commits[m][0][:12]} {subjects[commits[m][0]][:40]}" for m in mids)
                        + f" ({hi - lo - 1} candidates left"
                        + (f", on {len(mids)} places)" if len(mids) > 1 else ")"))
                    found = await asyncio.gather(*(judge(w, commits[m][0], margin)
                                                   for w, m in zip(workers, mids, strict=False)))
                    for steps in found:
                        rec.steps += steps
                    sides = [steps[-1].side for steps in found]
                    lo, hi, unknown = narrow(lo, hi, mids, sides)
                    if unknown is not None:
                        commit = commits[unknown][0]
                        rec.outcome = "undecided"
                        rec.reason = (f"{commit[:12]} is neither like good nor like bad at the "
                                      f"rule's cap; the first bad commit is in "
                                      f"{commits[lo + 1][0][:12]}..{commits[hi][0][:12]}")
                        break
                else:
                    rec.first_bad, rec.first_bad_subject = commits[hi][0], subjects[commits[hi][0]]
                    rec.outcome = "found"
                    rec.reason = (f"first bad commit {rec.first_bad[:12]} {rec.first_bad_subject!r}: "
                                  f"{inp.metric} {rec.ends.delta_pct:+.1f}% from {inp.good} to {inp.bad}")
                for other in workers[1:]:  # before their places are released
                    await leave(other)
    except LabError as exc:
        rec.outcome, rec.reason = "failed", f"{exc.kind}: {exc.problem}"
        spent = abtest.budget_spent(exc)
    await leave(ctx)
    rec.seconds = round(time.monotonic() - t0, 2)
    store.save("bis", rec.id, rec)
    return BisectOutput(
        bisect_id=rec.id, outcome=rec.outcome, first_bad=rec.first_bad,
        first_bad_subject=rec.first_bad_subject,
        regression=rec.ends.describe() if rec.ends else None,
        steps=[f"{s.commit[:12]} vs {s.against}: {s.side} ({s.judgement.verdict}, "
               f"{s.judgement.delta_pct:+.1f}%)" for s in rec.steps],
        commits=len(commits), reason=rec.reason, seconds=rec.seconds,
        left_flashed=rec.left_flashed, left_flashed_why="; ".join(rec.left_why) or None)


def _precheck(ctx: LabContext, inp: BisectInput) -> None:
    # a build's commit of another principal's patch is no ref for this caller (lab/host/patchstore.py)
    for field in ("good", "bad"):
        check_ref(ctx.profile, ctx.data_dir, field, getattr(inp, field), ctx.principal)


SPEC = ToolSpec(name="bisect", description=describe(__doc__), input=BisectInput,
                output=BisectOutput, run=run, effect="destructive",
                requires=frozenset({"lease", "board_healthy", "env_pinned", "topology_asserted"}),
                budget_class="measure",  # each nested flash takes its own flash slot
                needs=frozenset({"repo_history"}), precheck=_precheck)
