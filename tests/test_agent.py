"""The agent (`labwarden chat`, `labwarden loop`) against a real vlab.

The only fake is the model: a local stand-in of the Messages API (tests/messages_standin.py)
answers with scripted tool_use turns. Tools, guard, transcript, the lab and the anthropic SDK
(streaming, retries through our code) are real.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from labwarden.agent import overnight, summary
from labwarden.agent.calibrated import CalibrationPolicy
from labwarden.agent.loop import RESUMED, STATE, Limits
from labwarden.agent.model import Model, ModelOptions
from labwarden.agent.overnight import parse_until
from labwarden.cli.app import app
from labwarden.core.call import ToolCallRecord
from labwarden.core.decision import Verdict
from labwarden.core.events import ModelCall, Note, ToolCalled
from labwarden.core.measurements import SweepPoint
from labwarden.lab.config import LabProfile
from labwarden.results.build import BuildOutput
from labwarden.results.compare import CompareOutput, PointDelta
from labwarden.results.gate_check import GateName, GateOutput
from labwarden.results.sweep import SweepOutput
from labwarden.tools import registry
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout

from .messages_standin import MessagesStandIn, ToolUse, Turn, from_result, last_result

LABWARDEN = str(Path(sys.executable).parent / "labwarden")
SWEEP = {"densities": [6, 12], "reps": 1, "window_s": 2, "perf": False}
runner = CliRunner()


@pytest.fixture(scope="module")
def vlab_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VlabLayout]:
    root = tmp_path_factory.mktemp("agent")
    try:
        control.up(root)
        yield VlabLayout.at(root)
    finally:
        control.down(root)


@pytest.fixture(scope="module")
def lab(vlab_root: VlabLayout) -> Path:
    """The vlab's profile without uprobe counters, so the agent tests do not depend on tracefs;
    counting is the measure tool's business, tested there. Everything else is the vlab's own."""
    text = vlab_root.lab_toml.read_text()
    lines = [("uprobes = {}" if ln.startswith("uprobes =") else ln) for ln in text.splitlines()]
    assert lines != text.splitlines(), "the vlab profile names no uprobes any more"
    path = vlab_root.lab_toml.with_name("lab-agent.toml")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-standin")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def _store(lab: Path) -> TranscriptStore:
    return TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db")


def _newest(store: TranscriptStore, client: str) -> str:
    return next(s.id for s in store.sessions() if s.client == client)


def _events(store: TranscriptStore, sid: str, kind: type) -> list[Any]:
    """The session's events of `kind`; of tool calls, the agent's own (a sweep's windows are
    nested calls under it)."""
    return [e.event for e in store.events(sid) if isinstance(e.event, kind)
            and not (isinstance(e.event, ToolCalled) and e.event.parent_id is not None)]


def _strip_cache(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache(v) for v in value]
    return value


def test_chat_drives_tools_and_prices_every_call(lab: Path) -> None:
    turns = [
        Turn(text="Let me look at the lab first.", tools=[ToolUse("lab_status")],
             input_tokens=1000, output_tokens=200, cache_5m=3000),
        Turn(tools=[ToolUse("associate", {"stations": 6})],
             input_tokens=50, output_tokens=80, cache_read=3000, cache_5m=1400),
        Turn(text="The board is good and 6 clients are held.",
             input_tokens=40, output_tokens=30, cache_read=4400, cache_1h=500),
    ]
    # claude-sonnet-4-6 (the default) is priced as claude-sonnet-4: $3/M input, $15/M output, $3.75/M 5-minute
    # cache write, $6/M 1-hour cache write, $0.30/M cache read.
    expected = [
        (1000 * 3 + 200 * 15 + 3000 * 3.75) / 1e6,  # = 0.01725
        (50 * 3 + 80 * 15 + 3000 * 0.30 + 1400 * 3.75) / 1e6,  # = 0.0075
        (40 * 3 + 30 * 15 + 4400 * 0.30 + 500 * 6) / 1e6,  # = 0.00489
    ]
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["chat", "--lab", str(lab), "--base-url", api.url],
                            input="How is the lab?\n")  # then end of input: the chat ends
    assert res.exit_code == 0, res.output
    out = res.output
    assert "Let me look at the lab first." in out and "The board is good and 6 clients are held." in out
    assert "→ lab_status" in out and "✓ lab_status" in out and "✓ associate" in out
    # the running line after each call, then the session's totals
    assert f"tokens in 1,000 / out 200 / cache write 3,000 read 0, ${expected[0]:.4f}" in out
    totals = f"tokens in 1,090 / out 310 / cache write 4,900 read 7,400, ${sum(expected):.4f}"
    assert f"3 model calls, {totals}" in out

    first = api.requests[0]
    assert first["stream"] is True and first["model"] == "claude-sonnet-4-6"
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "Work like the engineers of the WiFi-daemon field study" in first["system"][0]["text"]
    listed = [spec.name for spec in registry.listed(LabProfile.from_file(lab))]
    assert [t["name"] for t in first["tools"]] == listed  # the vlab's: no traffic tools
    assert "associate" in listed and "saturate" not in listed
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["tools"][0]["input_schema"]["type"] == "object"
    assert last_result(api.requests[1])["target_process"] == "stad"
    assoc = last_result(api.requests[2])
    assert assoc["datamodel_count"] == 6 and sum(assoc["per_radio"]) == 6
    assert "holding 6 clients" in out  # the tool's progress, shown as it ran

    with _store(lab) as store:
        sid = _newest(store, "chat")
        calls = _events(store, sid, ModelCall)
        tools = _events(store, sid, ToolCalled)
        states = [n for n in _events(store, sid, Note) if n.author == STATE]
    assert [c.cost_usd for c in calls] == pytest.approx(expected, rel=1e-12)
    assert [c.usage.input_tokens for c in calls] == [1000, 50, 40]
    assert [c.request_id for c in calls] == ["req_standin_001", "req_standin_002", "req_standin_003"]
    assert [c.stop_reason for c in calls] == ["tool_use", "tool_use", "end_turn"]
    assert [(t.call.tool, t.call.ok) for t in tools] == [("lab_status", True), ("associate", True)]
    rebuilt = [m for n in states for m in json.loads(n.text)["messages"]]
    assert _strip_cache(api.requests[2]["messages"]) == rebuilt[:-1]  # the transcript alone rebuilds it
    assert rebuilt[-1]["content"][0]["text"] == "The board is good and 6 clients are held."


def test_loop_builds_flashes_verifies_sweeps_and_retries_lost_connections(lab: Path,
                                                                         tmp_path: Path) -> None:
    turns = [
        Turn(text="Building the baseline.", tools=[ToolUse("build", {})]),
        Turn(tools=[ToolUse("flash", from_result("build_id"))], drop="midstream"),
        Turn(tools=[ToolUse("fingerprint_verify", from_result("build_id"))], drop="before"),
        Turn(tools=[ToolUse("sweep", SWEEP)]),
        Turn(text="DONE: baseline measured at 6 and 12 clients; nothing patched."),
    ]
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(lab), "--base-url", api.url,
                                  "--goal", "measure the baseline", "--budget-usd", "5",
                                  "--until", "23:59", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert api.dropped == 2 and len(api.requests) == 7  # each lost connection was retried once
    assert "retry 1" in res.output
    summary = (tmp_path / "out" / "summary.md").read_text()
    report = (tmp_path / "out" / "report.html").read_text()
    assert f"summary: {tmp_path / 'out' / 'summary.md'}" in res.stdout
    with _store(lab) as store:
        sid = _newest(store, "loop")
        tools = _events(store, sid, ToolCalled)
        calls = _events(store, sid, ModelCall)
    assert [(t.call.tool, t.call.ok) for t in tools] == [
        ("build", True), ("flash", True), ("fingerprint_verify", True), ("sweep", True)], \
        [t.call.error for t in tools]
    sweep_id = tools[-1].call.result["sweep_id"]
    assert [c.stop_reason for c in calls].count("interrupted") == 1  # the cut stream was billed
    assert len(calls) == 6
    assert "**Stopped:** done" in summary and "measure the baseline" in summary
    assert sweep_id in summary and "DONE: baseline measured" in summary
    total = sum(c.cost_usd for c in calls)
    assert f"${total:.4f}" in summary
    assert "<html" in report.lower() and sid in report


def test_budget_stop_ends_the_loop_with_a_summary(lab: Path, tmp_path: Path) -> None:
    turns = [Turn(tools=[ToolUse("lab_status")]), Turn(text="DONE: never reached")]
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(lab), "--base-url", api.url,
                                  "--goal", "anything", "--budget-usd", "0.001",
                                  "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert len(api.requests) == 1  # 1000 in + 200 out = $0.006 > $0.001: no second call
    summary = (tmp_path / "summary.md").read_text()
    assert "**Stopped:** budget -- dollars: $0.0060 of $0.0010 spent" in summary
    assert (tmp_path / "report.html").exists()


def test_killed_loop_resumes_from_the_transcript(lab: Path, tmp_path: Path) -> None:
    turns = [
        Turn(text="Status first.", tools=[ToolUse("lab_status")]),
        Turn(tools=[ToolUse("associate", {"stations": 6})], input_tokens=500),  # takes the lease
        Turn(hold=True),  # the 3rd call never answers: the process is killed during it
        Turn(tools=[ToolUse("associate", {"stations": 0})], input_tokens=700),  # needs the lease again
        Turn(text="DONE: resumed and finished.", input_tokens=100),
    ]
    with MessagesStandIn(turns) as api:
        proc = subprocess.Popen([LABWARDEN, "loop", "--skip-calibration", "--lab", str(lab),
                                 "--base-url", api.url, "--goal", "survive a crash", "--budget-usd", "1"],
                                env={**os.environ, "ANTHROPIC_API_KEY": "sk-standin"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            api.wait_requests(3, timeout=60)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        with _store(lab) as store:
            killed = _newest(store, "loop")
            assert store.session(killed)["ended_at"] is None
        res = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(lab), "--base-url", api.url,
                                  "--resume", killed, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert len(api.requests) == 5
    before, after = (_strip_cache(api.requests[i]["messages"]) for i in (2, 3))
    assert after[:-1] == before[:-1] and len(before) == 5  # goal, 2 x (tool_use, tool_result)
    assert after[-1]["content"][:-1] == before[-1]["content"]
    assert after[-1]["content"][-1] == {"type": "text", "text": RESUMED}
    assert "survive a crash" in api.requests[3]["system"][0]["text"]  # the goal came back too
    with _store(lab) as store:
        sid = _newest(store, "loop")
        notes = [n.text for n in _events(store, sid, Note) if n.author == "labwarden"]
        tools = _events(store, sid, ToolCalled)
    assert sid != killed and any(f"resumes session {killed}" in n for n in notes)
    # the dead session's lease (TTL 300 s) is taken over, not waited for
    assert any("took over the DUT lease of" in n and killed in n for n in notes)
    assert [(t.call.tool, t.call.ok) for t in tools] == [("associate", True)], tools[0].call.error
    summary = (tmp_path / "summary.md").read_text()
    assert "**Stopped:** done" in summary and killed in summary and "resumed after an interruption" in summary
    # both sessions' model calls are in the total (the held call never completed, so it has no
    # usage): 1000 in + 200 out, 500 in + 200 out, then resumed 700 + 100 in, 2 x 200 out, at $3 / $15 per M
    total = (1000 * 3 + 200 * 15) + (500 * 3 + 200 * 15) + (700 * 3 + 200 * 15) + (100 * 3 + 200 * 15)
    assert f"${total / 1e6:.4f}" in summary


def test_guard_refusals_reach_the_model_and_a_budget_refusal_stops(lab: Path, tmp_path: Path) -> None:
    budgeted = lab.with_name("lab-budget.toml")
    # the refused call counts too (issue 15): attribute (refused) and lab_status use the two
    budgeted.write_text(lab.read_text() + "\n[policy.budgets]\ntool_calls = 2\n")
    turns = [Turn(tools=[ToolUse("attribute", {"suspect": "init"}), ToolUse("lab_status"),
                         ToolUse("lab_status")]),
             Turn(text="DONE: never reached")]
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(budgeted), "--base-url", api.url,
                                  "--goal", "anything", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert len(api.requests) == 1
    summary = (tmp_path / "summary.md").read_text()
    assert "**Stopped:** budget -- the guard refused lab_status: tool calls: 2 of 2 used" in summary
    with _store(lab) as store:
        sid = _newest(store, "loop")
        states = [n for n in _events(store, sid, Note) if n.author == STATE]
    results = json.loads(states[-1].text)["messages"][-1]["content"]
    refused = json.loads(results[0]["content"][0]["text"])
    assert results[0]["is_error"] and refused["code"] == "suspect_not_allowed" and refused["remedy"]
    assert "is_error" not in results[1] and json.loads(results[1]["content"][0]["text"])["target_process"]
    over = json.loads(results[2]["content"][0]["text"])
    assert results[2]["is_error"] and over["code"] == "budget_exceeded"


@pytest.mark.parametrize("door", [["chat", "-m", "hi"], ["loop", "--skip-calibration", "--goal", "anything"]])
def test_no_api_key_is_a_clear_error_before_the_lab_opens(lab: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          door: list[str]) -> None:
    """No credentials anywhere the SDK looks (its env vars; an empty home stands for the profiles
    on disk): `error:`/`remedy:` naming ANTHROPIC_API_KEY, exit 1, no traceback; no request is
    sent and no transcript session is started (the lab is never opened)."""
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR",
                "ANTHROPIC_IDENTITY_TOKEN", "ANTHROPIC_IDENTITY_TOKEN_FILE",
                "ANTHROPIC_FEDERATION_RULE_ID", "ANTHROPIC_ORGANIZATION_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # the SDK's profiles live in ~/.config/anthropic
    with _store(lab) as store:
        before = len(store.sessions())
    with MessagesStandIn([Turn(text="never reached")]) as api:
        res = runner.invoke(app, [door[0], "--lab", str(lab), "--base-url", api.url, *door[1:]])
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit), res.exception  # typer.Exit, not a traceback
    assert "error: no API key: ANTHROPIC_API_KEY is not set" in res.output
    assert "remedy: export ANTHROPIC_API_KEY=" in res.output
    assert api.requests == []
    with _store(lab) as store:
        assert len(store.sessions()) == before


def _called(tool: str, args: dict[str, Any], result: BaseModel) -> ToolCalled:
    """A client's call as the transcript stores it: its result is the tool's output model, dumped."""
    return ToolCalled.of(ToolCallRecord(tool=tool, args=args, ok=True,
                                        result=result.model_dump(mode="json")))


def _build(build_id: str, patches: list[str]) -> ToolCalled:
    return _called("build", {"patches": patches}, BuildOutput(
        build_id=build_id, git_hash="0" * 40, artifacts=[], image="image.tar", symfs="symfs",
        cached=False, log_tail=[]))


def _sweep(sid: str, build: str, cpu: list[float]) -> ToolCalled:
    return _called("sweep", {}, SweepOutput(
        sweep_id=sid, label=None, build_id=build, cleanup_count=0, idle_note=None, points=[
            SweepPoint(stations=n, profile_id=f"prof-{n:012x}", cpu_mean=c, cpu_stdev=0.1,
                       cpu_per_rep=[c], idle_cpu_mean=None, counters={}, rss_kb=1000,
                       per_radio=[n], clients_held=True)
            for n, c in zip([18, 60, 114], cpu, strict=True)]))


def _compare(a: str, b: str, verdict: Verdict, means: tuple[float, float]) -> ToolCalled:
    delta = means[1] - means[0]
    return _called("compare", {}, CompareOutput(
        baseline=a, candidate=b, baseline_build=None, candidate_build=None, verdict=verdict,
        deltas=[PointDelta(stations=114, baseline_mean=means[0], candidate_mean=means[1],
                             delta_pp=delta, delta_pct=100 * delta / means[0], p_value=0.001,
                             ci95_pp=None, verdict=verdict)]))


def _gates(sid: str, failed: list[GateName]) -> ToolCalled:
    return _called("gate_check", {}, GateOutput(sweep_id=sid, passed=not failed, failed=failed,
                                                gates=[]))


def test_summary_keeps_only_what_improved_and_passed_the_gates(tmp_path: Path) -> None:
    """Kept/dropped come from the tool results in the transcript, not from the model's words."""
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("loop")
        for ev in [
            _build("base", []),
            _sweep("swp-a", "base", [10.0, 20.0, 30.0]),
            _build("b0901", ["0901"]),
            _sweep("swp-b", "b0901", [7.0, 14.0, 20.0]),
            _compare("swp-a", "swp-b", "improved", (30.0, 20.0)),
            _gates("swp-b", []),
            _build("b0905", ["0905"]),
            _sweep("swp-c", "b0905", [10.0, 20.0, 30.1]),
            _compare("swp-a", "swp-c", "same", (30.0, 30.1)),
            _gates("swp-c", []),
            _build("b0999", ["0999"]),
            _sweep("swp-d", "b0999", [5.0, 4.0, 3.0]),
            _compare("swp-a", "swp-d", "improved", (30.0, 3.0)),
            _gates("swp-d", ["cpu_monotonic"]),
        ]:
            store.append(sid, ev)
        md = summary.markdown(store, [sid], goal="lower CPU", stop="done", detail="declared done",
                              final_text="DONE: kept 0901, 0905 and 0999 too")
    kept = md.split("## Kept")[1].split("## Dropped")[0]
    dropped = md.split("## Dropped")[1].split("## Sweeps measured")[0]
    assert "b0901 (patches 0901)" in kept
    assert "30.00% -> 20.00% at 114 clients (-10.00 pp, -33.3%, p=0.001)" in kept
    assert "0905" not in kept and "0999" not in kept
    assert "b0905 (patches 0905)" in dropped and "compare: same" in dropped
    assert "b0999 (patches 0999)" in dropped and "gates failed: cpu_monotonic" in dropped
    assert "> DONE: kept 0901, 0905 and 0999 too" in md  # quoted as the model's claim


