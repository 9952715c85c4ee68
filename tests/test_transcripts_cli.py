"""`labwarden transcripts ...` through typer's CliRunner, and the audit of measurement conditions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.transcripts import GuardDecision, Note, ToolCalled, TranscriptStore, audit, pricing

runner = CliRunner()


PINNED = {"fingerprint_verified": True, "governors": ["performance", "performance"], "boost": "0",
          "stations": 114}


def _profile(conditions: dict[str, object] | None, ok: bool = True) -> ToolCalled:
    # "profile": `measure`'s name before its rename, as older transcripts hold it; they still
    # replay and audit (the audit reads `measured`/`conditions`, never a tool name)
    return ToolCalled.of(ToolCallRecord(tool="profile", args={"seconds": 10}, ok=ok, duration_s=11.2,
                                        result={"folded": "artifacts/p.folded"} if ok else None,
                                        artifacts=["artifacts/p.folded", "artifacts/p.svg"]),
                         conditions=conditions, measured=True)


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "t.db"
    with TranscriptStore(path) as store:
        sid = store.start_session("chat", lab_name="vlab [lab]", lab_profile=".vlab/lab.toml")
        store.append(sid, GuardDecision(tool="flash", decision="refuse", code="lease_held",
                                        reason="no lease on the board", remedy="take one with [lease]"))
        failed = ToolCallRecord(tool="flash", args={"image": "[red]x[/red]"}, ok=False, duration_s=0.4,
                                error=ToolFailure(kind="refused", message="no lease"))
        store.append(sid, ToolCalled.of(failed))
        store.append(sid, pricing.model_call("claude-opus-4-5", {"input_tokens": 1000, "output_tokens": 100}))
        store.append(sid, _profile(PINNED))
        store.append(sid, Note(text="looks good", author="agent"))
        store.end_session(sid)
    return path, sid


def test_list_show_and_replay(db: tuple[Path, str]) -> None:
    path, sid = db
    res = runner.invoke(app, ["transcripts", "list", "--db", str(path)])
    assert res.exit_code == 0, res.output
    assert sid in res.output and "vlab [lab]" in res.output
    res = runner.invoke(app, ["transcripts", "show", sid[:12], "--db", str(path)])
    assert res.exit_code == 0, res.output
    assert "guard_decision" in res.output and "session_ended" in res.output
    res = runner.invoke(app, ["transcripts", "show", sid, "--db", str(path), "--json"])
    assert [e["seq"] for e in json.loads(res.output)] == [1, 2, 3, 4, 5, 6, 7]
    res = runner.invoke(app, ["transcripts", "replay", sid], env={"LABWARDEN_TRANSCRIPTS": str(path)})
    assert res.exit_code == 0, res.output
    for text in ("refuse", "flash", "profile", "claude-opus-4-5", "artifacts/p.svg", "[red]x[/red]",
                 "error: refused", "$0.0075"):  # 1000 x $5/M + 100 x $25/M
        assert text in res.output, text


def test_audit_ok_then_tampered_fails_naming_the_seq(db: tuple[Path, str], tmp_path: Path) -> None:
    path, sid = db
    cp = tmp_path / "cp.json"
    res = runner.invoke(app, ["transcripts", "checkpoint", sid, "-o", str(cp), "--db", str(path)])
    assert res.exit_code == 0, res.output
    assert json.loads(cp.read_text())["count"] == 7
    res = runner.invoke(app, ["transcripts", "audit", sid, "--db", str(path), "--checkpoint", str(cp)])
    assert res.exit_code == 0, res.output
    assert "ok" in res.output
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE events SET body = replace(body, 'no lease', 'a lease') WHERE seq = 3")
    conn.close()
    res = runner.invoke(app, ["transcripts", "audit", sid, "--db", str(path)])
    assert res.exit_code == 1
    assert "first bad event is seq 3" in res.output and "remedy" in res.output


def test_export_jsonl_and_html(db: tuple[Path, str], tmp_path: Path) -> None:
    path, sid = db
    res = runner.invoke(app, ["transcripts", "export", sid, "--format", "jsonl", "--db", str(path)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(ln) for ln in res.output.splitlines()]
    assert [ln["seq"] for ln in lines] == list(range(1, 8))
    assert all(len(ln["hash"]) == 64 and ln["event"]["seq"] == ln["seq"] for ln in lines)
    out = tmp_path / "t.html"
    res = runner.invoke(app, ["transcripts", "export", sid, "--format", "html", "-o", str(out),
                              "--db", str(path)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    for tool in ("flash", "profile"):
        assert f"<td>{tool}</td>" in html
    assert "artifacts/p.svg" in html and "&lt;" not in sid
    assert "[red]x[/red]" in html and "<script" not in html
    res = runner.invoke(app, ["transcripts", "export", sid, "--format", "pdf", "--db", str(path)])
    assert res.exit_code == 1 and "jsonl or html" in res.output


def test_not_found_exits_1_with_a_remedy(db: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = db
    res = runner.invoke(app, ["transcripts", "replay", "nosuch", "--db", str(path)])
    assert res.exit_code == 1 and "transcripts list" in res.output
    res = runner.invoke(app, ["transcripts", "list", "--db", str(tmp_path / "none.db")])
    assert res.exit_code == 1 and "LABWARDEN_TRANSCRIPTS" in res.output
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(("conditions", "why"), [
    (None, "carries no conditions"),
    ({**PINNED, "fingerprint_verified": False}, "fingerprint not verified"),
    ({**PINNED, "governors": ["performance", "schedutil"]}, "governors not all pinned"),
    ({**PINNED, "boost": "1"}, "boost not off"),
    ({**PINNED, "boost": True}, "boost not off"),
])
def test_audit_flags_a_measurement_without_verified_pinned_conditions(
        tmp_path: Path, conditions: dict[str, object] | None, why: str) -> None:
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("loop")
        store.append(sid, _profile(PINNED))
        store.append(sid, _profile({**PINNED, "boost": False}))
        store.append(sid, _profile(None, ok=False))  # a failed measurement measured nothing
        assert audit(store, sid).ok
        store.append(sid, _profile(conditions))
        report = audit(store, sid)
    assert not report.ok and report.first_bad_seq == 5
    assert report.problems[0].startswith("seq 5: [conditions] measurement by profile")
    assert why in report.problems[0]
