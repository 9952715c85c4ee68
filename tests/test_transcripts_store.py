"""Transcript store and audit against real SQLite files: roundtrip, chain, checkpoint, tampering."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.transcripts import (
    AuditReport,
    GuardDecision,
    Note,
    ToolCalled,
    TranscriptError,
    TranscriptStore,
    audit,
    pricing,
)
from labwarden.transcripts.chain import GENESIS, link_hash

REPO = Path(__file__).resolve().parent.parent


def _session(db: Path, notes: int = 8) -> str:
    """A session of 1 session_started + `notes` notes + 1 session_ended (seqs 1..notes+2)."""
    with TranscriptStore(db) as store:
        sid = store.start_session("cli", lab_name="vlab", lab_profile=".vlab/lab.toml")
        for i in range(notes):
            store.append(sid, Note(text=f"note {i + 2}"))
        store.end_session(sid)
    return sid


def _sql(db: Path, *statements: tuple[str, list[object]]) -> None:
    conn = sqlite3.connect(db)
    with conn:
        for sql, params in statements:
            conn.execute(sql, params)
    conn.close()


def _audit(db: Path, sid: str, checkpoint: Path | None = None) -> AuditReport:
    with TranscriptStore(db) as store:
        return audit(store, sid, checkpoint)


def test_append_and_read_back_roundtrip(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    call = ToolCallRecord(tool="flash", args={"image": "fw.bin"}, duration_s=1.5, ok=True,
                          result={"version": "1.2"}, artifacts=["artifacts/flash.log"], progress=["erase"])
    failed = ToolCallRecord(tool="build", args={}, ok=False,
                            error=ToolFailure(kind="build", message="cc failed", lines=["x.c:3: error"]))
    with TranscriptStore(db) as store:
        sid = store.start_session("mcp", lab_name="vlab")
        written = [
            store.append(sid, ToolCalled.of(call)),
            store.append(sid, ToolCalled.of(failed)),
            store.append(sid, GuardDecision(tool="flash", decision="heal",
                                            reason="governor", changes=["governor -> performance"])),
            store.append(sid, pricing.model_call("claude-sonnet-4-5",
                                                 {"input_tokens": 10, "output_tokens": 5},
                                                 request_id="req_1", stop_reason="tool_use")),
            store.append(sid, Note(text="ünïcode ok", author="agent")),
        ]
    assert [w.seq for w in written] == [2, 3, 4, 5, 6]
    with TranscriptStore(db, create=False) as store:
        read = store.events(sid)
        assert [e.event.kind for e in read] == ["session_started", "tool_called", "tool_called",
                                                 "guard_decision", "model_call", "note"]
        assert [e.model_dump() for e in read[1:]] == [w.model_dump() for w in written]
        assert read[1].event.call == call  # the record is stored as-is
        assert read[1].event.result_chars == len('{"version": "1.2"}')
        assert read[1].event.result_tokens_est == 5  # ceil(18 / 4)
        assert read[0].event.labwarden_version
        [info] = store.sessions()
        assert (info.id, info.events, info.client) == (sid, 6, "mcp")
        assert info.cost_usd == pytest.approx(10 * 3e-6 + 5 * 15e-6)
        notes = list(store.db.query("SELECT author, text, seq FROM notes"))
        assert notes == [{"author": "agent", "text": "ünïcode ok", "seq": 6}]
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_the_chain_links_every_event_to_the_previous(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    sid = _session(db)
    with TranscriptStore(db) as store:
        rows = store.rows(sid)
        prev = GENESIS
        for expected_seq, r in enumerate(rows, start=1):
            assert (r.seq, r.prev_hash, r.hash) == (expected_seq, prev, link_hash(prev, r.body))
            prev = r.hash
        report = audit(store, sid)
    assert report.ok, report.problems
    assert report.first_bad_seq is None
    assert "integrity" in report.checks


def test_unknown_session_and_missing_db_name_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="no transcript database"):
        TranscriptStore(tmp_path / "nope.db", create=False)
    with TranscriptStore(tmp_path / "t.db") as store, pytest.raises(TranscriptError, match="start_session"):
        store.append("nope", Note(text="x"))


def test_edited_event_fails_audit_at_its_seq(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    sid = _session(db)
    conn = sqlite3.connect(db)
    body = conn.execute("SELECT body FROM events WHERE seq = 5").fetchone()[0]
    conn.close()
    edited = body.replace('"note 5"', '"note X"')  # one byte changed
    assert edited != body and len(edited) == len(body)
    _sql(db, ("UPDATE events SET body = ? WHERE seq = 5", [edited]))
    report = _audit(db, sid)
    assert not report.ok
    assert report.first_bad_seq == 5
    assert any("edited" in p for p in report.problems), report.problems


def test_deleted_event_fails_audit_naming_the_missing_seq(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    sid = _session(db)
    _sql(db, ("DELETE FROM events WHERE seq = 4", []))
    report = _audit(db, sid)
    assert not report.ok
    assert report.first_bad_seq == 4
    assert report.problems[0].startswith("seq 4: [chain] seq 4 missing"), report.problems


def test_reordered_events_fail_audit_at_the_first_moved_seq(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    sid = _session(db)
    _sql(db, ("UPDATE events SET seq = -1 WHERE seq = 3", []),
         ("UPDATE events SET seq = 3 WHERE seq = 6", []),
         ("UPDATE events SET seq = 6 WHERE seq = -1", []))
    report = _audit(db, sid)
    assert not report.ok
    assert report.first_bad_seq == 3
    assert any("reordered" in p for p in report.problems), report.problems


def test_truncation_is_caught_by_an_exported_checkpoint(tmp_path: Path) -> None:
    db, cp_file = tmp_path / "t.db", tmp_path / "cp.json"
    sid = _session(db)
    with TranscriptStore(db) as store:
        cp = store.export_checkpoint(sid, cp_file)
        assert cp.count == 10
        assert audit(store, sid, cp_file).ok
    _sql(db, ("DELETE FROM events WHERE seq >= 8", []))
    # a truncated tail is still a valid chain, but not what the session's own anchor (written
    # outside the database when it ended) saw: audit uses it by default
    by_anchor = _audit(db, sid)
    assert not by_anchor.ok and "anchor" in by_anchor.checks and by_anchor.first_bad_seq == 8
    report = _audit(db, sid, cp_file)  # ...nor what an exported checkpoint saw
    assert not report.ok
    assert report.first_bad_seq == 8
    assert "truncated" in report.problems[0]


def test_rewritten_history_with_recomputed_hashes_is_caught_by_the_checkpoint(tmp_path: Path) -> None:
    db, cp_file = tmp_path / "t.db", tmp_path / "cp.json"
    sid = _session(db)
    with TranscriptStore(db) as store:
        store.export_checkpoint(sid, cp_file)
        rows = store.rows(sid)
    prev, updates = GENESIS, []
    for r in rows:  # a careful forger: edit seq 5 and re-hash everything after it
        body = r.body.replace('"note 5"', '"note X"')
        h = link_hash(prev, body)
        updates.append(("UPDATE events SET body = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                        [body, prev, h, r.seq]))
        prev = h
    _sql(db, *updates)
    by_anchor = _audit(db, sid)  # the chain holds; the session's anchor does not (issue 15)
    assert not by_anchor.ok and "rewritten" in by_anchor.problems[0]
    report = _audit(db, sid, cp_file)
    assert not report.ok and report.first_bad_seq == 10
    assert "rewritten" in report.problems[0]


def test_a_checkpoint_taken_earlier_still_matches_after_more_appends(tmp_path: Path) -> None:
    db, cp_file = tmp_path / "t.db", tmp_path / "cp.json"
    sid = _session(db, notes=2)
    with TranscriptStore(db) as store:
        store.export_checkpoint(sid, cp_file)
        store.append(sid, Note(text="later"))
        assert audit(store, sid, cp_file).ok


WRITER = """
import sys
from labwarden.core.call import ToolCallRecord
from labwarden.transcripts import Note, ToolCalled, TranscriptStore
store = TranscriptStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    if i % 2:  # the runner's hot path: one event, head cached, no fsync
        call = ToolCallRecord(tool="lab_status", args={"i": i}, ok=True, result={})
        store.append_many(sys.argv[2], [ToolCalled.of(call)], durable=False)
    else:
        store.append(sys.argv[2], Note(text=f"{sys.argv[4]} {i}"))
