"""The transcript store: SQLite (WAL), the sqlite3 module (see _Db for why not sqlite-utils).

Every event is a row of `events` whose `hash` covers its canonical body and the previous row's
hash. `append` commits before it returns, so a returned append is acknowledged: it survives
the process being killed. Several processes may share one file and never fork a session's
chain: an append either takes the write lock (BEGIN IMMEDIATE) before reading the chain head,
or inserts after the head this store last wrote, which the UNIQUE (session_id, seq) index
refuses if another writer got there first (the append then reads the head afresh).

Durability: a durable append (the default) is committed with synchronous=FULL, i.e. the WAL is
fsynced before it returns. `durable=False` commits with synchronous=NORMAL: the WAL frames are
written (they survive kill -9 of this process) but reach the disk at the next durable commit,
which fsyncs the whole WAL, earlier frames included, or at a checkpoint. A power cut can then
lose only the non-durable tail after the last durable event, and never breaks the chain: the
WAL is replayed as a prefix. The tool runner uses it for calls that change nothing (reads,
refusals), so a read costs no fsync (see bench/tool_overhead.py).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.core.events import (
    SCHEMA_VERSION,
    Event,
    EventBase,
    ModelCall,
    Note,
    SessionEnded,
    SessionStarted,
    parse_event,
)
from labwarden.core.paths import within
from labwarden.core.provenance import labwarden_provenance
from labwarden.transcripts.chain import GENESIS, body_json, link_hash
from labwarden.transcripts.pricing import tokens_by_kind


class TranscriptError(LabError):
    """A transcript problem with a remedy (no such database or session, a newer schema)."""

    kind = "invalid_input"


class StoredEvent(BaseModel):
    """An event as stored: its place in the chain and the event itself."""


    session_id: str
    """Session id."""
    seq: int
    """Position in the session, from 1."""
    prev_hash: str
    """Hash of the previous event (GENESIS for the first)."""
    hash: str
    """sha256(prev_hash || body)."""
    event: Event
    """The event."""


class EventRow(BaseModel):
    """A raw row of `events`, unparsed (what audit reads)."""

    session_id: str
    seq: int
    kind: str
    body: str
    prev_hash: str
    hash: str


class SessionInfo(BaseModel):
    """One row of `labwarden transcripts list`."""


    id: str
    """Session id."""
    started_at: str
    """UTC ISO time of session_started."""
    client: str
    """cli, mcp, chat, loop or playbook."""
    lab_name: str | None = None
    """Lab name."""
    events: int = 0
    """Number of events."""
    cost_usd: float = 0.0
    """Dollars of its model calls."""
    ended_at: str | None = None
    """UTC ISO time of session_ended, if it ended."""
    end_reason: str | None = None
    """Why it ended."""


class Checkpoint(BaseModel):
    """Count and head hash of a session: exported, it makes truncation detectable."""


    session_id: str
    """Session id."""
    count: int
    """Number of events at checkpoint time (= seq of the head)."""
    head_hash: str
    """Hash of the event at seq `count`."""
    ts: datetime = Field(default_factory=lambda: datetime.now(UTC))
    """When the checkpoint was taken (UTC)."""
    schema_version: int = SCHEMA_VERSION
    """Event schema version of the store."""


class _Db:
    """The transcript's SQLite connection, with the two helpers the store uses.

    Plain sqlite3, not sqlite-utils: the store writes a handful of fixed statements, and
    sqlite-utils (with the numpy, pluggy, click and dateutil it imports) cost ~70 ms of every
    `labwarden call` -- a third of what a command may add to its tool (bench/startup.py)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] = ()) -> Iterator[dict[str, Any]]:
        cursor = self.conn.execute(sql, params)
        names = [d[0] for d in cursor.description]
        for row in cursor:
            yield dict(zip(names, row, strict=True))

    def insert(self, table: str, row: dict[str, Any]) -> None:
        """INSERT one row (`table` and the keys are this module's own names, never input)."""
        cols = ", ".join(f'"{k}"' for k in row)
        self.conn.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({", ".join("?" * len(row))})',
                          list(row.values()))

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


