"""Anchors (issue 15, class 7, second half): every session's head is written outside the database
when it ends, without anyone running `transcripts checkpoint`; `audit` checks against it by
default, so a database rewritten with recomputed hashes (or cut short, or with its anchor
removed) fails; the anchor's hash is in the report and in the loop's summary. A session id is an
identifier that becomes a path: contained like any other. Real vlab, real CLI, the Messages API
stand-in for the loop (the only fake: the paid API)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.paths import PathRefused
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.transcripts.chain import GENESIS, link_hash
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

from .messages_standin import MessagesStandIn, ToolUse, Turn

pytestmark = pytest.mark.anyio
runner = CliRunner()
LABWARDEN = str(Path(sys.executable).parent / "labwarden")


async def _session(lab: VlabLayout, db: Path) -> str:
    async with open_lab(LabProfile.from_file(lab.lab_toml), client="test", transcript=db) as ctx:
        assert (await call_tool(ctx, "lab_status", {})).ok
        await call_tool(ctx, "attribute", {"suspect": "init"})  # a refusal too
        sid = ctx.session_id
    assert sid is not None
    return sid


def _audit(db: Path, sid: str) -> tuple[int, str]:
    res = runner.invoke(app, ["transcripts", "audit", sid, "--db", str(db)])
    return res.exit_code, res.output


async def test_the_anchor_is_written_at_session_end_and_audit_uses_it(lab: VlabLayout,
                                                                      tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    sid = await _session(lab, db)
    with TranscriptStore(db) as store:
        anchor = store.anchor(sid)
        rows = store.rows(sid)
        assert anchor is not None and store.anchor_path(sid).parent != db.parent / db.name
    assert anchor.count == len(rows) and anchor.head_hash == rows[-1].hash
    code, out = _audit(db, sid)
    assert code == 0 and "anchor" in out, out

    # a careful forger: edit the refusal's reason and recompute every hash after it
    con = sqlite3.connect(db)
    prev, forged = GENESIS, 0
    for seq, body in con.execute("SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq",
                                 [sid]).fetchall():
        new = body.replace("never paused", "paused at will")
        forged += new != body
        h = link_hash(prev, new)
        con.execute("UPDATE events SET body = ?, prev_hash = ?, hash = ? WHERE session_id = ? AND seq = ?",
                    [new, prev, h, sid, seq])
        prev = h
    con.commit()
    con.close()
    assert forged
    code, out = _audit(db, sid)
    assert code == 1 and "rewritten" in out, out

    # the tail cut off: caught too
    sid2 = await _session(lab, db)
    con = sqlite3.connect(db)
    con.execute("DELETE FROM events WHERE session_id = ? AND seq >= 3", [sid2])
    con.commit()
    con.close()
    code, out = _audit(db, sid2)
    assert code == 1 and "truncated" in out, out

    # and the anchor removed: an ended session without its anchor fails
    sid3 = await _session(lab, db)
    with TranscriptStore(db) as store:
        store.anchor_path(sid3).unlink()
    code, out = _audit(db, sid3)
    assert code == 1 and "anchor" in out and "missing" in out, out


def test_a_session_id_is_contained_as_a_path(tmp_path: Path) -> None:
    with TranscriptStore(tmp_path / "t.db") as store:
        for bad in ("../../etc/passwd", "/etc/passwd", "a" * 300, "..", ".hidden", "x/y"):
            with pytest.raises(PathRefused):
                store.anchor_path(bad)
        (store.anchors).mkdir(parents=True, exist_ok=True)
        (store.anchors / "planted.json").symlink_to("/etc/passwd")
        with pytest.raises(PathRefused):
            store.anchor("planted")


def test_the_report_and_the_loop_summary_name_the_anchor(lab: VlabLayout, tmp_path: Path) -> None:
    db = lab.data_dir / "transcripts.db"
    sid = asyncio.run(_session(lab, db))
    res = runner.invoke(app, ["report", sid, "--lab", str(lab.lab_toml), "--name", "anchored"])
    assert res.exit_code == 0, res.output
    with TranscriptStore(db) as store:
        anchor = store.anchor(sid)
    assert anchor is not None
    page = (lab.data_dir / "reports" / "anchored.html").read_text()
    assert f"anchor: {anchor.count} events, head sha256 {anchor.head_hash}" in page

    turns = [Turn(tools=[ToolUse("lab_status")]), Turn(text="DONE: nothing to do.")]
    with MessagesStandIn(turns) as api:
        res = runner.invoke(app, ["loop", "--skip-calibration",
                                  "--lab", str(lab.lab_toml), "--base-url", api.url,
                                  "--goal", "look", "--budget-usd", "1", "--out", str(tmp_path)],
                            env={**os.environ, "ANTHROPIC_API_KEY": "sk-standin"})
    assert res.exit_code == 0, res.output
    summary = (tmp_path / "summary.md").read_text()
    with TranscriptStore(db) as store:
        loop_sid = max((s for s in store.sessions() if s.client == "loop"), key=lambda s: s.started_at).id
        loop_anchor = store.anchor(loop_sid)
    assert loop_anchor is not None
    assert f"Transcript anchor** of {loop_sid}: {loop_anchor.count} events, head sha256 " \
           f"{loop_anchor.head_hash}" in summary