"""


def test_two_processes_appending_to_one_session_never_fork_the_chain(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with TranscriptStore(db) as store:
        sid = store.start_session("mcp")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), sid, "60", name], cwd=REPO)
             for name in ("a", "b")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    with TranscriptStore(db) as store:
        rows = store.rows(sid)
        report = audit(store, sid)
    assert [r.seq for r in rows] == list(range(1, 122))
    assert report.ok, report.problems


def test_a_stale_cached_head_is_read_again_not_forked(tmp_path: Path) -> None:
    """Two stores on one session, alternating: each one's cached head goes stale every time the
    other appends; the UNIQUE (session, seq) index refuses the stale seq and the append retries
    from the real head."""
    db = tmp_path / "t.db"
    call = ToolCallRecord(tool="lab_status", args={}, ok=True, result={})
    with TranscriptStore(db) as a, TranscriptStore(db) as b:
        sid = a.start_session("mcp")
        for _ in range(10):
            for store in (a, b):
                stored = store.append_many(sid, [ToolCalled.of(call)], durable=False)
                assert stored[0].seq == len(store.rows(sid))
                assert not store.db.conn.in_transaction  # a refused INSERT holds no lock
        report = audit(a, sid)
        assert [r.seq for r in a.rows(sid)] == list(range(1, 22))
    assert report.ok, report.problems


def test_durable_commits_fsync_and_the_others_do_not(tmp_path: Path) -> None:
    """durable=True commits under synchronous=FULL (the WAL is fsynced), durable=False under
    NORMAL; each is committed, i.e. visible to another connection, when the call returns."""
    db = tmp_path / "t.db"
    with TranscriptStore(db) as store:
        sid = store.start_session("mcp")
        other = sqlite3.connect(db)
        for durable, level in ((False, 1), (True, 2), (False, 1)):
            store.append_many(sid, [Note(text=str(durable))], durable=durable)
            assert store.db.execute("PRAGMA synchronous").fetchone()[0] == level
            assert other.execute("SELECT count(*) FROM events").fetchone()[0] == len(store.rows(sid))
        other.close()


def test_audit_checks_the_tree_of_nested_calls(tmp_path: Path) -> None:
    """A nested call's parent_id must name an allowed call of the session, logged after it, whose
    span holds it: a well-formed tree passes; a child naming no call, a child logged after its
    parent, and a child outside its parent's span are each named at their seq. A version-3
    body (no parent_id) reads as a top-level call."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)

    def call(tool: str, cid: str, start_s: float, dur_s: float, parent: str | None) -> ToolCalled:
        rec = ToolCallRecord(id=cid, tool=tool, args={}, ok=True, result={},
                             started_at=t0 + timedelta(seconds=start_s), duration_s=dur_s)
        ev = ToolCalled.of(rec, guard="allow", parent_id=parent)
        ev.ts = rec.started_at + timedelta(seconds=dur_s)
        return ev

    db = tmp_path / "t.db"
    with TranscriptStore(db) as store:
        good = store.start_session("cli")
        heal = GuardDecision(tool="experiment", decision="heal", changes=["boost 1 -> 0"],
                             parent_id="p1", ts=t0 + timedelta(seconds=3))
        store.write(good, [call("flash", "c1", 1, 2, "p1"), heal, call("experiment", "p1", 0, 10, None)])
        store.end_session(good)
        bad = store.start_session("cli")
        store.write(bad, [call("flash", "c2", 1, 2, "nobody"), call("experiment", "p2", 0, 10, None),
                          call("fingerprint_verify", "c3", 3, 1, "p2"),
                          call("profile", "c4", 8, 5, "p3"), call("experiment", "p3", 0, 10, None)])
        store.end_session(bad)
    assert _audit(db, good).ok
    report = _audit(db, bad)
    tree = [(p.seq, p.message) for p in report.findings if p.check == "tree"]
    assert [seq for seq, _ in tree] == [2, 4, 5], tree
    assert "parent call nobody is not in the session" in tree[0][1]
    assert "logged before it" in tree[1][1] and "outside its parent experiment" in tree[2][1]
    legacy = ToolCalled.model_validate_json(call("flash", "c9", 0, 1, None).model_dump_json(
        exclude={"parent_id"}))
    assert legacy.parent_id is None
