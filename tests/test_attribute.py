"""attribute against the vlab with real ptrace: the measurement at 114 stations, refusals, and the
dead-man guarantees (server killed, connection dropped, helper killed, deadline, cancellation):
each time the suspect must run again before its window would have ended by itself -- an order
seen side by side in the same run, never a number of seconds (the host is shared). The server
killed outright is held both to the helper's own deadline and to a hang-up before the window's
end (the vlab's sshd once skipped the hang-up when the helper's output reached it after the
client died: labwarden/vlab/sshd.py _pump now drops such output instead of ending the pump)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from labwarden.core.call import ToolCallRecord
from labwarden.lab.config import LabProfile
from labwarden.lab.dut import helper_programs
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools import attribute
from labwarden.tools.attribute import MARGIN_S, MAX_WINDOW_S
from labwarden.tools.context import LabContext
from labwarden.vlab.layout import VlabLayout

from .tooling import baseline, ok

pytestmark = [pytest.mark.anyio, pytest.mark.vlab]
TRIALS = 10
SHORT = {"suspect": "stamon", "window_s": 2, "baseline_s": 2}  # 2 s: always >= 1 of stamon's 1 s polls
LONG: dict[str, Any] = {"suspect": "stamon", "window_s": 20, "baseline_s": 1}
DEAD_MAN: dict[str, Any] = {"suspect": "stamon", "window_s": 8, "baseline_s": 1}
"""The dead-man trials: the suspect runs again before its window would have ended by itself (a
broken hang-up path leaves it stopped until the helper's own deadline, MARGIN_S later still); it
normally does in well under 0.1 s of the drop (the times are printed at the end)."""
TIMES: dict[str, list[float]] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_resume_times() -> Iterator[None]:
    yield
    for name, times in TIMES.items():  # shown with -s; the closing note quotes them
        if times:
            print(f"\n{name}: max {max(times):.3f} s over {len(times)} trials")


def _pid(layout: VlabLayout, name: str) -> int:
    return int((layout.run_dir / f"{name}.pid").read_text())


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _tracer(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


def _running(pid: int) -> bool:
    return _state(pid) not in "tT" and _tracer(pid) == 0


async def _until(pred: Callable[[], bool], timeout: float) -> float:
    """Seconds until pred() holds (polled every 5 ms); fails the test after timeout."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - t0


class _ResumeWatch:
    """Times the resume from a thread polling /proc every ms, armed at the drop: the test's event
    loop also runs the tool (reconnects, transcript writes) and may lag behind the DUT.

    The bound is an order, not a time: the suspect must run again before the window it was paused
    for would have ended by itself -- `paused_seen + window_s`, where `paused_seen` is when the
    test saw it stopped (the pause began no later). Left alone, the pause ends no sooner: at the
    helper's deadline (window_s + MARGIN_S after the pause began: MARGIN_S of room for how late
    the test saw the stop) or at the tool's release after its window. A resume that late is the
    window running out, not the mechanism under test, and fails. With `beside` (a `sleep` process
    started at paused_seen) the bound is that sleep's end instead."""

    def __init__(self, pid: int, name: str, paused_seen: float, window_s: float,
                 beside: subprocess.Popen[bytes] | None = None, beside_s: float = 0.0):
        """`beside`: a `sleep` of beside_s started at paused_seen; given, the bound is its end."""
        self.pid, self.name, self.beside, self.beside_s = pid, name, beside, beside_s
        self.window_end = paused_seen + window_s
        self.resumed_at: float | None = None
        self.gone: OSError | None = None
        self.t0 = time.monotonic()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _open(self) -> bool:
        if self.beside is not None:
            return self.beside.poll() is None
        return time.monotonic() < self.window_end

    def _poll(self) -> None:
        try:
            while self._open():
                if _running(self.pid):
                    self.resumed_at = time.monotonic()
                    return
                time.sleep(0.001)
        except OSError as exc:  # its /proc entry went away: it exited, nothing resumed
            self.gone = exc

    def took(self) -> float:
        """Seconds from arming to the resume; fails unless the suspect ran again before its
        window would have ended by itself."""
        self._thread.join()  # the poller stops at the window's end
        if self.gone is not None:
            pytest.fail(f"{self.name}: pid {self.pid} went away while stopped: {self.gone}")
        if self.resumed_at is None and self.beside is not None:
            pytest.fail(f"{self.name}: the suspect was still stopped when a sleep of "
                        f"{self.beside_s:g} s, started when it was seen "
                        f"paused, ended: the helper's own deadline did not let go either; "
                        f"state {_state(self.pid)}, tracer pid {_tracer(self.pid)}")
        if self.resumed_at is None:
            pytest.fail(f"{self.name}: the suspect was still stopped when its window would have "
                        f"ended by itself, {self.window_end - self.t0:.1f} s after the drop "
                        f"(the helper's deadline is {MARGIN_S:g} s later: it was not what let go); "
                        f"state {_state(self.pid)}, tracer pid {_tracer(self.pid)}")
        took = self.resumed_at - self.t0
        TIMES.setdefault(self.name, []).append(took)
        return took


async def _call(layout: VlabLayout, args: dict[str, Any], profile: LabProfile | None = None,
                guarded: bool = False) -> ToolCallRecord:
    """The tool through the real runner; unguarded by default, so the tool's own checks and the
    pause mechanism are what is tested (the guard is tested in its own module)."""
    prof = profile or LabProfile.from_file(layout.lab_toml)
    async with open_lab(prof, guarded=guarded) as ctx:
        return await call_tool(ctx, "attribute", args)


async def test_attribute_stamon_at_114(lab: VlabLayout) -> None:
    # through the guarded door: attribute measures, so it needs a verified image
    assert (await ok(lab, "fingerprint_verify", {"build_id": baseline(lab)}))["verified"]
    await ok(lab, "associate", {"stations": 114})
    pid = _pid(lab, "stamon")
    res = await ok(lab, "attribute", SHORT)
    print(f"\nattribute @114: {res}")
    assert res["suspect_pid"] == pid and res["resumed"] and res["pause_held"]
    assert res["before_pct"] > 10
    assert res["during_pct"] < 0.1 * res["before_pct"] and res["drop_pct"] > 90
    assert res["resumed_by"] == "release" and res["notes"] == []
    assert _pid(lab, "stamon") == pid and _running(pid)


@pytest.mark.parametrize("args, kind, words", [
    ({"suspect": "stad"}, "refused", "target process itself"),
    ({"suspect": "sshd"}, "refused", "never paused"),
    ({"suspect": "init"}, "refused", "never paused"),
    ({"suspect": "nosuchd"}, "refused", "allowlist"),
    ({"suspect": "stamon", "window_s": MAX_WINDOW_S + 1}, "invalid_input", "MAX_WINDOW_S = 60"),
])
async def test_refusals_pause_nothing(lab: VlabLayout, args: dict[str, object], kind: str,
                                      words: str) -> None:
    """The suspect policy (guardrails/suspects.py) refuses by name at the guard; unguarded, the
    tool's own checks of live DUT state still fail the call (not running, the target's pid...)."""
    rec = await _call(lab, args, guarded=True)  # the guard refuses first (or the schema does)
    assert not rec.ok and rec.error is not None
    assert rec.error.kind == kind and words in rec.error.message, rec.error
    rec = await _call(lab, args)  # the tool alone: live-state checks
    assert not rec.ok and rec.error is not None, rec
    for name in ("stad", "stamon"):
        assert _running(_pid(lab, name))


async def test_refuses_what_resolves_to_sshd_or_pid1(lab: VlabLayout, tmp_path: Path) -> None:
    """Names pass the checks, pids do not: the DUT's sshd (our session's ancestor) and pid 1."""
    dutd = int(lab.dutd_pid.read_text())
    dutd_comm = Path(f"/proc/{dutd}/comm").read_text().strip()
    init_comm = Path("/proc/1/comm").read_text().strip()
    (tmp_path / "one.pid").write_text("1\n")
    prof = LabProfile.from_file(lab.lab_toml)
    pidfiles = {**prof.target.pidfiles, dutd_comm: str(lab.dutd_pid), init_comm: str(tmp_path / "one.pid")}
    prof.target = prof.target.model_copy(update={"suspects": [dutd_comm, init_comm],
                                                 "pidfiles": pidfiles})
    for name, words in ((dutd_comm, "ancestor of our SSH session"), (init_comm, "pid 1")):
        rec = await _call(lab, {"suspect": name, "window_s": 1}, profile=prof)
        assert rec.error is not None and rec.error.kind == "refused", rec.error
        assert words in rec.error.message
    assert _state(dutd) not in "tT" and _tracer(dutd) == 0


async def test_helper_refuses_wrong_starttime(lab: VlabLayout) -> None:
    pid = _pid(lab, "stamon")
    prof = LabProfile.from_file(lab.lab_toml)
    async with open_lab(prof) as ctx:
        helper = await helper_programs.ensure(ctx.device, prof, "lw-pause")
        res = await ctx.device.exec([helper, str(pid), "12345", "1000"])
        assert res.exit_status == 2 and "start time differs" in res.stderr
        res = await ctx.device.exec([helper, "1", "0", "1000"])
        assert res.exit_status == 2 and "pid 1" in res.stderr
    assert _running(pid)


async def test_upload_is_cached_by_sha256(lab: VlabLayout) -> None:
    prof = LabProfile.from_file(lab.lab_toml)
    async with open_lab(prof) as ctx:
        path = await helper_programs.ensure(ctx.device, prof, "lw-pause")
        mtime = os.stat(path).st_mtime_ns
        assert await helper_programs.ensure(ctx.device, prof, "lw-pause") == path
        assert os.stat(path).st_mtime_ns == mtime, "re-uploaded although unchanged"
        Path(path).write_bytes(b"changed")
        await helper_programs.ensure(ctx.device, prof, "lw-pause")
        assert Path(path).read_bytes() != b"changed" and os.access(path, os.X_OK)


async def test_deadline_resumes_without_release(lab: VlabLayout) -> None:
    """Connection open, controller silent: the helper lets go at its own deadline -- not before
    it, and before a DUT-side `sleep` of twice the deadline, started beside it over the same
    connection, ends. An order, not a time: a helper that waited for a release, or read its
    deadline in another unit, would still hold the suspect when that sleep ends."""
    pid = _pid(lab, "stamon")
    start = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    deadline_s = 1.5
    prof = LabProfile.from_file(lab.lab_toml)
    async with open_lab(prof) as ctx:
        helper = await helper_programs.ensure(ctx.device, prof, "lw-pause")
        t0 = time.monotonic()
        task = asyncio.create_task(ctx.device.exec([helper, str(pid), start,
                                                    f"{deadline_s * 1000:.0f}"]))
        beside = asyncio.create_task(ctx.device.exec(["sleep", f"{2 * deadline_s:g}"]))
        try:
            done, _ = await asyncio.wait({task, beside}, return_when=asyncio.FIRST_COMPLETED)
            waited = time.monotonic() - t0
            assert task in done and beside not in done, \
                f"the helper still held pid {pid} when a sleep of twice its deadline ended"
            res = await task
        finally:
            task.cancel()  # no-op once it ended; else its channel closes and the helper lets go
            await asyncio.gather(task, beside, return_exceptions=True)
    assert res.exit_status == 0 and res.stdout.split() == ["paused", str(pid), "resumed", str(pid),
                                                           "deadline"]
    # the helper's exec spans its whole pause, which lasts its deadline: not shorter
    assert waited > deadline_s and _running(pid)


async def test_killing_the_helper_resumes(lab: VlabLayout) -> None:
    """SIGKILL to lw-pause itself: the kernel detaches its tracee (FACTS: verified, not assumed)."""
    pid = _pid(lab, "stamon")
    task = asyncio.create_task(_call(lab, {**SHORT, "window_s": 3}))
    await _until(lambda: not _running(pid), 10)
    paused_seen = time.monotonic()
    await asyncio.sleep(0.5)  # let the tool see the pause too, then pull it from under it
    helper = _tracer(pid)
    assert Path(f"/proc/{helper}/comm").read_text().strip() == "lw-pause"
    watch = _ResumeWatch(pid, "helper SIGKILLed -> running", paused_seen, 3)
    os.kill(helper, signal.SIGKILL)
    # the kernel detaches the dead tracer's tracee: running again before the 3 s window ends
    # (without that, only the tool's release after its window, or its SIGCONT, would free it)
    watch.took()
    rec = await task
    assert rec.ok and rec.result is not None, rec.error
    assert not rec.result["pause_held"] and rec.result["resumed"]
    assert rec.result["resumed_by"] == "helper exited"


_CHILD = """
import asyncio, sys
from labwarden.lab.config import LabProfile
from labwarden.tools import attribute
from labwarden.runtime.session import open_lab
async def main():
    async with open_lab(LabProfile.from_file(sys.argv[1]), guarded=False) as ctx:
        await attribute.run(ctx, attribute.AttributeInput.model_validate({ARGS}))
asyncio.run(main())
"""
"""The server in miniature: the tool called straight (the registry imports scipy, slow to start)."""


DEADLINE_SLACK_S = 0.5
"""What the helper's deadline bound adds for the helper's own wake-up and detach under load."""


async def _kill_server_once(lab: VlabLayout, pid: int, script: str, by_deadline: bool) -> float:
    """One kill -9 of the server mid-window. The suspect must run again before its window would
    have ended by itself, or -- `by_deadline` -- no later than the helper's own deadline: it set
    that deadline (window_s + MARGIN_S) before seizing, so before the test saw the pause; a
    `sleep` of that plus DEADLINE_SLACK_S, started then on this host (where the vlab's DUT runs),
    must still run when the suspect does."""
    child = subprocess.Popen([sys.executable, "-c", script, str(lab.lab_toml)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    beside: subprocess.Popen[bytes] | None = None
    try:
        await _until(lambda: not _running(pid) or child.poll() is not None, 60)
        paused_seen = time.monotonic()
        beside_s = DEAD_MAN["window_s"] + MARGIN_S + DEADLINE_SLACK_S
        if by_deadline:
            beside = subprocess.Popen(["sleep", f"{beside_s:g}"])
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        watch = _ResumeWatch(pid, "server SIGKILLed -> running" + " (by deadline)" * by_deadline,
                             paused_seen, DEAD_MAN["window_s"], beside, beside_s)
        child.kill()
        return watch.took()
    finally:
        child.kill()
        child.wait()
        if beside is not None:
            beside.kill()
            beside.wait()


async def test_server_killed_mid_window(lab: VlabLayout) -> None:
    """kill -9 of the process running the tool: nothing of the tool is left to release, so the
    DUT side must -- the helper lets go at the latest at its own deadline (the hang-up normally
    frees the suspect at once: test_server_killed_mid_window_hang_up_beats_the_window)."""
    pid = _pid(lab, "stamon")
    script = _CHILD.replace("{ARGS}", repr(DEAD_MAN))
    for _ in range(TRIALS):
        await _kill_server_once(lab, pid, script, by_deadline=True)
        assert _pid(lab, "stamon") == pid


async def test_server_killed_mid_window_hang_up_beats_the_window(lab: VlabLayout) -> None:
    """kill -9 of the process running the tool: its TCP connection closes, the DUT's sshd hangs
    up the helper's session, the helper detaches -- before the window would have ended by
    itself, typically in well under a second."""
    pid = _pid(lab, "stamon")
    script = _CHILD.replace("{ARGS}", repr(DEAD_MAN))
    for _ in range(TRIALS):
        await _kill_server_once(lab, pid, script, by_deadline=False)
        assert _pid(lab, "stamon") == pid


async def _drop_once(ctx: LabContext, pid: int) -> float:
    task = asyncio.create_task(call_tool(ctx, "attribute", DEAD_MAN))
    await _until(lambda: not _running(pid) or task.done(), 20)
    paused_seen = time.monotonic()
    assert not task.done(), task.result()
    conn = ctx.device._connection.current
    assert conn is not None
    watch = _ResumeWatch(pid, "connection dropped -> running", paused_seen, DEAD_MAN["window_s"])
    conn.abort()  # the TCP connection goes away as if the network dropped
    took = await asyncio.to_thread(watch.took)
    rec = await task  # the tool notices, reconnects, and confirms the resume
    assert rec.error is not None and rec.error.kind == "device", rec
    assert "SIGCONT" not in " ".join(rec.progress)
    return took


async def test_connection_dropped_mid_window(lab: VlabLayout) -> None:
    pid = _pid(lab, "stamon")
    prof = LabProfile.from_file(lab.lab_toml)
    async with open_lab(prof, guarded=False) as ctx:
        for _ in range(TRIALS):
            await _drop_once(ctx, pid)
    assert _pid(lab, "stamon") == pid and _running(pid)


async def test_drop_between_pause_and_window_is_an_error(lab: VlabLayout,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection drops after the pause began, as the window's measurement starts: the tool
    sees the helper's session lost, TERMs the helper over a fresh connection at once (the DUT
    may hang it up too) and gives up the window. That is no attribution: a device error, never
    an ok with a bogus drop_pct (the race test_connection_dropped_mid_window hits now and then,
    made certain)."""
    pid = _pid(lab, "stamon")
    real_cpu = attribute._cpu
    calls = 0

    async def drop_then_measure(jobs: Any, name: str, target: int, seconds: float, clk: int,
                                want: Any, notes: list[str]) -> float:
        nonlocal calls
        calls += 1
        if calls == 2:  # 1: the baseline before; 2: the window during the pause
            assert jobs.dev._connection.current is not None
            jobs.dev._connection.current.abort()
            await asyncio.sleep(0.05)
        return await real_cpu(jobs, name, target, seconds, clk, want, notes)

    monkeypatch.setattr(attribute, "_cpu", drop_then_measure)
    prof = LabProfile.from_file(lab.lab_toml)
    async with open_lab(prof, guarded=False) as ctx:
        rec = await call_tool(ctx, "attribute", {**SHORT, "window_s": 2})
    assert calls == 2 and rec.error is not None and rec.error.kind == "device", rec
    assert "broke during the window" in rec.error.message and "runs again" in rec.error.message
    assert _running(pid) and _pid(lab, "stamon") == pid


async def test_cancelled_attribution_resumes(lab: VlabLayout) -> None:
    pid = _pid(lab, "stamon")
    task = asyncio.create_task(_call(lab, LONG))
    await _until(lambda: not _running(pid), 10)
    watch = _ResumeWatch(pid, "task cancelled -> running", time.monotonic(), LONG["window_s"])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _running(pid), "the cancelled call returned with its suspect still stopped"
    watch.took()
