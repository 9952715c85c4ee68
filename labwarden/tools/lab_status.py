"""lab_status: what the lab is and how it is right now -- its workload (the load kind, the
workload points an experiment screens and sweeps at, whether the load drives the target's CPU,
the arguments of its full sweep),
the suspects `attribute` may pause, the counters the profile probes; reachable, what runs
(fingerprint), board health, governor/boost, topology, process manager, associated clients.

Read-only and cheap (a dozen round trips on the persistent channel): call it first, and
whenever a result looks surprising. A DUT that does not answer (off, rebooting) is
`reachable: false` with a remedy for this kind of lab, not an error; the next call reconnects.
"""

from __future__ import annotations

import time

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import knobs
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.dut import datamodel, procs
from labwarden.lab.dut.errors import CommandTimeout, ConnectionLost, Unreachable
from labwarden.results.lab_status import LabStatusOutput, SweepArgs, Workload
from labwarden.tools.context import LabContext


class LabStatusInput(ToolInput):
    pass


def workload(prof: LabProfile) -> Workload:
    driver = load_drivers.DRIVERS[prof.load.kind]
    return Workload(load_kind=prof.load.kind, axis=driver.axis, points=load_drivers.points(prof),
                    load_drives_cpu=prof.gates.load_drives_cpu, suspects=prof.target.suspects,
                    counters=dict(prof.target.uprobes),
                    offered_load_counter=prof.decision.offered_load_counter,
                    sweep=SweepArgs(densities=load_drivers.points(prof), reps=prof.decision.sweep_reps,
                                    window_s=prof.decision.window_s, settle_s=prof.decision.settle_s))


async def run(ctx: LabContext, inp: LabStatusInput) -> LabStatusOutput:
    prof, dev = ctx.profile, ctx.device
    state = ctx.state
    t0 = time.perf_counter()
    try:
        await dev.run(["true"], timeout=10)
    except (Unreachable, ConnectionLost, CommandTimeout) as exc:
        return LabStatusOutput(
            workload=workload(prof), reachable=False, target_process=prof.target.process,
            target_pid=None,
            board_health=state.board_health, health_reason=state.health_reason,
            flashed_build=state.flashed_build, fingerprint_verified=state.fingerprint_ok(),
            knobs=[], topology=None, problems=[f"the DUT does not answer: {exc.problem}"],
            remedy=exc.remedy)
    rtt = round((time.perf_counter() - t0) * 1000, 3)
    proc = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    version = None
    if proc is not None and prof.target.prints_git_hash:  # only a target declared to answer it:
        # an unknown daemon may treat --version as anything (start a second instance, say)
        version = (await dev.run([f"/proc/{proc.pid}/exe", "--version"], timeout=10)).stdout.strip()
    states = [await k.state() for k in knobs.pinned(dev, prof)]
    radio = knobs.RadioTopology(dev, prof)
    topo = await radio.topology() if await radio.available() is None else None
    associated = None
    if proc is not None:
        associated = await datamodel.count(dev, prof)
    problems = [f"{k.name}: {k.value} -- {k.advice}" for k in states if not k.ok]
    if proc is None:
        problems.insert(0, f"{prof.target.process} is not running")
    if state.board_health != "good":
        problems.insert(0, f"board is {state.board_health}: {state.health_reason}")
    if not state.fingerprint_ok():
        problems.append("fingerprint not verified since the last flash: run fingerprint_verify")
    return LabStatusOutput(
        workload=workload(prof), reachable=True, rtt_ms=rtt, target_process=prof.target.process,
        target_pid=proc.pid if proc else None, running_version=version,
        board_health=state.board_health, health_reason=state.health_reason,
        flashed_build=state.flashed_build, fingerprint_verified=state.fingerprint_ok(),
        knobs=states, topology=topo, associated=associated, problems=problems,
        stray_output=dev.stray_output)


SPEC = ToolSpec(name="lab_status", description=describe(__doc__),
                input=LabStatusInput, output=LabStatusOutput, run=run, effect="read_only",
                idempotent=True, health="observe")
