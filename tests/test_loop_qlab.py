"""The overnight loop on the qlab, one candidate kept and one refuted (issue [3/2]; the full run,
five candidates for the qlab's own hot path, is `bench/loop_throughput.py --lab-kind qlab`).

In `make test` (issue [3/2]), marked `icount`: scripts/test-suite.sh runs it at idle priority
beside the measured tests and the guest tests; the icount clock's measurement does not feel the
host's load, only its wall time does. Three boots besides the guest's first (the third leaves
the board on the kept stack after the no-op is refuted): the stream took 793 s in make test.

The stand-in Messages API (tests/messages_standin.py) scripts the model's turns: the one thing
stood in for (a paid API). Everything else is real: `labwarden loop`, a Debian kernel under QEMU
with mac80211_hwsim radios, hostapd and wpa_supplicant stations, the firmware's nl80211 HAL, the
tools through the guard, git apply and gcc, flashes through the labgrid strategy (a real boot
each), perf and uprobes in the guest, the transcript, the records, the morning summary.

The agent writes, as diffs (not the shipped ids):
- the write-back gate (0901-like, tests/qlab_patches.GATE): kept, "improved", no gate failed;
- a comment reworded on top of it: "same" by the rule, so refuted.

The clock: the qlab's default, icount (one vCPU, guest time from instructions executed). A no-op
is "same" only when the equivalence interval fits inside the band (+-10% here, see DECISION); on
the real-time clock the suite's other qlabs boot on (tests/qlab_fixtures.TEST_CLOCK), windows at
114 scatter by 4-19% with the host's load (bench/qlab_noise.py), so it could never be called.
So this module boots its own guest (~30 s more than the real-time one) instead of sharing one.

As cheap as the rule honestly allows: one workload point, 114 stations (where bench/decision.py
--lab-kind qlab calibrated the rule: a 5% effect decided in 96% of draws, an A/A "same" in
99.7%, at a median of 5 windows per arm); 4 s windows (2 s ones scattered 5% at 60 stations: two
polls of stamon's 1 s cadence to a window); A once at a cap of 5, B at the rule's looks 3 and 5;
the survivor's full sweeps at 114 alone, 2 windows each (cpu_monotonic is then not applicable:
one point has no order). The agent first proves what runs (fingerprint_verify of the baseline),
so A is not flashed again, and sweeps it with the settings lab_status gives (`workload.sweep`),
so that sweep stands in for A's; B's sweep is of what runs after its screening, and the no-op is
submitted on the kept patch, so its A is what runs then: two flashes in all (the gate's B, the
no-op's B), each a boot of ~50 s or more on this clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.host.patchstore import base_of, patch_id
from labwarden.transcripts.store import TranscriptStore
from tests.messages_standin import MessagesStandIn, ToolUse, Turn, from_result, last_result
from tests.qlab_fixtures import Qlab, loop_profile, running_qlab
from tests.qlab_patches import COMMENT, GATE

pytestmark = [pytest.mark.timeout(1500), pytest.mark.icount]  # at idle priority in make test
runner = CliRunner()

DECISION: dict[str, object] = {"window_s": 4.0, "settle_s": 5.0, "densities": [114],
                               "sweep_reps": 2, "min_windows": 3, "step_windows": 2,
                               "max_windows": 5, "interleave": False, "min_effect_pct": 10.0,
                               "offered_load_counter": "rpc_calls"}
"""Pre-registered for this test: the default alpha and beta, a band of +-10% (as the vlab's and
logfilt's loop tests); a flash is a boot here, so A is measured once (at the cap) and B adds
windows against it. Why not +-5%: A and B are each one boot, and two boots of the same code read
apart by more than their windows scatter -- this comment read +0.7% in one run and +3.9% in
the next (equivalence [+1.3, +6.5]%: undecided at the cap), a no-op on another stack -4.2%."""


@pytest.fixture(scope="module")
def icount_qlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qlab]:
    with running_qlab(tmp_path_factory.mktemp("qlab-loop"), clock=None) as q:
        assert q.info.clock.kind == "icount"
        yield q


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-standin")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def test_the_loop_keeps_the_gate_and_refutes_a_no_op(icount_qlab: Qlab, tmp_path: Path) -> None:
    lab = loop_profile(icount_qlab.layout, "loop", DECISION)
    prof = LabProfile.from_file(lab)
    gate_id = patch_id("gate-writeback", GATE, base_of(Path(prof.build.repo), "HEAD", []))[0]
    baseline = prof.build.baseline
    turns = [
        Turn(text="Which image runs?", tools=[ToolUse("fingerprint_verify", {"build_id": baseline})]),
        Turn(text="What is this lab?", tools=[ToolUse("lab_status")]),
        Turn(text="The baseline, swept as an experiment sweeps (it stands in for A's sweep).",
             tools=[ToolUse("sweep", lambda body: {**last_result(body)["workload"]["sweep"],
                                                   "label": "baseline"})]),
        Turn(text="Every poll rewrites each station's static block: gate it.",
             tools=[ToolUse("patch_submit", {"name": "gate-writeback", "diff": GATE})]),
        Turn(tools=[ToolUse("experiment", from_result("patch_id", "patch"))]),
        Turn(tools=[ToolUse("patch_submit", {"name": "comment", "diff": COMMENT,
                                             "base_patches": [gate_id]})]),
        Turn(tools=[ToolUse("experiment", from_result("patch_id", "patch"))]),
        Turn(text="DONE: kept gate-writeback; the comment changed nothing."),
    ]
    out = tmp_path / "out"
    t0 = time.monotonic()
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration",
                                  "--lab", str(lab), "--base-url", api.url, "--goal",
                                  "lower stad CPU at 114 stations", "--budget-usd", "5",
                                  "--out", str(out)])
    wall = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    assert len(api.requests) == len(turns)
    prof = LabProfile.from_file(lab)
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions() if s.client == "loop")
        session = [e.event for e in store.events(sid) if isinstance(e.event, ToolCalled)]
    events = [e for e in session if e.parent_id is None]
    assert [(e.call.tool, e.call.ok) for e in events] == [
        ("fingerprint_verify", True), ("lab_status", True), ("sweep", True), ("patch_submit", True),
        ("experiment", True), ("patch_submit", True), ("experiment", True)], \
        [e.call.error for e in events]
    swept, gate, noop = events[2].call.result, events[4].call.result, events[6].call.result
    print(f"\nqlab loop: {wall:.0f} s wall for 2 experiments")
    for exp in (gate, noop):
        if exp:
            print(f"  {exp['patch']}: {exp['decision']} ({exp['verdict']}) {exp['mean_a']} -> "
                  f"{exp['mean_b']} ({exp['delta_pct']}%, CI {exp['ci_pct']}, windows "
                  f"{exp['windows']}, gates failed {exp['gates_failed']}) -- {exp['reason']}")
    assert gate and gate["patch"] == gate_id and gate["stations"] == 114
    assert gate["decision"] == "kept" and gate["verdict"] == "improved", gate
    assert gate["delta_pct"] < -5 and gate["gates_failed"] == [] and gate["sweep_b"]
    assert "rpc_calls" in (gate["offered_load"] or "")  # measured, and not lower on B (else not kept)
    assert noop and noop["decision"] == "refuted" and noop["verdict"] == "same", noop
    lo, hi = noop["equivalence_pct"]
    assert -10 < lo and hi < 10  # inside the band: that is what "same" means
    rec = RecordStore(prof.data_dir()).load("exp", gate["experiment_id"], Experiment)
    assert all(g.passed or g.status == "not_applicable" for g in rec.gates), rec.gates
    assert {g.name for g in rec.gates if g.passed} >= {"offered_load_parity", "unknown_frames",
                                                      "functional_parity"}  # one point: no
    # order (cpu_monotonic) nor slope (rss_bounded) to judge
    assert swept and gate["sweep_a"] == swept["sweep_id"]  # the agent's baseline sweep was A's
    flashes = [e for e in session if e.call.tool == "flash"]
    # the qlab's flash is a reboot (interleave false): A in one block, B after it, then A again
    # once B decided (A-B-A, drift_check) -- per experiment B and A again; the kept gate's B goes
    # back for its full sweep (A's is the agent's baseline sweep), and the no-op's A (the kept
    # gate) is what A-B-A left running when it was refuted: the board ends on the kept stack
    assert [f.call.args["build_id"] for f in flashes] == [
        gate["build_b"], gate["build_a"], gate["build_b"], noop["build_b"], noop["build_a"]]
    assert all(f.call.ok for f in flashes)
    assert flashes[-1].call.args["build_id"] == noop["left_flashed"] == noop["build_a"] == gate["build_b"]
    for x in (gate, noop):
        scr = RecordStore(prof.data_dir()).load("exp", x["experiment_id"], Experiment).screening
        assert scr is not None and scr.design == "blocks" and scr.a_again is not None, scr
    # the no-op's A is the gate's B, screened minutes before: its windows stand in after a check
    reused = RecordStore(prof.data_dir()).load("exp", noop["experiment_id"], Experiment).screening
    assert reused is not None and reused.a_reuse, reused
    summary = (out / "summary.md").read_text()
    assert gate_id in summary.split("## Kept")[1].split("## ")[0]
    assert noop["patch"] in summary.split("## Refuted")[1].split("## ")[0]
    assert "**Candidates judged:** 2 (1 kept, 0 dropped, 1 refuted, 0 failed)" in summary
    assert (out / "report.html").exists()
