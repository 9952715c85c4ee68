"""bisect: between a good and a bad ref of the firmware repo, find the first commit whose
measurement regresses -- as Pinpoint and `git bisect run` do, each step judged by the same
pre-registered decision rule (A/B at the densest workload point -- the profile's, else the
load's own, 0 on a DUT without a load -- adaptive windows).

Destructive: builds and flashes each tested commit. First it shows that bad regressed against
good (otherwise there is nothing to find); then each midpoint is compared with good --
"regressed" puts it on the bad side, "same" or "improved" on the good side -- and, when that
stays undecided, with bad. The band of "same" is half the regression chased (Pinpoint sizes its
comparison by the change it bisects), at least the rule's smallest effect.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from labwarden.core.decision import Judgement
from labwarden.core.errors import LabError, ToolError
from labwarden.core.experiments import Bisection, BisectStep
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.host import builder
from labwarden.lab.host.builds import compiled, recipe
from labwarden.results.bisect import BisectOutput
from labwarden.tools import abtest
from labwarden.tools.context import LabContext

MAX_COMMITS = 256


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

    async def ab(a: str, b: str, margin: float | None) -> Judgement:
        scr = await abtest.AB(ctx, a, b, stations=stations, rule=dec, window_s=dec.window_s,
                              metric=inp.metric, margin_pct=margin, interleave=dec.interleave).run()
        return scr.final

    try:
        good_commit = await asyncio.to_thread(_git, ctx, "rev-parse", f"{inp.good}^{{commit}}")
        good_build, bad_build = await _build(ctx, good_commit), await _build(ctx, commits[-1][0])
        await ctx.report(0, None, f"{len(commits)} commits; is {inp.bad} worse than {inp.good}?")
        rec.ends = await ab(good_build, bad_build, None)
        if rec.ends.verdict != "regressed":
            rec.outcome = "no_regression" if rec.ends.verdict in ("same", "improved") else "undecided"
            rec.reason = f"{inp.bad} against {inp.good}: {rec.ends.describe()}"
        else:
            margin = abs(rec.ends.delta_pct) / 2
            lo, hi = -1, len(commits) - 1  # commits[lo] good (or good itself), commits[hi] bad
            while hi - lo > 1:
                mid = (lo + hi) // 2
                commit = commits[mid][0]
                await ctx.report(len(rec.steps) + 1, None, f"testing {commit[:12]} "
                                 f"{subjects[commit][:60]} ({hi - lo - 1} candidates left)")
                build = await _build(ctx, commit)
                for against, pair in (("good", (good_build, build)), ("bad", (build, bad_build))):
                    j = await ab(*pair, margin)
                    step = BisectStep(commit=commit, subject=subjects[commit], against=against,
                                      judgement=j, side=_side(j, against))
                    rec.steps.append(step)
                    if step.side != "unknown":
                        break  # undecided against good: ask which end it is like
                side = rec.steps[-1].side
                if side == "unknown":
                    rec.outcome = "undecided"
                    rec.reason = (f"{commit[:12]} is neither like good nor like bad at the rule's "
                                  f"cap; the first bad commit is in {commits[lo + 1][0][:12]}.."
                                  f"{commits[hi][0][:12]}")
                    break
                if side == "bad":
                    hi = mid
                else:
                    lo = mid
            else:
                rec.first_bad, rec.first_bad_subject = commits[hi][0], subjects[commits[hi][0]]
                rec.outcome = "found"
                rec.reason = (f"first bad commit {rec.first_bad[:12]} {rec.first_bad_subject!r}: "
                              f"{inp.metric} {rec.ends.delta_pct:+.1f}% from {inp.good} to {inp.bad}")
    except LabError as exc:
        rec.outcome, rec.reason = "failed", f"{exc.kind}: {exc.problem}"
    rec.seconds = round(time.monotonic() - t0, 2)
    store.save("bis", rec.id, rec)
    return BisectOutput(
        bisect_id=rec.id, outcome=rec.outcome, first_bad=rec.first_bad,
        first_bad_subject=rec.first_bad_subject,
        regression=rec.ends.describe() if rec.ends else None,
        steps=[f"{s.commit[:12]} vs {s.against}: {s.side} ({s.judgement.verdict}, "
               f"{s.judgement.delta_pct:+.1f}%)" for s in rec.steps],
        commits=len(commits), reason=rec.reason, seconds=rec.seconds)


SPEC = ToolSpec(name="bisect", description=describe(__doc__), input=BisectInput,
                output=BisectOutput, run=run, effect="destructive",
                requires=frozenset({"lease", "board_healthy", "env_pinned", "topology_asserted"}),
                budget_class="measure",  # each nested flash takes its own flash slot
                needs=frozenset({"repo_history"}))
