"""Budgets, rate limits and the lease under concurrency (issue 15, classes 2 and 7, first half):
with `tool_calls = 3`, eight concurrent calls -> exactly three run; refused calls count; with
`flashes_per_hour = 1`, three concurrent flashes -> exactly one, and the limit holds for the
next `labwarden call flash` in another process (its remedy is no bypass); a call that crosses
the wall-time budget is stopped and cleans up; the lease is renewed while a call runs, a live
holder is never taken over, and eight contenders for an expired lease leave exactly one holder.
Real vlab (processes, SSH on loopback, perf), real CLI subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwarden.guardrails.lease import STALE_LOCK_S, Lease, holder_name
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import rpc
from labwarden.vlab.layout import VlabLayout

from .conftest import vlab_probes
from .test_mcp_server import _perf_on, _until
from .tooling import baseline

pytestmark = pytest.mark.anyio
LABWARDEN = str(Path(sys.executable).parent / "labwarden")


def _profile(lab: VlabLayout, **policy: Any) -> LabProfile:
    data = tomllib.loads(lab.lab_toml.read_text())
    data["policy"].update(policy)
    return LabProfile.from_dict(data, lab.lab_toml)


def _events(ctx: Any, kind: str) -> list[Any]:
    return [e.event for e in ctx.transcript.events(ctx.session_id) if e.event.kind == kind]


async def _verify(lab: VlabLayout) -> None:
    async with open_lab(LabProfile.from_file(lab.lab_toml), guarded=False) as ctx:
        rec = await call_tool(ctx, "fingerprint_verify", {"build_id": baseline(lab)})
        assert rec.ok and rec.result and rec.result["verified"], rec.error


async def test_eight_concurrent_calls_against_three(lab: VlabLayout) -> None:
    async with open_lab(_profile(lab, budgets={"tool_calls": 3}), client="test") as ctx:
        recs = await asyncio.gather(*(call_tool(ctx, "lab_status", {}) for _ in range(8)))
        codes = sorted((r.error.code if r.error else "ok") for r in recs)
        assert codes == ["budget_exceeded"] * 5 + ["ok"] * 3, codes
        assert len(_events(ctx, "tool_called")) == 8  # every attempt is in the transcript
    async with open_lab(_profile(lab, budgets={"tool_calls": 3}), client="test") as ctx:
        assert (await call_tool(ctx, "no_such_tool", {})).error.code == "tool_unknown"  # type: ignore[union-attr]
        assert (await call_tool(ctx, "associate", {"stations": "x"})).error.code == "invalid_input"  # type: ignore[union-attr]
        assert (await call_tool(ctx, "lab_status", {})).ok
        over = await call_tool(ctx, "lab_status", {})
        assert over.error is not None and over.error.code == "budget_exceeded"
        assert "tool calls: 3 of 3" in over.error.message
        assert "new session" not in (over.error.remedy or "").split("(")[0]


async def test_flashes_per_hour_hold_across_concurrency_sessions_and_processes(lab: VlabLayout) -> None:
    await _verify(lab)
    flashes = lab.data_dir / "flashes.json"
    flashes.unlink(missing_ok=True)
    prof = _profile(lab, budgets={"flashes_per_hour": 1})
    try:
        async with open_lab(prof, client="test") as ctx:
            recs = await asyncio.gather(*(call_tool(ctx, "flash", {"build_id": baseline(lab)})
                                          for _ in range(3)))
            codes = sorted((r.error.code if r.error else "ok") for r in recs)
            assert codes == ["budget_exceeded", "budget_exceeded", "ok"], [r.error for r in recs]
            refusal = next(r.error for r in recs if r.error)
            assert refusal is not None and "across every session" in refusal.message
        # another session in another process, right after: still refused, and the remedy is
        # not "start a new session" (that was the bypass)
        toml = lab.lab_toml.with_name("lab-flash1.toml")
        toml.write_text(lab.lab_toml.read_text().replace(
            "[policy]", "[policy.budgets]\nflashes_per_hour = 1\n\n[policy]"))
        for _ in range(2):
            res = subprocess.run([LABWARDEN, "call", "flash", f'{{"build_id": "{baseline(lab)}"}}',
                                  "--lab", str(toml)], capture_output=True, text=True, timeout=120)
            assert res.returncode == 1 and "budget_exceeded" not in res.stdout
            assert "flashes: 1 of this DUT in the last hour" in res.stderr, res.stderr
            assert "new session" not in res.stderr
    finally:
        flashes.unlink(missing_ok=True)
        await _verify(lab)


async def test_a_call_that_crosses_the_wall_time_budget_is_stopped_cleanly(lab: VlabLayout) -> None:
    await _verify(lab)
    stad = int((lab.run_dir / "stad.pid").read_text())
    densities, reps, window_s = [6, 12], 3, 20
    sweep = {"densities": densities, "reps": reps, "window_s": window_s, "perf": True,
             "idle_baseline": False}
    async with open_lab(_profile(lab, budgets={"wall_time_s": 8}), client="test") as ctx:
        t0 = time.monotonic()
        rec = await call_tool(ctx, "sweep", sweep)
        took = time.monotonic() - t0
        assert rec.error is not None and rec.error.code == "budget_exceeded", rec.error
        assert rec.error.kind == "timeout" and "clean-up ran" in rec.error.message
        # stopped before the sweep would have ended by itself: its windows alone (120 s) are a
        # floor under its own time -- an order, not a time; it fails for a budget that lets the
        # call run to its end and only then reports it (the long windows cost nothing when the
        # budget works: the first one is cut at 8 s)
        assert took < len(densities) * reps * window_s, took
        after = await call_tool(ctx, "lab_status", {})
        assert after.error is not None and after.error.code == "budget_exceeded"
    # cleaned up: no perf left on the target, no perf.data on the DUT, no uprobes, no clients --
    # the clean-up ran before the call returned; a killed perf may take a moment to be reaped on
    # a loaded 2-core CI box: it has until its window, which began after t0, would have ended by
    # itself (perf records `sleep window_s`: a perf nobody stopped is gone only after that)
    window_end = t0 + window_s
    assert await _until(lambda: not _perf_on(stad), window_end - time.monotonic()), \
        f"perf still on the target when its window would have ended: {_perf_on(stad)}"
    assert await _until(lambda: not list(lab.tmp_dir.glob("lw-*.perf.data")), 10)
    assert await _until(lambda: not vlab_probes(lab), 10), f"uprobes left: {vlab_probes(lab)}"
    assert rpc.count(lab.socket).get("total") == 0


async def test_the_lease_is_renewed_while_a_call_runs(lab: VlabLayout) -> None:
    """TTL 3 s, a call of ~8 s: another holder polling all along never gets the lease. (3 s, not
    less: a renewal every second keeps 2 s of slack for a loaded 2-core CI box.)"""
    await _verify(lab)
    ttl_s = 3
    prof = _profile(lab, lease_ttl_s=ttl_s)
    async with Device(prof.ssh_endpoint()) as dev, open_lab(prof, client="test") as ctx:
        rival = Lease(dev, prof.dut.paths.run, "rival@elsewhere:1.1/s-rival", ttl_s=ttl_s)
        call = asyncio.create_task(call_tool(ctx, "measure", {"stations": 6, "window_s": 3,
                                                             "reps": 2, "perf": False}))
        refused: list[float] = []  # when the rival was refused
        while not call.done():
            await asyncio.sleep(0.4)
            if ctx.guard is not None and ctx.guard.lease.held:
                other = await rival.acquire()
                assert other is not None, "a live holder's lease was taken over"
                assert other.holder == ctx.guard.lease.holder
                refused.append(time.monotonic())
        rec = await call
        assert rec.ok, rec.error
        # the rival was refused over more than one TTL: the lease outlived its TTL, so it was
        # renewed (a lease never renewed is the rival's one TTL after it was taken) -- a relation
        # to the TTL, which also says the call ran long enough for the test to mean something
        assert len(refused) >= 2 and refused[-1] - refused[0] > ttl_s, refused
        await asyncio.sleep(ttl_s + 0.5)  # not renewed between calls: it expires, may be taken
        assert await rival.acquire() is None
        await rival.release()


async def test_a_renewal_takes_back_a_lease_a_reboot_wiped(lab: VlabLayout) -> None:
    """A flash reboots the DUT and its run dir (a tmpfs) loses the lease mid-experiment: the next
    renewal takes it again, atomically -- and never one another holder took in between."""
    prof = LabProfile.from_file(lab.lab_toml)
    lease_file = lab.run_dir / "labwarden.lease"
    async with Device(prof.ssh_endpoint()) as dev:
        mine = Lease(dev, prof.dut.paths.run, holder_name("tester", "s-flash"), ttl_s=60)
        rival = Lease(dev, prof.dut.paths.run, holder_name("tester", "s-rival"), ttl_s=60)
        try:
            assert await mine.acquire() is None
            lease_file.unlink()  # the reboot
            assert await mine.renew(), "a wiped lease must be taken back by its holder's renewal"
            assert lease_file.read_text().split()[0] == mine.holder
            lease_file.unlink()
            assert await rival.acquire() is None  # the rival was first after this reboot
            assert not await mine.renew(), "a renewal must never take a live holder's lease"
            assert lease_file.read_text().split()[0] == rival.holder
        finally:
            await rival.release()
            await mine.release()
            for stale in lab.run_dir.glob("labwarden.lease*"):
                stale.unlink()


async def test_a_mutex_left_by_a_killed_step_is_waited_out(lab: VlabLayout) -> None:
    """A lease step killed inside its mutex (its connection broke: the drift bench saw it) leaves
    `labwarden.lease.lock` behind; it is removed once older than STALE_LOCK_S. The next acquire
    waits that out instead of failing -- before, it gave up after 100 quick tries (~7 s) and every
    call until the lock went stale failed."""
    prof = LabProfile.from_file(lab.lab_toml)
    # an expired lease is there (a free one is taken by one `ln`, without the mutex)
    (lab.run_dir / "labwarden.lease").write_text("ghost@nowhere:1.1/s-ghost 1\n")
    lock = lab.run_dir / "labwarden.lease.lock"
    lock.mkdir()
    old = time.time() - (STALE_LOCK_S - 15)  # stale in ~15 s: past the old give-up
    os.utime(lock, (old, old))
    async with Device(prof.ssh_endpoint()) as dev:
        mine = Lease(dev, prof.dut.paths.run, holder_name("tester", "s-after-break"), ttl_s=60)
        try:
            assert await mine.acquire() is None
            # taken only once the lock went stale: it waited, it did not step around the mutex
            assert time.time() - old > STALE_LOCK_S
            assert (lab.run_dir / "labwarden.lease").read_text().split()[0] == mine.holder
        finally:
            await mine.release()
            for stale in lab.run_dir.glob("labwarden.lease*"):
                if stale.is_dir():
                    stale.rmdir()
                else:
                    stale.unlink()


async def test_eight_contenders_for_an_expired_lease_leave_one_holder(lab: VlabLayout) -> None:
    prof = LabProfile.from_file(lab.lab_toml)
    lease_file = lab.run_dir / "labwarden.lease"
    lease_file.write_text("ghost@nowhere:1.1/s-ghost 1\n")  # expired long ago
    devices = [Device(prof.ssh_endpoint()) for _ in range(8)]
    try:
        for d in devices:
            await d.__aenter__()
        leases = [Lease(d, prof.dut.paths.run, f"contender{i}@host:{i}.1/s{i}", ttl_s=60)
                  for i, d in enumerate(devices)]
        results = await asyncio.gather(*(le.acquire() for le in leases))
        winners = [le.holder for le, r in zip(leases, results, strict=True) if r is None]
        assert len(winners) == 1, winners
        assert lease_file.read_text().split()[0] == winners[0]
        assert all(r is None or r.holder == winners[0] for r in results)
        # the winner is live: nobody takes it over, not even by "adopting" it
        loser = next(le for le, r in zip(leases, results, strict=True) if r is not None)
        assert await loser.acquire() is not None
        assert not await loser.adopt("ghost@nowhere:1.1/s-ghost")
    finally:
        for d in devices:
            await d.close()
        lease_file.unlink(missing_ok=True)
        for stale in lab.run_dir.glob("labwarden.lease*"):
            stale.unlink()


async def test_resume_never_adopts_a_live_holder(lab: VlabLayout) -> None:
    prof = LabProfile.from_file(lab.lab_toml)
    me = holder_name("tester", "s-live")  # this very process: alive
    async with Device(prof.ssh_endpoint()) as dev:
        mine = Lease(dev, prof.dut.paths.run, me, ttl_s=60)
        assert await mine.acquire() is None
        thief = Lease(dev, prof.dut.paths.run, holder_name("tester", "s-thief"), ttl_s=60)
        try:
            assert not await thief.adopt(me)
            assert (await thief.current()).holder == me  # type: ignore[union-attr]
        finally:
            await mine.release()
    assert not (lab.run_dir / "labwarden.lease").exists()
    assert BoardState.load(lab.data_dir).board_health == "good"
    assert os.getpid() > 0
