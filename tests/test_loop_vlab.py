"""The overnight loop writes and judges its own patches (issue [2/3]'s acceptance).

The stand-in Messages API (tests/messages_standin.py) scripts the model's turns; everything else is
real: `labwarden loop` on a real vlab, the tools through the guard, git apply and gcc, flashes,
windows measured with perf and uprobe counters, the transcript, the records, the report. The
scripted agent starts from lab_status (what the lab is), reads hal.c with the source tools, then
writes five patches:

- the station pull through the bulk path (hal_get_all_stations_bulk, never called today): kept,
  improved, every gate passed;
- the monitor polling half as often: refused as protected -- and, in a second run with the
  protection lifted, dropped by the offered-load gate;
- the brief reply losing a key: dropped by functional parity;
- one that does not compile: patch_submit answers with the compiler's lines;
- a no-op: "same" by the rule (at its first look on a quiet box; any undecided look before it
  added windows -- the adding itself is pinned in tests/test_abtest_schedule.py), so refuted.

A slower patch dropped as "regressed" is tests/test_loop_logfilt.py's (and, on the qlab,
bench/loop_throughput.py --lab-kind qlab's): one fewer experiment here keeps `make test` inside
its 30 minutes.

The same script on a lab without clients (the second firmware) is tests/test_loop_logfilt.py.

The morning report and summary list all of them with their numbers. Short windows (2 s), two
densities and the rule's cap keep it at a few minutes on 2 cores.

Every flash, verification, association and measurement inside an experiment is a nested call
(issue 24): the transcript holds each under the experiment's call, the flash budget counts each
flash -- the first test runs the kept candidate under `flashes_per_hour = 2` and sees it stopped
cleanly at its third.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import GuardDecision, ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.report.data import collect
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore
from labwarden.transcripts.timeline import of_session
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout

from .conftest import needs_uprobes, uprobes_reason
from .messages_standin import MessagesStandIn, ToolUse, Turn, from_result
from .patching import BROKEN, BULK, DROP_KEY, NO_OP, SLOW_MONITOR, change

runner = CliRunner()
QUICK = {"window_s": "2.0", "densities": "[30, 60]", "sweep_reps": "2", "max_windows": "9",
         "min_effect_pct": "10.0"}
"""The [decision] of these runs: 2 s windows, 30/60 clients; a no-op needs the equivalence
interval inside +-10% (2 s windows at 60 clients scatter by a few %), within 9 windows per arm."""
RULE_LOOKS = [3, 5, 7, 9]  # min_windows 3, step 2 (the vlab's), max_windows 9 (QUICK)


@pytest.fixture(scope="module")
def vlab_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VlabLayout]:
    reason = uprobes_reason() or (None if shutil.which("perf") else "perf is not installed")
    if reason and os.environ.get("CI") == "true":  # scripts/setup-system.sh mounts tracefs
        pytest.fail(f"uprobes unavailable on CI: {reason}")
    needs_uprobes()  # the offered load is counted by a uprobe on the RPC
    root = tmp_path_factory.mktemp("loopexp")
    try:
        control.up(root)
        yield VlabLayout.at(root)
    finally:
        control.down(root)


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-standin")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def profile(layout: VlabLayout, name: str, protected: list[str] | None = None) -> Path:
    text = layout.lab_toml.read_text()
    decision = text.index("[decision]")
    head, tail = text[:decision], text[decision:]
    for key, value in QUICK.items():
        tail, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", tail, count=1, flags=re.M)
        assert n == 1, key
    if protected is not None:
        head, n = re.subn(r"^protected = .*$", f"protected = {json.dumps(protected)}", head,
                          count=1, flags=re.M)
        assert n == 1
        if not protected:  # lifted whole: the monitor's build output is no longer protected either
            head, n = re.subn(r"^protected_artifacts = .*$", "protected_artifacts = []", head,
                              count=1, flags=re.M)
            assert n == 1
    path = layout.lab_toml.with_name(f"lab-{name}.toml")
    path.write_text(head + tail)
    return path


def submit(name: str, diff: str, **more: Any) -> ToolUse:
    return ToolUse("patch_submit", {"name": name, "diff": diff, **more})


def experiment() -> ToolUse:
    return ToolUse("experiment", from_result("patch_id", "patch"))


def calls(lab: Path) -> list[ToolCalled]:
    """The agent's calls of the loop's session (the nested ones are under them)."""
    return [e for e in session_calls(lab) if e.parent_id is None]


def session_calls(lab: Path) -> list[ToolCalled]:
    with TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions() if s.client == "loop")
        return [e.event for e in store.events(sid) if isinstance(e.event, ToolCalled)]


def under(events: list[ToolCalled], parent: ToolCalled) -> list[ToolCalled]:
    return [e for e in events if e.parent_id == parent.call.id]


def loop(lab: Path, turns: list[Turn], goal: str, out: Path) -> tuple[list[ToolCalled], float]:
    t0 = time.monotonic()
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration",
                                  "--lab", str(lab), "--base-url", api.url, "--goal", goal,
                                  "--budget-usd", "5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert len(api.requests) == len(turns)
    return calls(lab), time.monotonic() - t0


@pytest.mark.anyio
async def test_an_experiment_stops_cleanly_at_its_third_flash(vlab_root: VlabLayout) -> None:
    """`flashes_per_hour = 2`: the bulk-pull candidate screens as improved (flashing A and B, or
    only B when A already runs) and its survivor stage needs another flash for each full sweep
    (an undecided first look needs one more round instead): the third is refused by the guard
    like any flash, naming the budget, and the experiment ends "failed" with that reason -- the
    board good and verified on the last image flashed, the lease released. The heal after each
    flash (the vlab's reboot drifts) is a guard decision under the experiment's call, and in
    the report's healed list."""
    prof = LabProfile.from_file(profile(vlab_root, "flash2"))
    prof.policy.budgets.flashes_per_hour = 2
    (prof.data_dir() / "flashes.json").unlink(missing_ok=True)  # this lab's earlier flashes
    async with open_lab(prof, client="test") as ctx:
        sub = await call_tool(ctx, "patch_submit", {"name": "bulk-pull",
                                                    "diff": change("hal.c", *BULK)})
        assert sub.ok and sub.result is not None, sub.error
        rec = await call_tool(ctx, "experiment", {"patch": sub.result["patch_id"]})
        state = ctx.peek_state()
        sid, guard = ctx.session_id, ctx.guard
    assert rec.ok and rec.result is not None, rec.error
    out = rec.result
    assert out["decision"] == "failed", out  # wherever the third flash fell (screening, sweeps)
    assert "flashes: 2 of this DUT in the last hour (limit 2" in out["reason"], out["reason"]
    assert state.board_health == "good" and state.fingerprint_ok()
    assert state.verified_build == state.flashed_build in (out["build_a"], out["build_b"])
    assert guard is not None and not guard.lease.held
    async with open_lab(prof, client="test") as ctx:  # another session may lease the DUT now
        assert (await call_tool(ctx, "associate", {"stations": 0})).ok

    assert sid is not None
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        events = [e.event for e in store.events(sid)]
        report = audit(store, sid)
        healed = collect(store, sid, prof.data_dir(), "t").healed
    exp = next(e for e in events if isinstance(e, ToolCalled) and e.call.tool == "experiment")
    kids = [e for e in events if isinstance(e, ToolCalled) and e.parent_id == exp.call.id]
    flashes = [e for e in kids if e.call.tool == "flash"]
    assert len(flashes) == 3 and [f.call.ok for f in flashes] == [True, True, False]
    assert flashes[-1].call.error is not None and flashes[-1].call.error.code == "budget_exceeded"
    refusal = next(e for e in events if isinstance(e, GuardDecision) and e.decision == "refuse")
    assert refusal.tool == "flash" and refusal.parent_id == exp.call.id
    heals = [e for e in events if isinstance(e, GuardDecision) and e.decision == "heal"]
    after_flash = [h for h in heals if h.parent_id == exp.call.id]
    assert len(after_flash) == 2, heals  # one after each flash that ran (the reboot drifts)
    assert all(h.tool == "experiment" for h in after_flash)
    assert any("schedutil -> performance" in c for c in after_flash[0].changes)
    assert set(after_flash[0].changes) <= set(healed) and after_flash[-1].changes[0] in healed
    assert report.ok and "tree" in report.checks, report.problems
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        rows = [(r.what, r.depth) for r in of_session(store, sid).rows if r.kind == "tool_called"]
    at = rows.index(("experiment", 0))  # replay: the experiment, then its calls indented
    assert rows[at + 1:at + 3] == [("flash", 1), ("fingerprint_verify", 1)], rows
    shown = runner.invoke(app, ["transcripts", "replay", sid, "--db",
                                str(prof.data_dir() / "transcripts.db")], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "└ flash" in shown.output, shown.output
    audited = runner.invoke(app, ["transcripts", "audit", sid, "--db",
                                  str(prof.data_dir() / "transcripts.db")])
    assert audited.exit_code == 0, audited.output


def test_the_loop_writes_judges_and_reports_its_own_patches(vlab_root: VlabLayout,
                                                            tmp_path: Path) -> None:
    lab = profile(vlab_root, "protected")
    turns = [
        Turn(text="What is this lab?", tools=[ToolUse("lab_status")]),
        Turn(text="Where is the station pull?",
             tools=[ToolUse("source_search", {"pattern": "hal_get_all_stations_bulk", "path_glob": "*.c"})]),
        Turn(tools=[ToolUse("source_read", {"path": "hal.c", "start": 100, "end": 145})]),
        Turn(text="The HAL never reports the bulk capability: one dump per VAP instead of three "
                  "round trips per station.", tools=[submit("bulk-pull", change("hal.c", *BULK),
                                                            summary="pull all stations in one dump")]),
        Turn(tools=[experiment()]),
        Turn(tools=[submit("slow-monitor", change("stamon.c", *SLOW_MONITOR))]),
        Turn(tools=[submit("brief-13", change("wld.c", *DROP_KEY, patches=("0902",)),
                           base_patches=["0902"])]),
        Turn(tools=[experiment()]),
        Turn(tools=[submit("broken", change("wld.c", *BROKEN))]),
        Turn(tools=[submit("comment", change("wld.c", *NO_OP))]),
        Turn(tools=[experiment()]),
        Turn(text="DONE: kept bulk-pull; the rest were refused, dropped or refuted."),
    ]
    out = tmp_path / "run1"
    events, wall = loop(lab, turns, "lower stad CPU at 60 clients", out)
    print(f"\nrun 1: {wall:.1f} s wall for 3 experiments and 5 submissions")  # the note's figure
    got = [(e.call.tool, e.call.ok) for e in events]
    assert got == [("lab_status", True), ("source_search", True), ("source_read", True),
                   ("patch_submit", True), ("experiment", True), ("patch_submit", False),
                   ("patch_submit", True), ("experiment", True), ("patch_submit", False),
                   ("patch_submit", True), ("experiment", True)], [e.call.error for e in events]
    status = events[0].call.result
    assert status and status["workload"]["axis"] == "clients" and status["workload"]["points"] == [30, 60]
    events = events[1:]
    search, read = events[0].call.result, events[1].call.result
    assert search and {"hal.c", "wld.c"} <= {h["path"] for h in search["hits"]}
    assert read and any("hal_get_all_stations_bulk" in ln for ln in read["lines"])

    bulk, drop, noop = (e.call.result for e in (events[3], events[6], events[9]))
    print("vlab loop ledger:")  # the note's table
    for exp in (bulk, drop, noop):
        if exp:
            print(f"  {exp['patch']}: {exp['decision']} ({exp['verdict']}) {exp['mean_a']} -> "
                  f"{exp['mean_b']} ({exp['delta_pct']}%, CI {exp['ci_pct']}, windows "
                  f"{exp['windows']}, gates failed {exp['gates_failed']}) -- {exp['reason']}")
    assert bulk and bulk["decision"] == "kept", bulk
    assert bulk["verdict"] == "improved" and bulk["gates_failed"] == [] and bulk["delta_pct"] < -10
    assert bulk["sweep_a"] and bulk["sweep_b"]

    # the kept candidate's experiment as its tree of calls: each flash verified, each A/B
    # segment held (associate) and measured (profile), the survivor's sweeps with their own
    # windows, compare, gates and the flame graph -- and audit checks the tree
    every = session_calls(lab)
    exp_call = events[3]
    kids = under(every, exp_call)
    tools = [k.call.tool for k in kids]
    assert {"flash", "fingerprint_verify", "associate", "measure", "sweep", "compare",
            "gate_check", "symbolize"} <= set(tools), tools
    assert all(k.call.ok for k in kids), [k.call.error for k in kids if not k.call.ok]
    assert tools.count("flash") == tools.count("fingerprint_verify") >= 1
    bulk_exp = RecordStore(LabProfile.from_file(lab).data_dir()).load("exp", bulk["experiment_id"],
                                                                      Experiment)
    assert bulk_exp.screening is not None
    screened = bulk_exp.screening.final.n_a + bulk_exp.screening.final.n_b
    assert sum(k.call.args["reps"] for k in kids if k.call.tool == "measure") == screened
    assert all(k.measured and k.conditions is not None for k in kids if k.call.tool == "measure")
    for sweep_call in (k for k in kids if k.call.tool == "sweep"):
        windows = [g.call.tool for g in under(every, sweep_call)]
        assert windows.count("measure") == 2 and "associate" in windows  # 30 and 60 clients
    with TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions() if s.client == "loop")
        checked = audit(store, sid)
    assert checked.ok and "tree" in checked.checks, checked.problems

    protected = events[4].call.error
    assert protected and protected.code == "protected_path" and "stamon.c" in protected.message

    assert drop and drop["decision"] == "dropped" and "functional parity" in drop["reason"]
    assert drop["gates_failed"] == ["declared_parity"]

    broken = events[7].call.error
    assert broken and broken.kind == "build" and broken.message == "compile failed"
    assert any("wld.c" in ln and "error" in ln for ln in broken.lines)

    assert noop and noop["verdict"] == "same" and noop["decision"] == "refuted", noop
    store = RecordStore(LabProfile.from_file(lab).data_dir())
    noop_rec = store.load("exp", noop["experiment_id"], Experiment)
    assert noop_rec.screening and noop_rec.screening.looks[-1].verdict == "same"
    looks = [(j.n_a, j.verdict) for j in noop_rec.screening.looks]
    print(f"no-op looks: {looks}")
    assert all(v == "unknown" for _, v in looks[:-1])  # windows were added only while undecided
    assert [n for n, _ in looks] == RULE_LOOKS[:len(looks)]  # at the planned looks, no others
    bulk_rec = store.load("exp", bulk["experiment_id"], Experiment)
    assert {g.name for g in bulk_rec.gates} >= {"offered_load_parity", "declared_parity",
                                                "cpu_monotonic", "unknown_frames"}
    assert all(g.passed for g in bulk_rec.gates)

    summary = (out / "summary.md").read_text()
    kept = summary.split("## Kept")[1].split("## Dropped")[0]
    assert bulk["patch"] in kept and f"{bulk['delta_pct']:+.1f}%" in kept
    dropped = summary.split("## Dropped")[1].split("## Refuted")[0]
    assert drop["patch"] in dropped and "functional parity" in dropped
    refuted = summary.split("## Refuted")[1].split("## ")[0]
    assert noop["patch"] in refuted and "same" in refuted
    rejected = summary.split("## Rejected at submission")[1].split("## ")[0]
    assert "`slow-monitor`: protected_path" in rejected and "stamon.c" in rejected
    assert "`broken`: build: compile failed" in rejected and "error" in rejected
    assert "**Candidates judged:** 3 (1 kept, 1 dropped, 1 refuted, 0 failed), 2 rejected at " \
        "submission" in summary
    assert "rpc_calls" in summary.split("## This lab's counters")[1]  # the lab's own counters
    assert re.search(r"counters .*rpc_calls [\d.]+/s -> [\d.]+/s", kept), kept

    report = (out / "report.html").read_text()
    ledger = report.split('id="ledger-table"')[1].split("</table>")[0]
    assert ledger.count('class="exp-row"') == 3 and ledger.count('class="rejected-row"') == 2
    for exp in (bulk, drop, noop):
        assert exp["patch"] in ledger and f'data-decision="{exp["decision"]}"' in ledger
    assert f"{bulk['delta_pct']:+.1f}" in ledger and "compile failed" in ledger
    assert "Differential" in report and report.count('<img class="flame"') >= 2
    assert "bulk-pull" in report.split('id="curve-table"')[1].split("</table>")[0]
    counters = report.split('id="counter-table"')[1].split("</table>")[0]
    assert "rpc_calls/s" in counters and "dm_write_txns/s" in counters  # the profile's own

    # the second run: the protection is lifted, so the slower monitor is judged -- and the
    # offered-load gate drops it (less work because less load is not a fix)
    open_lab = profile(vlab_root, "open", protected=[])
    turns = [Turn(tools=[submit("slow-monitor", change("stamon.c", *SLOW_MONITOR))]),
             Turn(tools=[experiment()]),
             Turn(text="DONE: nothing kept.")]
    out2 = tmp_path / "run2"
    events, wall2 = loop(open_lab, turns, "lower stad CPU, monitor allowed", out2)
    print(f"run 2: {wall2:.1f} s wall for 1 experiment")
    slow = events[1].call.result
    assert slow and slow["decision"] == "dropped" and slow["verdict"] == "improved", slow
    assert slow["gates_failed"] == ["offered_load_parity"] and "offered load changed" in slow["reason"]
    rate_a, rate_b = (float(x) for x in re.findall(r"([\d.]+)/s", slow["offered_load"])[:2])
    assert rate_b < 0.6 * rate_a  # half the polls
    summary2 = (out2 / "summary.md").read_text()
    assert slow["patch"] in summary2.split("## Dropped")[1] and "offered load changed" in summary2
    assert "offered_load_parity" in (out2 / "report.html").read_text()
