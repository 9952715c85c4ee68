"""Audit a session: chain, truncation against a checkpoint, file integrity, costs, conditions,
the tree of nested calls (transcripts/calltree.py says its invariant).

Chain: every body must hash (with the previous hash) to its stored hash, link to the previous
event and say the seq it is stored at; seqs run 1, 2, 3... without gaps. That catches an edited,
deleted or reordered event. A checkpoint (count + head hash, exported earlier) catches a
truncated tail, which leaves a valid but shorter chain, and a database rewritten with every hash
recomputed. Every session writes its own checkpoint -- its anchor -- outside the database when
it ends (store.write_anchor); audit checks against it unless given another.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, computed_field

from labwarden.core.events import ModelCall, ToolCalled, parse_event
from labwarden.core.paths import PathRefused
from labwarden.transcripts import calltree, pricing
from labwarden.transcripts.chain import GENESIS, link_hash
from labwarden.transcripts.store import Checkpoint, EventRow, TranscriptStore, load_checkpoint

COST_TOLERANCE_USD = 1e-9


class Problem(BaseModel):
    seq: int | None
    """The first event concerned (None: the whole file or session)."""
    check: str
    """chain, checkpoint, anchor, integrity, cost, conditions, places, tree, session."""
    message: str
    """What is wrong."""


class AuditReport(BaseModel):

    session_id: str
    """The audited session."""
    events: int = 0
    """Events read."""
    checks: list[str] = Field(default_factory=list)
    """Checks that ran."""
    findings: list[Problem] = Field(default_factory=list)
    """Problems, by seq."""
    warnings: list[str] = Field(default_factory=list)
    """Worth knowing but not a failure (no checkpoint given, older price table)."""

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def ok(self) -> bool:
        return not self.findings

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def first_bad_seq(self) -> int | None:
        seqs = [p.seq for p in self.findings if p.seq is not None]
        return min(seqs) if seqs else None

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def problems(self) -> list[str]:
        return [(f"seq {p.seq}: " if p.seq is not None else "") + f"[{p.check}] {p.message}"
                for p in self.findings]


def _check_chain(rows: list[EventRow], session_id: str, out: list[Problem]) -> None:
    expected, prev = 1, GENESIS
    for r in rows:
        if r.seq > expected:
            gap = f"seq {expected}" if r.seq == expected + 1 else f"seqs {expected}..{r.seq - 1}"
            out.append(Problem(seq=expected, check="chain",
                               message=f"{gap} missing: the events jump from {expected - 1} to {r.seq} "
                                       "(deleted)"))
        elif r.seq < expected:
            out.append(Problem(seq=r.seq, check="chain", message=f"seq {r.seq} appears twice"))
        if r.prev_hash != prev:
            out.append(Problem(seq=r.seq, check="chain",
                               message="prev_hash does not match the hash of the event before it "
                                       "(an earlier event was deleted, replaced or moved)"))
        if link_hash(r.prev_hash, r.body) != r.hash:
            out.append(Problem(seq=r.seq, check="chain",
                               message="content does not match its hash (edited)"))
        _check_body(r, session_id, out)
        expected, prev = r.seq + 1, r.hash


def _check_body(r: EventRow, session_id: str, out: list[Problem]) -> None:
    try:
        body = json.loads(r.body)
    except ValueError:
        out.append(Problem(seq=r.seq, check="chain", message="body is not JSON (edited)"))
        return
    said = (body.get("seq"), body.get("session_id"), body.get("kind")) if isinstance(body, dict) else None
    if said != (r.seq, session_id, r.kind):
        out.append(Problem(seq=r.seq, check="chain",
                           message=f"stored as seq {r.seq} ({r.kind}) but its body says "
                                   f"seq {said[0] if said else '?'} ({said[2] if said else '?'}) "
                                   "(reordered or moved)"))


def _check_checkpoint(rows: list[EventRow], cp: Checkpoint, session_id: str, out: list[Problem]) -> None:
    if cp.session_id != session_id:
        out.append(Problem(seq=None, check="checkpoint",
                           message=f"the checkpoint is for session {cp.session_id}, not {session_id}"))
        return
    by_seq = {r.seq: r for r in rows}
    last = max(by_seq, default=0)
    if last < cp.count:
        out.append(Problem(seq=last + 1, check="checkpoint",
                           message=f"truncated: the checkpoint of {cp.ts:%Y-%m-%d %H:%M:%S} UTC counted "
                                   f"{cp.count} events, the store ends at seq {last}"))
    elif (r := by_seq.get(cp.count)) is not None and r.hash != cp.head_hash:
        out.append(Problem(seq=cp.count, check="checkpoint",
                           message=f"hash of seq {cp.count} differs from the checkpoint's head hash: "
                                   f"events up to seq {cp.count} were rewritten (hashes recomputed)"))


def _check_anchor(store: TranscriptStore, rows: list[EventRow], session_id: str,
                  report: AuditReport) -> None:
    """The session's own anchor (written outside the database when it ended) is the default
    checkpoint: a database rewritten with recomputed hashes, or cut short, no longer matches."""
    try:
        anchor = store.anchor(session_id)
    except (PathRefused, ValueError, OSError) as exc:
        report.findings.append(Problem(seq=None, check="anchor", message=f"unreadable anchor: {exc}"))
        return
    ended = bool(rows) and rows[-1].kind == "session_ended"
    if anchor is None:
        if ended or any(r.kind == "session_ended" for r in rows):
            report.findings.append(Problem(
                seq=None, check="anchor",
                message=f"the session ended but its anchor {store.anchor_path(session_id)} is missing "
                        "(removed, or the session predates anchors)"))
        else:
            report.warnings.append("no anchor yet (the session is open or crashed) and no checkpoint "
                                   "given: a truncated tail cannot be detected")
        return
    report.checks.append("anchor")
    _check_checkpoint(rows, anchor, session_id, report.findings)
    last = rows[-1].seq if rows else 0
    if last > anchor.count:
        report.findings.append(Problem(seq=anchor.count + 1, check="anchor",
                                       message=f"{last - anchor.count} event(s) after the session's "
                                               "end anchor"))


def _check_model_call(store: TranscriptStore, seq: int, ev: ModelCall, report: AuditReport) -> None:
    tbl = pricing.table()
    if ev.pricing_version != tbl.version:
        report.warnings.append(f"seq {seq}: priced with table {ev.pricing_version}, this labwarden ships "
                               f"{tbl.version}; cost not recomputed")
        return
    try:
        c = pricing.cost(ev.model, ev.usage, tbl)
    except pricing.UnknownModel as exc:
        report.findings.append(Problem(seq=seq, check="cost", message=exc.problem))
        return
    if not math.isclose(c.total_usd, ev.cost_usd, abs_tol=COST_TOLERANCE_USD):
        report.findings.append(Problem(seq=seq, check="cost",
                                       message=f"stored cost ${ev.cost_usd:.6f}, "
                                               f"usage gives ${c.total_usd:.6f}"))
    row = store.db.execute("SELECT cost_usd FROM model_calls WHERE event_id = ?", [ev.id]).fetchone()
    if row is None or not math.isclose(row[0], ev.cost_usd, abs_tol=COST_TOLERANCE_USD):
        report.findings.append(Problem(seq=seq, check="cost",
                                       message="the model_calls table disagrees with the event "
                                               f"({'missing' if row is None else f'${row[0]:.6f}'})"))


def conditions_problem(ev: ToolCalled) -> str | None:
    """Why a measuring tool's result cannot be trusted, or None."""
    # sessions written before ToolCalled.measured: a measuring call always carried conditions
    if not (ev.measured or ev.conditions is not None) or not ev.call.ok:
        return None
    c = ev.conditions
    if c is None:
        return f"measurement by {ev.call.tool} carries no conditions"
    why = []
    if c.fingerprint_verified is not True:
        why.append(f"fingerprint not verified ({c.fingerprint_verified})")
    na = c.not_applicable or {}
    if "governor" in na:  # recorded as absent: fine only if no governor was read either
        if c.governors:
            why.append(f"governor recorded not applicable ({na['governor']}) yet read as "
                       f"{c.governors}")
    elif not c.governors or any(g != "performance" for g in c.governors):
        why.append(f"governors not all pinned to performance ({c.governors})")
    if "boost" in na:
        if not (isinstance(c.boost, str) and c.boost.startswith("n/a")):
            why.append(f"boost recorded not applicable ({na['boost']}) yet read as {c.boost!r}")
    elif not _boost_off(c.boost):
        why.append(f"boost not off ({c.boost!r})")
    return f"measurement by {ev.call.tool}: " + "; ".join(why) if why else None


