"""attribute: pause one suspect process (from the profile's allowlist) for a window and measure
the target's CPU before, during and after: how much of the target's load the suspect causes.

Mutates DUT state reversibly: the suspect is held in a ptrace stop by the DUT-side helper
lw-pause (labwarden/lab/dut/lw_pause.c), which resumes it when labwarden stops it, at the
deadline, when its session's output goes away, or when it dies (the kernel detaches a dead
tracer's tracees), so a crashed or disconnected server cannot leave the suspect stopped. When the
helper's session is lost mid-window the tool does not wait for the DUT to notice: it TERMs the
helper over a fresh connection at once and reports the window as no attribution.
The window is capped at MAX_WINDOW_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from labwarden.core.devtext import quote
from labwarden.core.errors import ToolError
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.conditions import clk_tck as clk_tck_of
from labwarden.lab.dut import procs, sampler
from labwarden.lab.dut.commands import RunResult
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.dut.helper_programs import ensure
from labwarden.lab.dut.jobs import DutJobs
from labwarden.lab.dut.procs import ProcInstance
from labwarden.lab.procfs import parse_stat
from labwarden.results.attribute import AttributeOutput
from labwarden.tools.context import LabContext

log = logging.getLogger(__name__)
MAX_WINDOW_S = 60.0
"""Longest pause the tool will hold."""
MARGIN_S = 1.0
"""The helper's deadline is the window plus this: the tool releases first; the deadline is the
fallback if the release never reaches the DUT."""
_ANCESTORS = ('p=$$; while [ "$p" -gt 1 ] 2>/dev/null; do echo "$p"; '
              'read -r st < "/proc/$p/stat" || break; st=${st##*\\)}; set -- $st; p=$2; done')
"""Constant script: our DUT shell's parent chain (the DUT's sshd is in it)."""


class AttributeInput(ToolInput):
    suspect: str = Field(description="process to pause; must be in the profile's [target] suspects",
                         examples=["stamon"])
    window_s: float = Field(10, gt=0, description=f"pause length, s (at most {MAX_WINDOW_S:g})",
                            examples=[20], json_schema_extra={"maximum": MAX_WINDOW_S})
    baseline_s: float | None = Field(None, gt=0, le=600, description="length of the before and "
                                     "after measurements, s (default: window_s)")

    @field_validator("window_s")
    @classmethod
    def _capped(cls, v: float) -> float:
        if v > MAX_WINDOW_S:
            raise ValueError(f"window_s {v:g} is above the cap MAX_WINDOW_S = {MAX_WINDOW_S:g} s; "
                             "pause for at most that long (repeat the call for more data)")
        return v

    @model_validator(mode="after")
    def _default_baseline(self) -> AttributeInput:
        if self.baseline_s is None:
            self.baseline_s = self.window_s
        return self


async def _stat_state(dev: Device, pid: int) -> tuple[str, int] | None:
    try:
        st = parse_stat((await dev.read_file(f"/proc/{pid}/stat")).decode())
    except (DeviceError, ValueError, IndexError):
        return None
    return st.state, st.starttime


async def _check_suspect(ctx: LabContext, name: str) -> ProcInstance:
    """What `name` resolves to on the DUT right now must be safe to pause. Which names may be
    paused at all is the suspect policy (guardrails/suspects.py), applied by the guard."""
    prof, dev = ctx.profile, ctx.device
    inst = await procs.instance(dev, name, prof.target.pidfile(name))
    if inst is None:
        raise ToolError("device", f"suspect {name} is not running on the DUT", "lab_status; "
                        "is the process manager on?")
    if inst.pid == 1:
        raise ToolError("refused", f"{name} resolves to pid 1 (init)", "fix [target] pidfiles")
    chain = {int(p) for p in (await dev.run(["sh", "-c", _ANCESTORS], check=True)).stdout.split()}
    if inst.pid in chain:
        raise ToolError("refused", f"{name} resolves to pid {inst.pid}, an ancestor of our SSH "
                        "session (the DUT's sshd)", "fix [target] pidfiles / suspects")
    target = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    if target is not None and target.pid == inst.pid:
        raise ToolError("refused", f"{name} resolves to the target's pid {inst.pid}",
                        "fix [target] pidfiles")
    now = await _stat_state(dev, inst.pid)
    if now is None or now[1] != inst.starttime:
        raise ToolError("device", f"{name} (pid {inst.pid}) exited while being checked", "retry")
    if now[0] in "tT":
        raise ToolError("refused", f"{name} (pid {inst.pid}) is already stopped (state {now[0]}): "
                        "someone else holds it", "find who stopped it (TracerPid in "
                        f"/proc/{inst.pid}/status) before attributing")
    return inst


async def _cpu(jobs: DutJobs, name: str, pid: int, seconds: float, clk_tck: int,
               want: Literal["auto", "ticks"], notes: list[str]) -> float:
    """The target's CPU over `seconds`, from the clock measure uses (sampler.cpu); a fallback
    to ticks is said in `notes`, once."""
    n = max(2, math.ceil(seconds - 1e-9) + 1)
    res = await jobs.exec(name, sampler.argv(pid, n), timeout=n + 15, cap=1 << 20)
    got = sampler.parse(res.stdout)
    if got.gone or len(got.samples) < 2 or got.restarted():
        raise ToolError("device", f"the target (pid {pid}) exited or restarted while measured",
                        "lab_status; then retry")
    cpu = got.cpu(clk_tck, want)
    if cpu.fallback and (note := f"CPU from ticks, not schedstat ns: {cpu.fallback}") not in notes:
        notes.append(note)
    return round(cpu.mean or 0.0, 2)


async def _wait_state(dev: Device, inst: ProcInstance, stopped: bool, timeout: float,
                      until: asyncio.Future[RunResult] | None = None) -> bool:
    """Poll the suspect's state until it is (not) in a stop; False on timeout or if `until` ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = await _stat_state(dev, inst.pid)
        if now is None or now[1] != inst.starttime:
            return False
        if (now[0] in "tT") == stopped:
            return True
        if until is not None and until.done():
            return False
        await asyncio.sleep(0.02)
    return False