SCHEMA = """
CREATE TABLE IF NOT EXISTS "meta" ("key" TEXT PRIMARY KEY, "value" TEXT);
CREATE TABLE IF NOT EXISTS "sessions" ("id" TEXT PRIMARY KEY, "started_at" TEXT, "client" TEXT,
  "lab_name" TEXT, "lab_profile" TEXT, "labwarden_version" TEXT, "git_commit" TEXT,
  "git_dirty" INTEGER, "ended_at" TEXT, "end_reason" TEXT);
CREATE TABLE IF NOT EXISTS "events" ("id" TEXT NOT NULL, "session_id" TEXT NOT NULL,
  "seq" INTEGER NOT NULL, "kind" TEXT NOT NULL, "ts" TEXT, "body" TEXT NOT NULL,
  "prev_hash" TEXT NOT NULL, "hash" TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS "idx_events_session_id_seq" ON "events" ("session_id", "seq");
CREATE TABLE IF NOT EXISTS "model_calls" ("event_id" TEXT PRIMARY KEY, "session_id" TEXT,
  "seq" INTEGER, "model" TEXT, "input_tokens" INTEGER, "output_tokens" INTEGER,
  "cache_write_5m_tokens" INTEGER, "cache_write_1h_tokens" INTEGER, "cache_read_tokens" INTEGER,
  "cost_usd" REAL, "pricing_version" TEXT);
CREATE INDEX IF NOT EXISTS "idx_model_calls_session_id_seq" ON "model_calls" ("session_id", "seq");
CREATE TABLE IF NOT EXISTS "notes" ("event_id" TEXT PRIMARY KEY, "session_id" TEXT, "seq" INTEGER,
  "ts" TEXT, "author" TEXT, "text" TEXT);
"""
"""The tables (as sqlite-utils wrote them before: databases written then read the same).
Events are keyed by rowid: nothing looks an event up by its id (a random 64-bit value), and a
unique index on it would cost every append one more B-tree page written to the WAL."""


DEFAULT_DB = Path("labwarden-data/transcripts.db")
_SIDE_EFFECTS = (ModelCall, Note, SessionEnded)
"""Events that also write another table: always appended in an explicit transaction."""