def test_until_is_local_time_today_or_tomorrow() -> None:
    now = datetime(2026, 11, 22, 23, 0).astimezone()
    assert parse_until("23:30", now) == now.replace(minute=30)
    assert parse_until("06:30", now) == (now + timedelta(days=1)).replace(hour=6, minute=30)
    with pytest.raises(ValueError):
        parse_until("soon", now)


def test_a_fleet_kickoff_asks_for_a_queue_longer_than_the_places() -> None:
    """On a fleet the kickoff names the places and asks for QUEUE_PER_PLACE experiments per
    place in a turn (a turn ends with its last experiment: one per place leaves the others idle
    while the longest finishes); one lab's kickoff says nothing of places."""
    limits = Limits(budget_usd=1.0)
    text = overnight.kickoff("g", limits, ["vlab-0", "vlab-1"])
    assert "fleet of 2 places (vlab-0, vlab-1)" in text
    assert f"about {overnight.QUEUE_PER_PLACE} per place" in text
    assert f"(here {2 * overnight.QUEUE_PER_PLACE})" in text
    assert overnight.QUEUE_PER_PLACE > 1
    alone = overnight.kickoff("g", limits)
    assert "place" not in alone and "Goal: g" in alone


def _library_loop(lab: Path, api: MessagesStandIn, goal: str, out: Path, *,
                  until: datetime | None = None) -> overnight.LoopResult:
    """The loop's library door with fast backoff (the CLI's is 1 s doubling to 60 s)."""
    model = Model(ModelOptions(base_url=api.url, api_key="sk-standin", backoff_s=0.02,
                               max_backoff_s=0.1))
    limits = Limits(budget_usd=1.0, until=until, max_turns=10)
    return asyncio.run(overnight.run_loop(LabProfile.from_file(lab), model, goal=goal, limits=limits,
                                          out_dir=out, resume=None,
                                          calibration=CalibrationPolicy(skip=True)))