async def _last_resort(dev: Device, inst: ProcInstance, notes: list[str]) -> bool:
    """The helper did not let go: kill it (the kernel detaches), then SIGCONT a plain stop."""
    status = (await dev.read_file(f"/proc/{inst.pid}/status")).decode(errors="replace")
    tracer = next((int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("TracerPid:")), 0)
    if tracer > 1:
        comm = (await dev.read_file(f"/proc/{tracer}/comm")).decode().strip()
        if comm == "lw-pause":
            await dev.signal(tracer, "KILL")
            notes.append(f"lw-pause (pid {tracer}) still held the suspect: killed it")
    if await _wait_state(dev, inst, stopped=False, timeout=1.0):
        return True
    await dev.signal(inst.pid, "CONT")
    notes.append(f"suspect pid {inst.pid} was still stopped: sent SIGCONT as a last resort")
    return await _wait_state(dev, inst, stopped=False, timeout=2.0)


def _ended_by(pause: asyncio.Future[RunResult]) -> str:
    """How a finished helper let go: its last line is "resumed PID REASON"."""
    if pause.cancelled() or pause.exception() is not None:
        return "session lost"
    words = getattr(pause.result(), "stdout", "").split()
    return words[-1] if len(words) >= 3 and words[-3] == "resumed" else "helper exited"


def _session_lost(pause: asyncio.Future[RunResult]) -> bool:
    """The helper's session ended without the helper's exit status: the connection broke (or the
    exec was cancelled). The helper may still hold the suspect on the DUT."""
    return pause.done() and (pause.cancelled() or pause.exception() is not None)


async def _release(dev: Device, jobs: DutJobs, inst: ProcInstance, pause: asyncio.Future[RunResult],
                   notes: list[str]) -> tuple[bool, float, str]:
    """End the pause (stop the helper's job: TERM, it detaches), then verify the suspect runs
    again. Closing the helper's session is not relied on: OpenSSH and dropbear send no SIGHUP,
    and a DUT's sshd may miss a dropped client; so a lost session is followed by the same TERM,
    over a fresh connection (a helper that already let go is not signalled: its pid file no
    longer matches a live process)."""
    t0 = time.monotonic()
    by = _ended_by(pause) if pause.done() else "release"
    if not pause.done() or _session_lost(pause):
        with contextlib.suppress(DeviceError):
            await jobs.stop("pause")
    if not pause.done():
        await asyncio.wait([pause], timeout=3.0)
    pause.cancel()  # no-op when it ended; else its session is closed
    await asyncio.wait([pause])
    if not pause.cancelled() and pause.exception() is not None:  # retrieved: no asyncio warning
        notes.append(f"the helper's session ended with: {quote(pause.exception())}")
    ok = await _wait_state(dev, inst, stopped=False, timeout=3.0)
    if not ok:
        ok = await _last_resort(dev, inst, notes)
        by = "sigcont" if ok else "none"
    return ok, round(time.monotonic() - t0, 3), by


def _broke(suspect: str, resumed: bool, notes: list[str]) -> ToolError:
    return ToolError("device", f"the connection to the DUT broke during the window, so the "
                     f"pause of {suspect} ended early and during_pct is no attribution; "
                     f"{suspect} {'runs again' if resumed else 'may still be stopped'} "
                     f"({'; '.join(notes)})", "check the link to the DUT, then retry")


async def run(ctx: LabContext, inp: AttributeInput) -> AttributeOutput:
    dev, prof = ctx.device, ctx.profile
    baseline_s = inp.baseline_s or inp.window_s
    await ctx.report(0, 5, f"checking suspect {inp.suspect}")
    inst = await _check_suspect(ctx, inp.suspect)
    target = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    if target is None:
        raise ToolError("device", f"the target {prof.target.process} is not running", "lab_status")
    clk_tck = await clk_tck_of(dev)
    if clk_tck <= 0:
        raise ToolError("device", "cannot read the DUT's CLK_TCK (from /proc/self/auxv or "
                        "/proc/uptime)", "is /proc mounted on the DUT?")
    helper = await ensure(dev, prof, "lw-pause")
    async with DutJobs(dev, prof.dut.paths.tmp, shield=ctx.shielded) as jobs:
        return await _attribute(ctx, inp, jobs, inst, target, helper, clk_tck, baseline_s)


