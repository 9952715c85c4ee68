"""The judge on a lab without clients (issue [3/1]): the second firmware -- a rule-based log filter
behind Debian's dropbear with busybox ash, `[load] kind = "none"`, no `[decision]` section, no
clients reader, no offered-load counter, no parity check -- runs the same things the vlab does:

- the overnight loop (`labwarden loop` against the suite's stand-in Messages API, the same as the
  vlab's in tests/test_loop_vlab.py): it starts from lab_status, reads the source, writes a
  NEW patch for this lab's own hotspot (match_rule's tolower per byte) -> kept, improved, no gate
  failed; a no-op -> refuted ("same"); a patch that makes logfilt slower -> dropped, "regressed";
  the summary and the report name this lab's own counter (`lines`) and workload;
- every gate fed this lab, which lacks their evidence: each is not_applicable with its reason, and
  none counts as failed (the kept patch above is the proof that none blocks a keep);
- bisect between v1.0 and the repo's `next` branch names the commit that made logfilt slower.

Real parts only (the model's words are the one scripted thing): dropbear, busybox, the C build,
sysupgrade with a new boot, perf, uprobes, the guard, the transcript.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import stockssh
from tests import stockdut
from tests.conftest import needs_uprobes
from tests.logfilt_patches import FIX, NO_OP, REGRESSION_SUBJECT, SLOWER, diff
from tests.messages_standin import MessagesStandIn, ToolUse, Turn, from_result, last_result

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]
runner = CliRunner()

FLASHES = "\n[policy]\nbudgets = { flashes_per_hour = 60 }\n"
"""What the loop and bisect add to the README's profile: each experiment flashes A and B (and a
survivor's sweeps once more each), more than the default budget of 6 an hour allows a loop."""
QUICK = ("\n[decision]\nwindow_s = 2.0\nmin_effect_pct = 20.0\nmax_windows = 21\n"
         "interleave = true\n")
"""...and 2 s windows, interleaved (A B, B A...) as the vlab's loop: a flash here costs ~1 s, so
the arms stop at the rule's first look instead of A's cap. The band of "same" is +-20% with a cap
of 21: this host's 2 s windows of logfilt scatter by ~2-3% (a no-op "same" at 3+3 windows, also
with two busy loops beside it), but a CI runner once read the no-op 16.3 -> 14.5 with CI
[-26.9, +8.5]% at 15+15 (~14% a window), "unknown" at the old +-10% and cap of 15. Simulated
with `judge` on that scatter, a no-op is "same" at +-10%/15 in 1-3% of comparisons, at
+-20%/21 in 96%. The fix (-95%) and the slower patch (+250-300%) stay far outside the band. The
README profile's test keeps the default rule, A once at the cap."""


@pytest.fixture(scope="module")
def logfilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[stockssh.StockSsh, Path]]:
    needs_uprobes()  # the profile's counter (`lines`) is a uprobe on a static function
    yield from stockdut.logfilt_dut(tmp_path_factory.mktemp("judge"))


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-standin")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def with_budget(lab: Path, name: str, extra: str = "") -> Path:
    text = lab.read_text()
    assert "[decision]" not in text and "[readers]" not in text  # README's profile, as printed
    path = lab.with_name(f"lab-{name}.toml")
    path.write_text(text + FLASHES + extra)
    return path


def submit(name: str, edits: list[tuple[str, str]], **more: Any) -> ToolUse:
    return ToolUse("patch_submit", {"name": name, "diff": diff("logfilt.c", edits), **more})


def experiment() -> ToolUse:
    return ToolUse("experiment", from_result("patch_id", "patch"))