def test_the_loop_retries_the_api_until_its_deadline_not_a_fixed_count(lab: Path, tmp_path: Path) -> None:
    """An outage of 12 lost connections in a row (more than the 4 retries a chat gets) is waited
    out; one that outlasts the deadline ends the run as api_unavailable, at the deadline."""
    turns = [Turn(tools=[ToolUse("lab_status")], drop="before", drops=12),
             Turn(text="DONE: survived the outage")]
    with MessagesStandIn(turns) as api:
        res = _library_loop(lab, api, "outlast an outage", tmp_path / "a",
                            until=datetime.now().astimezone() + timedelta(minutes=5))
    assert res.outcome.stop == "done" and api.dropped == 12 and len(api.requests) == 14
    turns = [Turn(tools=[ToolUse("lab_status")], drop="before", drops=10_000)]
    with MessagesStandIn(turns) as api:
        deadline = datetime.now().astimezone() + timedelta(seconds=2)
        res = _library_loop(lab, api, "an outage longer than the night", tmp_path / "b", until=deadline)
        ended = datetime.now().astimezone()
    assert res.outcome.stop == "api_unavailable" and api.dropped > 12
    # at the deadline: not before it (a retry's backoff is at most 0.1 s here), and no retry
    # after it -- an order, not a time: a try starts only while the deadline is ahead, so at
    # most the one a loaded host delayed past it arrives later; a loop that retried on past its
    # deadline (or asked again after giving up) sends more
    assert ended >= deadline - timedelta(seconds=0.2)
    late = [t for t in api.arrived if t > deadline.timestamp()]
    assert len(late) <= 1, f"{len(late)} tries after the deadline"
    assert "**Stopped:** api_unavailable" in (tmp_path / "b" / "summary.md").read_text()