async def _attribute(ctx: LabContext, inp: AttributeInput, jobs: DutJobs, inst: ProcInstance,
                     target: ProcInstance, helper: str, clk_tck: int,
                     baseline_s: float) -> AttributeOutput:
    dev, prof = ctx.device, ctx.profile
    notes: list[str] = []
    want = prof.target.cpu_clock
    await ctx.report(1, 5, f"measuring {prof.target.process} for {baseline_s:g} s before")
    before = await _cpu(jobs, "before", target.pid, baseline_s, clk_tck, want, notes)

    await ctx.report(2, 5, f"pausing {inp.suspect} (pid {inst.pid}) for {inp.window_s:g} s")
    deadline_ms = int((inp.window_s + MARGIN_S) * 1000)
    argv = [helper, str(inst.pid), str(inst.starttime), str(deadline_ms)]
    pause: asyncio.Future[RunResult] = asyncio.ensure_future(
        jobs.exec("pause", argv, timeout=inp.window_s + MARGIN_S + 30))
    released = False
    window: asyncio.Future[float] | None = None
    try:
        if not await _wait_state(dev, inst, stopped=True, timeout=5.0, until=pause):
            res = await pause if pause.done() else None
            why = res.stderr.strip() if res is not None else "it did not stop within 5 s"
            raise ToolError("refused" if res is not None and res.exit_status == 2 else "device",
                            f"lw-pause did not pause {inp.suspect} (pid {inst.pid}): {why}",
                            "check that the suspect is the same instance and ptrace is allowed")
        window = asyncio.ensure_future(
            _cpu(jobs, "during", target.pid, inp.window_s, clk_tck, want, notes))
        either: list[asyncio.Future[Any]] = [window, pause]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not window.done() and _session_lost(pause):
            # the connection broke mid-window: free the suspect now (TERM over a fresh
            # connection), not after a window that can no longer be an attribution
            window.cancel()
            await asyncio.wait([window])
            if not window.cancelled() and window.exception() is not None:
                notes.append(f"the window's measurement ended with: {quote(window.exception())}")
            resumed, _, _ = await _release(dev, jobs, inst, pause, notes)
            released = True
            raise _broke(inp.suspect, resumed, notes)
        during = await window
        held = not pause.done() and await _wait_state(dev, inst, stopped=True, timeout=0.5)
        if not held:
            notes.append("the pause ended before the window did: during_pct is not clean")
        await ctx.report(3, 5, f"resuming {inp.suspect}")
        resumed, after_s, by = await _release(dev, jobs, inst, pause, notes)
        released = True
        if by == "session lost":  # the connection dropped mid-window: the pause ended early
            raise _broke(inp.suspect, resumed, notes)
    finally:
        if window is not None and not window.done():  # cancelled mid-window
            window.cancel()
        if not released:  # failure or cancellation: the pause must not outlive this call
            outcome = "could not be verified (DUT unreachable?)"
            with contextlib.suppress(Exception):
                ok, _, by = await ctx.shielded(_release(dev, jobs, inst, pause, notes))
                outcome = f"resumed ({by})" if ok else "STILL STOPPED: SIGCONT did not help"
            # no await here: the progress sink may be gone when the call was cancelled
            aborted = (f"attribute aborted: {inp.suspect} (pid {inst.pid}) {outcome}"
                       + "".join(f"; {n}" for n in notes))
            ctx.note(aborted)
            log.warning("%s", aborted)
    now = await procs.instance(dev, inp.suspect, prof.target.pidfile(inp.suspect))
    if now is None or (now.pid, now.starttime) != (inst.pid, inst.starttime):
        resumed = False
        notes.append(f"{inp.suspect} is no longer pid {inst.pid} (it exited or restarted)")

    await ctx.report(4, 5, f"measuring {prof.target.process} for {baseline_s:g} s after")
    after = await _cpu(jobs, "after", target.pid, baseline_s, clk_tck, want, notes)
    drop = round(100.0 * (before - during) / before, 1) if before > 0 else 0.0
    await ctx.report(5, 5, f"{prof.target.process} CPU {before:g}% -> {during:g}% while "
                     f"{inp.suspect} paused ({drop:g}% drop), {after:g}% after")
    return AttributeOutput(suspect=inp.suspect, suspect_pid=inst.pid, before_pct=before,
                           during_pct=during, after_pct=after, drop_pct=drop, resumed=resumed,
                           resumed_after_s=after_s, resumed_by=by, pause_held=held, window_s=inp.window_s,
                           notes=notes)


SPEC = ToolSpec(name="attribute", description=describe(__doc__),
                input=AttributeInput, output=AttributeOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease", "board_healthy", "fingerprint_verified", "env_pinned"}),
                budget_class="measure", measures=True, suspect_arg="suspect",
                needs=frozenset({"suspects"}))
