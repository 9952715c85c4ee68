"""The second firmware's story: a DUT labwarden did not write -- a rule-based log filter, not a
WiFi AP, behind dropbear with busybox ash, no cpufreq, no clients, a sysupgrade image -- goes
through the whole chain: build -> flash (a new boot) -> verify -> measure (a uprobe on a static
function) -> symbolize names the hotspot -> attribute collapses it; gates that the DUT cannot
give evidence for are not applicable, with the reason.

Real parts only: Debian's dropbear in a mount namespace, busybox, the C build, perf, uprobes.
Skipped with the reason where dropbear (or perf/uprobes) cannot run here."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labwarden.core.devtext import unmark
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import default_transcript, open_lab
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import stockssh
from tests import stockdut
from tests.conftest import needs_uprobes

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def logfilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[stockssh.StockSsh, Path]]:
    yield from stockdut.logfilt_dut(tmp_path_factory.mktemp("logfilt"))


async def _ok(lab: Path, tool: str, args: dict[str, Any] | None = None,
              profile: LabProfile | None = None) -> dict[str, Any]:
    async with open_lab(profile or LabProfile.from_file(lab)) as ctx:
        rec = await call_tool(ctx, tool, args or {})
    assert rec.ok, f"{tool}: {rec.error!s}"
    assert rec.result is not None
    return rec.result


def test_the_profile_has_no_key_for_labwarden_alone(logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    """No wireless, no cpufreq, no RPC client, no load binary, no library, no topology."""
    text = logfilt[1].read_text()
    for absent in ("wireless", "topology", "cpufreq", "sysfs", "rpc_client", "library", "binary",
                   "socket", "readers", "radios", "levers"):
        assert absent not in text, absent
    prof = LabProfile.from_file(logfilt[1])
    assert prof.load.kind == "none" and prof.flash.kind == "sysupgrade"


async def test_build_flash_verify_profile_symbolize_attribute(
        logfilt: tuple[stockssh.StockSsh, Path], caplog: pytest.LogCaptureFixture) -> None:
    needs_uprobes()
    server, lab = logfilt
    built = await _ok(lab, "build")
    assert {a["name"] for a in built["artifacts"]} == {"logfilt", "logspam"}

    boot = server.boot_id_file.read_text()
    flashed = await _ok(lab, "flash", {"build_id": built["build_id"]})
    assert flashed["flashed"] and flashed["overlay_wiped"]
    assert server.boot_id_file.read_text() != boot  # sysupgrade waited for a new boot

    verified = await _ok(lab, "fingerprint_verify", {"build_id": built["build_id"]})
    assert verified["verified"], verified["mismatches"]
    # no contract on the daemon: the running binaries' sha256 and ELF build-id are the proof
    # ([target] prints_git_hash is off: `logfilt --version` is never run)
    assert verified["git_hash_running"] is None
    assert any("build-id of the running target" in unmark(p) for p in verified["proven_by"])

    status = await _ok(lab, "lab_status")
    knobs = {k["name"]: k for k in status["knobs"]}
    assert unmark(knobs["governor"]["value"]).startswith("n/a: no cpufreq on this DUT")
    assert unmark(knobs["boost"]["value"]).startswith("n/a: no cpufreq on this DUT")
    assert knobs["governor"]["applicable"] is False and knobs["topology"]["applicable"] is False
    assert status["problems"] == [] and status["associated"] is None

    prof = await _ok(lab, "measure", {"stations": 0, "window_s": 4, "reps": 2, "perf_reps": 1})
    assert prof["pinned"] is True and prof["fingerprint_verified"] is True
    assert prof["cpu_pct"]["mean"] > 5, prof
    assert prof["counters"]["lines"] > 200, prof  # filter_line: static, found in the debug file

    sym = await _ok(lab, "symbolize", {"profile_id": prof["profile_id"],
                                       "functions": ["match_rule", "filter_line"]})
    shares = {f["name"]: f for f in sym["functions"]}
    assert shares["match_rule"]["defined_in"] == "logfilt"
    assert shares["match_rule"]["total_pct"] > 50, sym["tree"]
    assert any("match_rule" in step["frame"] for step in sym["dominant_path"]), sym["dominant_path"]
    assert sym["unknown_pct"] < 5

    att = await _ok(lab, "attribute", {"suspect": "logspam", "window_s": 3, "baseline_s": 3})
    assert att["resumed"] and att["drop_pct"] > 80, att

    # the SSH sessions' lives (opens, exit statuses, closes) show in the report if the sweep fails
    caplog.set_level(logging.INFO, logger="asyncssh")
    async with open_lab(LabProfile.from_file(lab)) as ctx:  # one session: its report shows it
        swept = await call_tool(ctx, "sweep", {"densities": [0], "reps": 2, "window_s": 2,
                                               "label": "baseline"})
        sweep = swept.result
        assert sweep is not None, f"{swept.error!s}"
        assert sweep["cleanup_count"] is None  # no reader: no made-up 0
        checked = await call_tool(ctx, "gate_check", {"sweep_id": sweep["sweep_id"]})
        reported = await call_tool(ctx, "report", {"name": "logfilt"})
        gates, report = checked.result, reported.result
    assert gates is not None and report is not None, (checked.error, reported.error)
    html = Path(report["path"]).read_text()
    assert "n/a: no cpufreq on this DUT" in html and ">n/a<" in html

    # the transcript's audit accepts cpufreq recorded as not applicable (and nothing else)
    store = TranscriptStore(default_transcript(LabProfile.from_file(lab)))
    try:
        findings = [f for info in store.sessions() for f in audit(store, info.id).findings
                    if f.check == "conditions"]
    finally:
        store.close()
    assert findings == []
    by = {g["name"]: g for g in gates["gates"]}
    assert set(gates["not_applicable"]) == {"cpu_monotonic", "assoc_matches_datamodel",
                                            "rss_bounded", "functional_parity"}
    assert all(by[n]["evidence"].startswith("n/a: ") and not by[n]["passed"]
               for n in gates["not_applicable"])
    assert by["conditions_verified"]["status"] == "passed"
    assert "n/a: no cpufreq on this DUT" in by["conditions_verified"]["evidence"]
    assert gates["failed"] == [] and gates["passed"]


async def test_an_unknown_symbol_is_a_clear_refusal(logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    needs_uprobes()
    _server, lab = logfilt
    prof = LabProfile.from_file(lab)
    prof.target.uprobes = {"ghost": "no_such_function"}
    async with open_lab(prof) as ctx:
        if not ctx.peek_state().fingerprint_ok():
            pytest.skip("needs the story's verified build")
        rec = await call_tool(ctx, "measure", {"stations": 0, "window_s": 2, "reps": 1,
                                               "perf": False})
    assert not rec.ok and rec.error is not None
    assert rec.error.kind == "invalid_input"
    assert "no_such_function" in rec.error.message and "[target] uprobes" in (rec.error.remedy or "")
    events = Path("/sys/kernel/tracing/uprobe_events").read_text()
    assert str(lab.parent) not in events


async def test_a_probe_in_any_binary(logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    """`/path:function` probes a binary other than the target's own: libc's recv, as logfilt
    maps it, counts the lines it receives."""
    needs_uprobes()
    _server, lab = logfilt
    prof = LabProfile.from_file(lab)
    pid = int(Path(prof.target.pidfiles["logfilt"]).read_text())
    libc = next(ln.split()[-1] for ln in Path(f"/proc/{pid}/maps").read_text().splitlines()
                if "/libc.so" in ln or "/libc-" in ln)
    prof.target.uprobes = {"recvs": f"{libc}:recv"}
    async with open_lab(prof) as ctx:
        if not ctx.peek_state().fingerprint_ok():
            pytest.skip("needs the story's verified build")
        rec = await call_tool(ctx, "measure", {"stations": 0, "window_s": 3, "reps": 1,
                                               "perf": False})
    assert rec.ok, rec.error
    assert rec.result is not None and rec.result["counters"]["recvs"] > 200, rec.result