@pytest.mark.long  # ~115 s (A: 15 windows of 4 s): make test-long; make test keeps the tutorial's
# profile to a kept patch (tests/test_tutorial_walk.py) and A once at its cap (tests/test_loop_qlab.py)
async def test_the_readme_profile_as_printed_judges_a_patch(
        logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    """No [decision], no [readers], no [policy]: `experiment` screens at the load's one point (0)
    with the default rule -- A once at its cap, B against it -- and keeps the hotspot's fix."""
    _server, lab = logfilt
    text = lab.read_text()
    assert "[decision]" not in text and "[policy]" not in text and "[readers]" not in text
    async with open_lab(LabProfile.from_file(lab)) as ctx:
        sub = await call_tool(ctx, "patch_submit", {"name": "lower-once",
                                                    "diff": diff("logfilt.c", FIX)})
        assert sub.result is not None, sub.error
        rec = await call_tool(ctx, "experiment", {"patch": sub.result["patch_id"]})
    out = rec.result
    assert out is not None, rec.error
    print(f"\nREADME profile, no [decision]: {out['decision']} ({out['verdict']}) "
          f"{out['mean_a']:.2f} -> {out['mean_b']:.2f} ({out['delta_pct']:+.1f}%, CI "
          f"{out['ci_pct']}, windows {out['windows']}) -- {out['reason']}")
    assert out["decision"] == "kept" and out["stations"] == 0, out
    assert out["windows"][0] == 15 and out["ci_pct"][0] > -100  # A once, at the default cap


def test_the_loop_keeps_a_fix_refutes_a_no_op_and_drops_a_slower_patch(
        logfilt: tuple[stockssh.StockSsh, Path], tmp_path: Path) -> None:
    _server, base = logfilt
    lab = with_budget(base, "loop", QUICK)
    turns = [
        Turn(text="What is this lab?", tools=[ToolUse("lab_status")]),
        Turn(tools=[ToolUse("build")]),
        Turn(tools=[ToolUse("flash", from_result("build_id"))]),
        Turn(tools=[ToolUse("fingerprint_verify", from_result("build_id"))]),
        Turn(text="No load axis: one point, its own input; swept as an experiment sweeps.",
             tools=[ToolUse("sweep", {"densities": [0], "reps": 3, "window_s": 2, "settle_s": 3,
                                      "label": "baseline"})]),
        Turn(tools=[ToolUse("symbolize", lambda body: {
            "profile_id": last_result(body)["points"][-1]["profile_id"], "functions": ["match_rule"]})]),
        Turn(tools=[ToolUse("source_search", {"pattern": "match_rule", "path_glob": "*.c"})]),
        Turn(tools=[ToolUse("source_read", {"path": "logfilt.c", "start": 30, "end": 60})]),
        Turn(text="One tolower() per byte compared, for every rule: lowercase the line once.",
             tools=[submit("lower-line-once", FIX, summary="lowercase each line once, then strstr")]),
        Turn(tools=[experiment()]),
        Turn(tools=[submit("comment", NO_OP)]),
        Turn(tools=[experiment()]),
        Turn(tools=[submit("second-opinion", SLOWER)]),
        Turn(tools=[experiment()]),
        Turn(text="DONE: kept lower-once; the comment was refuted, the second opinion dropped."),
    ]
    out = tmp_path / "run"
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration",
                                  "--lab", str(lab), "--base-url", api.url, "--goal",
                                  "lower logfilt's CPU", "--budget-usd", "5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert len(api.requests) == len(turns)
    events = _calls(lab)
    assert [e.call.tool for e in events if not e.call.ok] == [], [e.call.error for e in events]
    status = events[0].call.result
    assert status is not None
    assert status["workload"] == {"load_kind": "none", "axis": None, "points": [0],
                                  "load_drives_cpu": False, "suspects": ["logspam"],
                                  "counters": {"lines": "filter_line"},
                                  "offered_load_counter": None,
                                  "sweep": {"densities": [0], "reps": 3, "window_s": 2.0,
                                            "settle_s": 3.0}}
    sym = events[5].call.result
    assert sym and {f["name"]: f for f in sym["functions"]}["match_rule"]["total_pct"] > 50

    fix, noop, slow = (e.call.result for e in events if e.call.tool == "experiment")
    store = RecordStore(LabProfile.from_file(lab).data_dir())
    windows = {exp["patch"]: _windows(store, exp["experiment_id"]) for exp in (fix, noop, slow)
               if exp}  # each window's CPU, A and B: what a failure below is judged on
    assert fix and fix["decision"] == "kept" and fix["verdict"] == "improved", (fix, windows)
    assert fix["stations"] == 0 and fix["gates_failed"] == [] and fix["delta_pct"] < -50
    assert fix["ci_pct"][0] > -100  # the interval of a % change stays inside what CPU can do
    assert set(fix["gates_not_applicable"]) >= {"offered_load_parity", "declared_parity",
                                                "cpu_monotonic", "assoc_matches_datamodel",
                                                "rss_bounded", "functional_parity"}
    assert "its own workload" in fix["reason"] and "no gate failed" in fix["reason"]
    assert fix["sweep_a"] == events[4].call.result["sweep_id"]  # the agent's baseline: A's sweep
    assert noop and noop["verdict"] == "same" and noop["decision"] == "refuted", (noop, windows)
    assert slow and slow["verdict"] == "regressed" and slow["decision"] == "dropped", (slow,
                                                                                       windows)
    assert slow["delta_pct"] > 20

    kept = store.load("exp", fix["experiment_id"], Experiment)
    by = {g.name: g for g in kept.gates}
    assert by["unknown_frames"].status == "passed" and by["conditions_verified"].status == "passed"
    assert not any(g.failed for g in kept.gates)
    match = next(d for d in kept.flame_deltas if d.symbol == "match_rule")
    assert match.base_cpu_pp is not None and match.new_cpu_pp is not None
    # most of match_rule's CPU gone: a share of its own, since logspam's fixed line rate costs
    # fewer pp on a faster host (15.4 pp here on one, > 20 on another)
    assert match.delta_cpu_pp is not None and match.delta_cpu_pp < -0.5 * match.base_cpu_pp
    assert match.base_cpu_pp > match.new_cpu_pp
    assert "Δ CPU pp" in (out / "report.html").read_text()

    summary = (out / "summary.md").read_text()
    kept_md = summary.split("## Kept")[1].split("## Dropped")[0]
    assert fix["patch"] in kept_md and "its own workload" in kept_md
    assert re.search(r"counters lines [\d.]+/s -> [\d.]+/s", kept_md), kept_md
    assert slow["patch"] in summary.split("## Dropped")[1] and "regressed" in summary
    assert noop["patch"] in summary.split("## Refuted")[1]
    assert "- lines (the profile's [target] uprobes" in summary
    assert "clients" not in kept_md
    report = (out / "report.html").read_text()
    counters = report.split('id="counter-table"')[1].split("</table>")[0]
    assert "lines/s" in counters and "rpc_calls" not in counters and "RPC" not in counters
    assert "CPU at the target&#39;s own workload (no load axis)" in report
    ledger = report.split('id="ledger-table"')[1].split("</table>")[0]
    assert ledger.count('class="exp-row"') == 3
    for exp in (fix, noop, slow):
        assert f'data-decision="{exp["decision"]}"' in ledger
    print("\nlogfilt loop ledger:")
    for exp in (fix, noop, slow):
        print(f"  {exp['patch']}: {exp['decision']} ({exp['verdict']}) {exp['mean_a']:.2f} -> "
              f"{exp['mean_b']:.2f} ({exp['delta_pct']:+.1f}%, CI {exp['ci_pct']}, windows "
              f"{exp['windows']}) -- {exp['reason']}")


async def test_every_gate_without_its_evidence_is_not_applicable(
        logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    """A sweep of one point without perf, judged against another: the lab has no load axis, no
    clients reader, no offered-load counter and no parity check, and does not declare that a
    load drives its CPU. Each gate that needs one of these says not_applicable with its reason;
    `conditions_verified` is the one whose evidence every lab gives (no cpufreq is itself
    recorded, as n/a). Then the same with load_drives_cpu declared: one point, nothing to order."""
    _server, base = logfilt
    sweeps: list[str] = []
    for decl, why in ((False, "load_drives_cpu"), (True, "one workload point")):
        prof = LabProfile.from_file(with_budget(base, f"gates-{decl}",
                                                f"\n[gates]\nload_drives_cpu = {str(decl).lower()}\n"))
        async with open_lab(prof) as ctx:
            if not sweeps:  # measured once; each declaration judges the same two sweeps
                built = await call_tool(ctx, "build", {})
                assert built.result is not None, built.error
                for tool, args in (("flash", {"build_id": built.result["build_id"]}),
                                   ("fingerprint_verify", {"build_id": built.result["build_id"]})):
                    if not (ctx.peek_state().verified_build == built.result["build_id"]):
                        assert (await call_tool(ctx, tool, args)).ok
                for label in ("a", "b"):
                    rec = await call_tool(ctx, "sweep", {"densities": [0], "reps": 2,
                                                         "window_s": 2, "perf": False,
                                                         "label": label})
                    assert rec.result is not None, rec.error
                    sweeps.append(rec.result["sweep_id"])
                    assert rec.result["idle_note"].startswith("the DUT has no load")
            checked = await call_tool(ctx, "gate_check", {"sweep_id": sweeps[1],
                                                          "baseline_sweep_id": sweeps[0]})
        out = checked.result
        assert out is not None, checked.error
        by = {g["name"]: g for g in out["gates"]}
        assert set(by) == {"cpu_monotonic", "unknown_frames", "assoc_matches_datamodel",
                           "conditions_verified", "rss_bounded", "functional_parity",
                           "offered_load_parity", "declared_parity"}
        assert out["failed"] == [] and out["passed"]
        assert set(out["not_applicable"]) == set(by) - {"conditions_verified"}
        for name in out["not_applicable"]:
            gate = by[name]
            assert gate["status"] == "not_applicable" and not gate["passed"], gate
            assert gate["evidence"].startswith("n/a: ") and len(gate["evidence"]) > 20, gate
        assert why in by["cpu_monotonic"]["evidence"]
        assert "perf: false" in by["unknown_frames"]["evidence"]
        assert "offered_load_counter" in by["offered_load_parity"]["evidence"]
        assert "parity_check" in by["declared_parity"]["evidence"]
        assert by["conditions_verified"]["status"] == "passed"


async def test_bisect_names_the_commit_that_made_logfilt_slower(
        logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    _server, base = logfilt
    # 2 s windows, interleaved (a flash here costs ~1 s), the default band of "same" (+-5%): the
    # regression is ~+35% on this host (tests/logfilt_patches.REGRESSION), and half of it is the
    # midpoints' band -- wide enough for the steps to decide at the rule's first looks
    prof = LabProfile.from_file(with_budget(base, "bisect", "\n[decision]\nwindow_s = 2.0\n"
                                            "interleave = true\n"))
    async with open_lab(prof) as ctx:
        rec = await call_tool(ctx, "bisect", {"good": "v1.0", "bad": "next"})
    out = rec.result
    assert out is not None, rec.error
    print(f"\nlogfilt bisect: {json.dumps(out, indent=1)}")
    assert out["outcome"] == "found", out
    assert out["first_bad_subject"] == REGRESSION_SUBJECT and out["commits"] == 3
    assert out["regression"].startswith("regressed")


def _windows(store: RecordStore, experiment_id: str) -> dict[str, list[float]]:
    """The screening's windows of one experiment, per arm."""
    scr = store.load("exp", experiment_id, Experiment).screening
    return {} if scr is None else {"a": scr.a.values, "b": scr.b.values}


def _calls(lab: Path) -> list[ToolCalled]:
    """The agent's calls of the loop's session (a tool's nested calls are under them)."""
    with TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions() if s.client == "loop")
        return [e.event for e in store.events(sid)
                if isinstance(e.event, ToolCalled) and e.event.parent_id is None]