def _boost_off(boost: str | bool | None) -> bool:
    if isinstance(boost, bool):
        return not boost
    return boost is not None and boost.strip().lower() in {"0", "off", "false", "disabled"}


def audit(store: TranscriptStore, session_id: str,
          checkpoint: Path | Checkpoint | None = None) -> AuditReport:
    """Verify one session; `report.ok` is False and `first_bad_seq` names the first bad event."""
    report = AuditReport(session_id=session_id)
    rows = store.rows(session_id)
    report.events = len(rows)
    report.checks.append("chain")
    _check_chain(rows, session_id, report.findings)
    if not rows:
        report.findings.append(Problem(seq=None, check="session", message="no events"))
    if store.db.execute("SELECT 1 FROM sessions WHERE id = ?", [session_id]).fetchone() is None:
        report.findings.append(Problem(seq=None, check="session", message="its row in `sessions` is gone"))
    if checkpoint is not None:
        report.checks.append("checkpoint")
        cp = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
        _check_checkpoint(rows, cp, session_id, report.findings)
    else:
        _check_anchor(store, rows, session_id, report)
    report.checks.append("integrity")
    integrity = store.integrity_check()
    if integrity != ["ok"]:
        report.findings.append(Problem(seq=None, check="integrity", message="; ".join(integrity[:5])))
    report.checks += ["cost", "conditions"]
    fleet = any('"place":"' in r.body for r in rows)  # a fleet's session: its events name places
    if fleet:
        report.checks.append("places")
    for r in rows:
        try:
            ev = parse_event(r.body)
        except ValidationError as exc:
            report.findings.append(Problem(seq=r.seq, check="chain",
                                           message=f"body is not a valid event: {exc.errors()[0]['msg']}"))
            continue
        if isinstance(ev, ModelCall):
            _check_model_call(store, r.seq, ev, report)
        elif isinstance(ev, ToolCalled) and (why := conditions_problem(ev)):
            report.findings.append(Problem(seq=r.seq, check="conditions", message=why))
        if fleet and isinstance(ev, ToolCalled) and ev.measured and ev.place is None:
            report.findings.append(Problem(seq=r.seq, check="places", message=f"{ev.call.tool} "
                                           "measured on a fleet but names no place"))
    report.checks.append("tree")
    for seq, why in calltree.problems(store.events(session_id)):
        report.findings.append(Problem(seq=seq, check="tree", message=why))
    if rows and rows[-1].kind != "session_ended":
        report.warnings.append("no session_ended event: the session is open, crashed, or was truncated")
    report.findings.sort(key=lambda p: (p.seq is None, p.seq or 0))
    return report