def test_the_same_command_line_resumes_a_crashed_loop_by_itself(lab: Path, tmp_path: Path) -> None:
    """No session id to copy: restarting `labwarden loop` with the same goal and lab finds the
    unfinished run and continues it; while that run's process lives it refuses to start a second
    one; once the run is done, the same command starts afresh."""
    goal = "resume by itself"
    args = ["loop", "--skip-calibration", "--lab", str(lab), "--goal", goal, "--budget-usd", "1"]
    turns = [Turn(tools=[ToolUse("lab_status")]), Turn(hold=True),
             Turn(text="DONE: resumed without being told which session."),
             Turn(text="DONE: a fresh run.")]
    with MessagesStandIn(turns) as api:
        proc = subprocess.Popen([LABWARDEN, *args, "--base-url", api.url],
                                env={**os.environ, "ANTHROPIC_API_KEY": "sk-standin"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            api.wait_requests(2, timeout=60)
            with _store(lab) as store:
                killed = _newest(store, "loop")
            alive = runner.invoke(app, [*args, "--base-url", api.url, "--out", str(tmp_path / "x")])
            assert alive.exit_code == 1 and "a loop with this goal is running" in alive.output
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        resumed = runner.invoke(app, [*args, "--base-url", api.url, "--out", str(tmp_path / "r")])
        assert resumed.exit_code == 0, resumed.output
        with _store(lab) as store:
            sid = _newest(store, "loop")
            notes = [n.text for n in _events(store, sid, Note) if n.author == "labwarden"]
        assert any(f"found unfinished run {killed}" in n for n in notes)
        assert any(f"resumes session {killed}" in n for n in notes)
        assert _strip_cache(api.requests[2]["messages"][-1]["content"][-1]) == {"type": "text",
                                                                                "text": RESUMED}
        again = runner.invoke(app, [*args, "--base-url", api.url, "--out", str(tmp_path / "n")])
        assert again.exit_code == 0, again.output
        with _store(lab) as store:
            fresh = _newest(store, "loop")
            assert not [n for n in _events(store, fresh, Note)
                        if n.author == "labwarden" and "resum" in n.text]
    assert len(api.requests) == 4
    assert "resumed after an interruption" in (tmp_path / "r" / "summary.md").read_text()


def test_max_turns_is_sized_from_the_budget() -> None:
    # the cheapest call at claude-sonnet-4-6's prices: 1,500 in, 300 out, 20,000 cache read
    floor = (1500 * 3 + 300 * 15 + 20_000 * 0.30) / 1e6
    assert overnight.turns_for(5.0, "claude-sonnet-4-6") == int(5.0 / floor)
    assert overnight.turns_for(0.01, "claude-sonnet-4-6") == 20  # never below the floor
    assert overnight.turns_for(1e6, "claude-sonnet-4-6") == 5000
    assert overnight.turns_for(None, "claude-sonnet-4-6") == overnight.TURNS_WITHOUT_BUDGET