class TranscriptStore:
    """Open (and create, unless `create=False`) a transcript database."""

    def __init__(self, path: Path | str, *, create: bool = True, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise TranscriptError(f"no transcript database at {self.path}",
                                      "pass --db PATH or set LABWARDEN_TRANSCRIPTS")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # driver autocommit: a lone INSERT is then its own transaction, without the implicit
        # BEGIN and the COMMIT the sqlite3 module would add; writes of several statements take
        # the lock explicitly (_write)
        self.db = _Db(sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None))
        if self.db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self.db.execute("PRAGMA journal_mode=wal")
        self._synchronous = ""
        self._sessions: set[str] = set()
        self._heads: dict[str, tuple[int, str]] = {}
        """Each session's (seq, hash) after this store's last committed append to it."""
        with self._write():
            self._create_schema()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> TranscriptStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_synchronous(self, durable: bool) -> None:
        mode = "FULL" if durable else "NORMAL"
        if self._synchronous != mode:  # a pragma per mode change, not per commit
            self.db.execute(f"PRAGMA synchronous={mode}")
            self._synchronous = mode

    @contextmanager
    def _write(self, durable: bool = True) -> Iterator[None]:
        """One write transaction holding the write lock from its start; committed on exit,
        with the WAL fsynced when durable."""
        self._set_synchronous(durable)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.rollback()
            raise
        self.db.execute("COMMIT")

    def _create_schema(self) -> None:
        db = self.db
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            db.insert("meta", {"key": "schema_version", "value": str(SCHEMA_VERSION)})
        elif int(row[0]) > SCHEMA_VERSION:
            raise TranscriptError(f"{self.path} has transcript schema {row[0]}, this labwarden reads "
                                  f"up to {SCHEMA_VERSION}", "upgrade labwarden to read it")
        elif int(row[0]) < SCHEMA_VERSION:  # events of the new version follow: say so for readers
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])

    # -- writing ---------------------------------------------------------------------------

    def start_session(self, client: str, *, lab_profile: str | None = None, lab_name: str | None = None,
                      session_id: str | None = None, principal: str | None = None,
                      mcp_session_id: str | None = None) -> str:
        """Create a session and write its session_started event; returns the session id."""
        version, commit, dirty = labwarden_provenance()
        sid = session_id or f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        ev = SessionStarted(client=client, lab_profile=lab_profile, lab_name=lab_name,
                            labwarden_version=version, git_commit=commit, git_dirty=dirty,
                            principal=principal, mcp_session_id=mcp_session_id)
        with self._write():
            self.db.insert("sessions", {"id": sid, "started_at": ev.ts.isoformat(), "client": client,
                                        "lab_name": lab_name, "lab_profile": lab_profile,
                                        "labwarden_version": version, "git_commit": commit,
                                        "git_dirty": None if dirty is None else int(dirty)})
            self._append_locked(sid, ev)
        return sid

    def append(self, session_id: str, event: Event) -> StoredEvent:
        """Append one event; committed (acknowledged) when this returns."""
        return self.append_many(session_id, [event])[0]

    def append_many(self, session_id: str, events: Sequence[Event], *,
                    durable: bool = True) -> list[StoredEvent]:
        """Append several events in one transaction (at most one fsync): all acknowledged, or
        none. durable=False skips the fsync (see the module docstring). The store sets each
        event's session_id and seq."""
        links = self.write(session_id, events, durable=durable)
        return [StoredEvent(session_id=session_id, seq=seq, prev_hash=prev, hash=digest, event=ev)
                for ev, (seq, prev, digest) in zip(events, links, strict=True)]

    def write(self, session_id: str, events: Sequence[EventBase], *,
              durable: bool = True) -> list[tuple[int, str, str]]:
        """append_many() for callers that keep no StoredEvent (the tool runner, once per call):
        the same commit, returning each event's (seq, prev_hash, hash)."""
        try:
            links = self._append_txn(session_id, events, durable)
        except sqlite3.IntegrityError:
            # another process appended to this session since we last looked: our cached head
            # is stale (its seq is taken), and the transaction rolled back. Read it afresh.
            self._heads.pop(session_id, None)
            links = self._append_txn(session_id, events, durable)
        if any(isinstance(ev, SessionEnded) for ev in events):
            self.write_anchor(session_id)  # the head, kept outside the database
        return links

    def _append_txn(self, session_id: str, events: Sequence[EventBase],
                    durable: bool) -> list[tuple[int, str, str]]:
        head = self._heads.get(session_id)
        if head is not None and len(events) == 1 and not isinstance(events[0], _SIDE_EFFECTS):
            # the hot path (one tool call, head known): a single INSERT is its own transaction
            # (autocommit), so no BEGIN/COMMIT round trips; a stale head fails on the UNIQUE
            # index and writes nothing
            self._set_synchronous(durable)
            link = self._append_locked(session_id, events[0], head)
            self._heads[session_id] = (link[0], link[2])
            return [link]
        with self._write(durable):
            self._require_session(session_id)
            head = self._heads.get(session_id) or self._read_head(session_id)
            links = []
            for ev in events:
                links.append(self._append_locked(session_id, ev, head))
                head = (links[-1][0], links[-1][2])
        self._heads[session_id] = head  # only once committed
        return links

    def _read_head(self, session_id: str) -> tuple[int, str]:
        row = self.db.execute("SELECT seq, hash FROM events WHERE session_id = ? ORDER BY seq DESC "
                              "LIMIT 1", [session_id]).fetchone()
        return (row[0], row[1]) if row else (0, GENESIS)

    def _require_session(self, session_id: str) -> None:
        if session_id in self._sessions:  # sessions are never deleted: one look per store
            return
        if self.db.execute("SELECT 1 FROM sessions WHERE id = ?", [session_id]).fetchone() is None:
            raise TranscriptError(f"no session {session_id!r} in {self.path}",
                                  "start one with start_session() first")
        self._sessions.add(session_id)

    def end_session(self, session_id: str, reason: str = "done") -> StoredEvent:
        """Write session_ended."""
        return self.append(session_id, SessionEnded(reason=reason))

    def _append_locked(self, session_id: str, event: EventBase,
                       head: tuple[int, str] | None = None) -> tuple[int, str, str]:
        """Insert one event after `head` (seq, hash), read from the table when not given; returns
        its (seq, prev_hash, hash). The UNIQUE (session_id, seq) index makes a stale head fail
        instead of forking the chain."""
        last, prev = head or self._read_head(session_id)
        seq = last + 1
        kind = getattr(event, "kind", None)
        if kind is None:
            raise TypeError(f"{type(event).__name__} is not a transcript event (no `kind`)")
        # set in place, not model_copy(update=...): the copy was a third of the append's Python
        # (bench/tool_overhead.py), and callers build each event for its one append
        event.session_id = session_id
        event.seq = seq
        body = body_json(event)
        digest = link_hash(prev, body)
        # the statement written out: this runs once per tool call
        self.db.conn.execute("INSERT INTO events (id, session_id, seq, kind, ts, body, prev_hash, hash) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             [event.id, session_id, seq, kind, event.ts.isoformat(), body, prev, digest])
        self._side_tables(event)
        if isinstance(event, SessionEnded):
            self.db.execute("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ?",
                            [event.ts.isoformat(), event.reason, session_id])
        return seq, prev, digest

    def _side_tables(self, ev: EventBase) -> None:
        if isinstance(ev, ModelCall):
            t = tokens_by_kind(ev.usage)
            self.db.insert("model_calls", {
                "event_id": ev.id, "session_id": ev.session_id, "seq": ev.seq, "model": ev.model,
                "input_tokens": t["input"], "output_tokens": t["output"],
                "cache_write_5m_tokens": t["cache_write_5m"], "cache_write_1h_tokens": t["cache_write_1h"],
                "cache_read_tokens": t["cache_read"], "cost_usd": ev.cost_usd,
                "pricing_version": ev.pricing_version})
        elif isinstance(ev, Note):
            self.db.insert("notes", {"event_id": ev.id, "session_id": ev.session_id, "seq": ev.seq,
                                     "ts": ev.ts.isoformat(), "author": ev.author, "text": ev.text})

    # -- reading ---------------------------------------------------------------------------

    def rows(self, session_id: str) -> list[EventRow]:
        """The session's raw event rows, by seq (unparsed, unverified)."""
        return [EventRow(**r) for r in self.db.query(
            "SELECT session_id, seq, kind, body, prev_hash, hash FROM events WHERE session_id = ? "
            "ORDER BY seq", [session_id])]

    def events(self, session_id: str) -> list[StoredEvent]:
        """The session's events, parsed, by seq."""
        return [StoredEvent(session_id=r.session_id, seq=r.seq, prev_hash=r.prev_hash, hash=r.hash,
                            event=parse_event(r.body)) for r in self.rows(session_id)]

    def sessions(self) -> list[SessionInfo]:
        """Every session, newest first, with event count and dollars."""
        sql = ("SELECT s.id, s.started_at, s.client, s.lab_name, s.ended_at, s.end_reason, "
               "(SELECT count(*) FROM events e WHERE e.session_id = s.id) AS events, "
               "(SELECT coalesce(sum(cost_usd), 0) FROM model_calls m WHERE m.session_id = s.id) AS cost_usd "
               "FROM sessions s ORDER BY s.started_at DESC, s.id DESC")
        return [SessionInfo(**r) for r in self.db.query(sql)]

    def session(self, session_id: str) -> dict[str, Any]:
        """The session's row of `sessions`."""
        rows = list(self.db.query("SELECT * FROM sessions WHERE id = ?", [session_id]))
        if not rows:
            raise TranscriptError(f"no session {session_id!r} in {self.path}",
                                  "list them with: labwarden transcripts list")
        return rows[0]

    def resolve(self, id_or_prefix: str, allowed: Callable[[str], bool] | None = None) -> str:
        """A full session id from an id or a unique prefix of one. With `allowed`, sessions it
        rejects do not exist for this caller (not even in an "ambiguous" list)."""
        ids: list[str] = [r["id"] for r in self.db.query(
            "SELECT id FROM sessions WHERE id = ? OR id LIKE ? ESCAPE '\\'",
            [id_or_prefix, _like_prefix(id_or_prefix)])]
        if allowed is not None:
            ids = [i for i in ids if allowed(i)]
        if id_or_prefix in ids:
            return id_or_prefix
        if len(ids) == 1:
            return ids[0]
        if allowed is None and not ids and self.db.execute(
                "SELECT 1 FROM events WHERE session_id = ? LIMIT 1", [id_or_prefix]).fetchone():
            return id_or_prefix  # its sessions row is gone; let audit say so
        raise TranscriptError(
            f"{'ambiguous' if ids else 'no'} session {id_or_prefix[:64]!r} in {self.path}"
            + (f": matches {', '.join(ids[:5])}" if ids else ""),
            "give more of the id; list them with: labwarden transcripts list")

    def checkpoint(self, session_id: str) -> Checkpoint:
        """Count and head hash of the session now."""
        head = self.db.execute("SELECT seq, hash FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                               [session_id]).fetchone()
        if head is None:
            raise TranscriptError(f"session {session_id!r} has no events", "nothing to checkpoint")
        return Checkpoint(session_id=session_id, count=head[0], head_hash=head[1])

    # -- anchors: each session's head, outside the database -----------------------------------

    @property
    def anchors(self) -> Path:
        """Where each ended session's checkpoint is written: beside the database, not in it (a
        rewritten database with recomputed hashes no longer matches its anchors)."""
        return self.path.parent / f"{self.path.name}.anchors"

    def anchor_path(self, session_id: str) -> Path:
        """The anchor file of a session: its id, contained in the anchors dir (core/paths.py)."""
        return within(self.anchors, f"{session_id}.json", what="session id")

    def write_anchor(self, session_id: str) -> Checkpoint:
        """Write the session's checkpoint to its anchor file (atomically; fsynced)."""
        cp = self.checkpoint(session_id)
        path = self.anchor_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(cp.model_dump_json(indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        return cp

    def anchor(self, session_id: str) -> Checkpoint | None:
        """The session's anchor, if one was written."""
        path = self.anchor_path(session_id)
        return load_checkpoint(path) if path.is_file() else None

    def principal(self, session_id: str) -> str | None:
        """Who the session acts for (its session_started event); None for older sessions."""
        row = self.db.execute("SELECT body FROM events WHERE session_id = ? AND seq = 1",
                              [session_id]).fetchone()
        if row is None:
            return None
        try:
            principal: str | None = json.loads(row[0]).get("principal")
        except (ValueError, AttributeError):
            return None
        return principal

    def export_checkpoint(self, session_id: str, path: Path | str) -> Checkpoint:
        """Write the checkpoint as JSON to `path` (keep it somewhere the transcript is not)."""
        cp = self.checkpoint(session_id)
        Path(path).write_text(cp.model_dump_json(indent=2) + "\n")
        return cp

    def integrity_check(self) -> list[str]:
        """SQLite's `PRAGMA integrity_check`: ["ok"] when the file is sound."""
        return [r[0] for r in self.db.execute("PRAGMA integrity_check").fetchall()]


def load_checkpoint(path: Path | str) -> Checkpoint:
    """Read a checkpoint written by export_checkpoint."""
    return Checkpoint.model_validate(json.loads(Path(path).read_text()))


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
