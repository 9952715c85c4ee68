"""The guard's corpus of bad calls: every one refused with its code, the DUT unchanged (checked
on the vlab's real files and processes), and every refusal present in the transcript."""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from labwarden.guardrails.lease import Lease
from labwarden.lab import uci
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools.context import LabContext
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import procs, rpc, tuning
from labwarden.vlab.layout import VlabLayout

from .conftest import uprobes_reason, vlab_probes
from .tooling import baseline

pytestmark = pytest.mark.anyio




def dut_snapshot(layout: VlabLayout) -> dict[str, Any]:
    """Everything a refused call must leave as it was."""
    files = {}
    for base in (layout.config_dir, layout.sysfs, layout.rootfs, layout.overlay):
        for p in sorted(base.rglob("*")):
            if p.is_file():
                files[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    services = {}
    for name in ("stad", "stamon"):
        pid = procs.read_pid(layout.run_dir / f"{name}.pid")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if pid else None
        services[name] = (pid, state)
    # this vlab's probes only: tracefs is kernel-wide, and other tests' labs probe their own DUTs
    # meanwhile (make test runs the light modules on several workers)
    probes = vlab_probes(layout) if uprobes_reason() is None else []
    return {"files": files, "services": services, "stations": rpc.count(layout.socket)["total"],
            "probes": probes,
            "builds": sorted(p.name for p in layout.builds.iterdir()),
            "lease": (layout.run_dir / "labwarden.lease").exists(),
            "flashed": BoardState.load(layout.data_dir).flashed_build}


def profile_with(layout: VlabLayout, **policy: Any) -> LabProfile:
    data = tomllib.loads(layout.lab_toml.read_text())
    data["policy"].update(policy)
    return LabProfile.from_dict(data, layout.lab_toml)


@pytest.fixture
async def session(lab: VlabLayout) -> AsyncIterator[LabContext]:
    ok = await _verified(lab)
    assert ok
    async with open_lab(profile_with(lab, heal=[]), client="test") as ctx:
        yield ctx


async def _verified(lab: VlabLayout) -> bool:
    async with open_lab(LabProfile.from_file(lab.lab_toml), guarded=False) as ctx:
        rec = await call_tool(ctx, "fingerprint_verify", {"build_id": baseline(lab)})
        return bool(rec.ok and rec.result and rec.result["verified"])


def _escape_link(lab: VlabLayout) -> str:
    link = lab.data_dir / "patches" / "innocent.patch"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to("/etc/passwd")
    return str(link)


def _lookalike(lab: VlabLayout) -> str:
    evil = lab.data_dir / "patches-evil" / "x.patch"
    evil.parent.mkdir(parents=True, exist_ok=True)
    evil.write_text("diff --git a/x b/x\n")
    return str(evil)


META = ["; reboot", "$(reboot)", "`id`", "| cat /etc/shadow", "&& rm -rf /", "\nreboot", "x\x00y",
        "a'b", 'a"b', "*", "> /etc/passwd"]
DASH = ["--upload-pack=touch /tmp/pwned", "-rf", "--help"]

# (tool, args, expected code); path-valued args are callables of the lab
CORPUS: list[tuple[str, Any, str]] = [
    ("build", {"patches": ["../../etc/passwd"]}, "unsafe_path"),
    ("build", {"patches": ["/etc/passwd"]}, "unsafe_path"),
    ("build", {"patches": ["~/.ssh/id_rsa"]}, "unsafe_path"),
    ("build", lambda lab: {"patches": [str(lab.data_dir / "patches" / ".." / ".." / "lab.toml")]},
     "unsafe_path"),
    ("build", lambda lab: {"patches": [_escape_link(lab)]}, "unsafe_path"),
    ("build", lambda lab: {"patches": [_lookalike(lab)]}, "unsafe_path"),
    *[("build", {"ref": "HEAD" + m}, "unsafe_argument") for m in META],
    *[("build", {"ref": d}, "unsafe_argument") for d in DASH],
    ("build", {"patches": ["0901; reboot"]}, "unsafe_argument"),
    ("build", {"patches": ["-p0"]}, "unsafe_argument"),
    *[("flash", {"build_id": "abc" + m}, "unsafe_argument") for m in META[:4]],
    ("flash", {"build_id": "--help"}, "unsafe_argument"),
    ("fingerprint_verify", {"build_id": "$(reboot)"}, "unsafe_argument"),
    ("compare", {"baseline": "swp-1 && reboot", "candidate": "swp-2"}, "unsafe_argument"),
    ("gate_check", {"sweep_id": "\nreboot"}, "unsafe_argument"),
    ("symbolize", {"profile_id": "../prof"}, "unsafe_argument"),
    ("attribute", {"suspect": "stamon; kill -9 1"}, "unsafe_argument"),
    ("attribute", {"suspect": "-9"}, "unsafe_argument"),
    ("attribute", {"suspect": "init"}, "suspect_not_allowed"),
    ("attribute", {"suspect": "sshd"}, "suspect_not_allowed"),
    ("attribute", {"suspect": "python3"}, "suspect_not_allowed"),
    ("attribute", {"suspect": "stad"}, "suspect_not_allowed"),
    ("attribute", {"suspect": "lw-pause"}, "suspect_not_allowed"),
    ("attribute", {"suspect": "dropbear"}, "suspect_not_allowed"),
    ("rm_rf", {}, "tool_unknown"),
    ("associate", {"stations": -5}, "invalid_input"),
]


async def test_static_corpus(lab: VlabLayout, session: LabContext) -> None:
    assert len(CORPUS) >= 40
    before = dut_snapshot(lab)
    for tool, args, code in CORPUS:
        args = args(lab) if callable(args) else args
        rec = await call_tool(session, tool, args)
        assert not rec.ok and rec.error is not None, (tool, args)
        assert rec.error.code == code, (tool, args, rec.error)
        assert rec.error.remedy, (tool, args)
    assert dut_snapshot(lab) == before
    refusals = _refusals(session)
    assert len(refusals) == len(CORPUS)
    assert [r["code"] for r in refusals] == [c for _, _, c in CORPUS]


def _refusals(ctx: LabContext) -> list[dict[str, Any]]:
    assert ctx.transcript is not None and ctx.session_id is not None
    out = []
    for ev in ctx.transcript.events(ctx.session_id):
        body = ev.event.model_dump()
        if body["kind"] == "guard_decision" and body["decision"] == "refuse":
            out.append(body)
    return out


def _set_governor(lab: VlabLayout, gov: str) -> Callable[[], None]:
    tuning.set_governor(lab, gov)
    return lambda: tuning.set_governor(lab, "performance")


def _disable_vap(lab: VlabLayout, vap: str) -> Callable[[], None]:
    path = lab.config_dir / "wireless"
    secs = uci.load(path)
    uci.get(secs, vap).options["disabled"] = "1"
    uci.save(path, secs)

    def undo() -> None:
        again = uci.load(path)
        uci.get(again, vap).options["disabled"] = "0"
        uci.save(path, again)
    return undo


def _board(lab: VlabLayout, health: str) -> Callable[[], None]:
    state = BoardState.load(lab.data_dir)
    saved = state.model_copy()
    state.board_health = health  # type: ignore[assignment]
    state.health_reason = "set by the test"
    state.save(lab.data_dir)
    return lambda: saved.save(lab.data_dir)


def _unverified(lab: VlabLayout) -> Callable[[], None]:
    state = BoardState.load(lab.data_dir)
    saved = state.model_copy()
    state.record_flash(saved.flashed_build or "x")
    state.save(lab.data_dir)
    return lambda: saved.save(lab.data_dir)


MEASURE = {"stations": 18, "window_s": 2, "reps": 1}


async def test_state_corpus(lab: VlabLayout, session: LabContext) -> None:
    """Refusals that depend on the lab's state; each setup is undone after its call."""
    other = Lease(session.device, str(lab.run_dir), "mallory@elsewhere/s1")
    cases: list[tuple[str, dict[str, Any], str, Callable[[], Callable[[], None]]]] = [
        ("measure", MEASURE, "env_unpinned", lambda: _set_governor(lab, "schedutil")),
        ("sweep", {"densities": [18], "reps": 1, "window_s": 2}, "env_unpinned",
         lambda: _set_governor(lab, "powersave")),
        ("measure", MEASURE, "topology_drifted", lambda: _disable_vap(lab, "vap4")),
        ("measure", MEASURE, "fingerprint_unverified", lambda: _unverified(lab)),
        ("sweep", {"densities": [18], "reps": 1, "window_s": 2}, "fingerprint_unverified",
         lambda: _unverified(lab)),
        ("associate", {"stations": 18}, "board_bad", lambda: _board(lab, "bad")),
        ("flash", {"build_id": baseline(lab)}, "board_bad", lambda: _board(lab, "bad")),
        ("build", {"patches": ["0901"]}, "board_bad", lambda: _board(lab, "bad")),
        ("associate", {"stations": 18}, "board_unknown", lambda: _board(lab, "unknown")),
        ("measure", MEASURE, "board_unknown", lambda: _board(lab, "unknown")),
    ]
    before = dut_snapshot(lab)
    n_before = len(_refusals(session))
    for tool, args, code, setup in cases:
        undo = setup()
        try:
            rec = await call_tool(session, tool, args)
        finally:
            undo()
        assert rec.error is not None and rec.error.code == code, (tool, code, rec.error)
        assert dut_snapshot(lab) == before, (tool, code)
    # a lease held by someone else: refused, naming the holder and the expiry
    assert await other.acquire() is None
    try:
        for tool, args in (("associate", {"stations": 18}), ("flash", {"build_id": baseline(lab)})):
            rec = await call_tool(session, tool, args)
            assert rec.error is not None and rec.error.code == "lease_held"
            assert "mallory@elsewhere" in rec.error.message and "expires in" in rec.error.message
    finally:
        await other.release()
    refusals = _refusals(session)[n_before:]
    assert [r["code"] for r in refusals] == [c for _, _, c, _ in cases] + ["lease_held"] * 2


async def test_budget_exceeded(lab: VlabLayout) -> None:
    prof = profile_with(lab, heal=[], budgets={"tool_calls": 2, "flashes_per_hour": 1})
    async with open_lab(prof, client="test") as ctx:
        assert (await call_tool(ctx, "lab_status", {})).ok
        assert (await call_tool(ctx, "lab_status", {})).ok
        rec = await call_tool(ctx, "lab_status", {})
        assert rec.error is not None and rec.error.code == "budget_exceeded"
        assert "tool calls: 2 of 2" in rec.error.message
    prof = profile_with(lab, budgets={"tokens": 1000, "dollars": 1.0})
    async with open_lab(prof, client="test") as ctx:
        assert ctx.guard is not None
        ctx.guard.budget.add_model_usage(tokens=1500, dollars=0.1)
        rec = await call_tool(ctx, "lab_status", {})
        assert rec.error is not None and rec.error.code == "budget_exceeded" and "tokens" in rec.error.message


async def test_refusals_survive_in_the_store(lab: VlabLayout) -> None:
    """The transcript on disk (not just in memory) holds the refusal, chained."""
    async with open_lab(profile_with(lab, heal=[]), client="test") as ctx:
        await call_tool(ctx, "attribute", {"suspect": "init"})
        sid = ctx.session_id
    assert sid is not None
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        kinds = [e.event.kind for e in store.events(sid)]
    assert kinds[0] == "session_started" and kinds[-1] == "session_ended"
    assert "guard_decision" in kinds and "tool_called" in kinds
    assert os.path.getsize(lab.data_dir / "transcripts.db") > 0


async def test_calls_that_change_the_dut_are_fsynced_before_they_return(lab: VlabLayout) -> None:
    """A read-only call is committed without an fsync (synchronous=NORMAL: it survives kill -9,
    see test_transcripts_crash); a call that changes the DUT is committed with one (FULL);
    [policy] transcript_fsync = "every_call" makes every commit durable."""
    assert await _verified(lab)

    def level(ctx: LabContext) -> int:
        assert ctx.transcript is not None
        return int(ctx.transcript.db.execute("PRAGMA synchronous").fetchone()[0])

    async with open_lab(profile_with(lab, heal=[]), client="test") as ctx:
        assert (await call_tool(ctx, "lab_status", {})).ok
        assert level(ctx) == 1
        assert (await call_tool(ctx, "associate", {"stations": 0})).ok
        assert level(ctx) == 2
        assert (await call_tool(ctx, "lab_status", {})).ok
        assert level(ctx) == 1
    async with open_lab(profile_with(lab, heal=[], transcript_fsync="every_call"), client="test") as ctx:
        assert (await call_tool(ctx, "lab_status", {})).ok
        assert level(ctx) == 2


async def test_a_tool_that_raises_is_recorded_as_internal_not_cancelled(
        lab: VlabLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in a tool (an exception no tool error names) propagates to the caller, and the
    transcript says what it was: kind "internal" with the exception, never "cancelled"."""
    from pydantic import BaseModel

    from labwarden.core.spec import ToolSpec
    from labwarden.tools import registry

    class Empty(BaseModel):
        pass

    async def broken(ctx: object, inp: Empty) -> Empty:
        raise ZeroDivisionError("the tool divided by zero")

    monkeypatch.setitem(registry.TOOLS, "broken", ToolSpec(
        name="broken", description="raises (test)", input=Empty, output=Empty, run=broken,
        effect="read_only", idempotent=True))
    async with open_lab(profile_with(lab, heal=[]), client="test") as ctx:
        with pytest.raises(ZeroDivisionError):
            await call_tool(ctx, "broken", {})
        sid = ctx.session_id
    assert sid is not None
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        calls = [e.event for e in store.events(sid) if e.event.kind == "tool_called"]
    assert calls[-1].call.tool == "broken" and not calls[-1].call.ok  # type: ignore[union-attr]
    error = calls[-1].call.error  # type: ignore[union-attr]
    assert error is not None and error.kind == "internal"
    assert "ZeroDivisionError: the tool divided by zero" in error.message
