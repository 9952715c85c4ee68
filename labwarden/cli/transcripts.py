"""`labwarden transcripts ...`: list, show, replay, audit, export and checkpoint sessions."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from labwarden.cli import replay
from labwarden.cli.common import err, fail, fail_on, load_profile, out
from labwarden.runtime.session import default_transcript
from labwarden.transcripts import export, timeline
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import DEFAULT_DB, TranscriptError, TranscriptStore

app = typer.Typer(help="Transcripts: every session's tool calls, guard decisions, model "
                       "calls and costs, hash-chained.", no_args_is_help=True)

DbOpt = Annotated[Path | None, typer.Option(
    "--db", envvar="LABWARDEN_TRANSCRIPTS", help="transcript database (env LABWARDEN_TRANSCRIPTS; "
    "default: transcripts.db in the data dir of the --lab profile)")]
LabDirOpt = Annotated[Path | None, typer.Option(
    "--lab", help="the lab profile whose data dir holds the transcripts (default $LABWARDEN_LAB "
    "or .vlab/lab.toml); --db wins")]
IdArg = Annotated[str, typer.Argument(help="session id, or a unique prefix of one")]


def db_path(db: Path | None, lab: Path | None) -> Path:
    """The transcript database: --db (or $LABWARDEN_TRANSCRIPTS), else the profile's data dir's
    (--lab, else $LABWARDEN_LAB or .vlab/lab.toml) -- where its sessions wrote -- else the old
    default ./labwarden-data/transcripts.db when it exists; else a failure naming where it looked."""
    if db is not None:
        return db
    profile = lab or Path(os.environ.get("LABWARDEN_LAB") or ".vlab/lab.toml")
    if profile.is_file():
        return default_transcript(load_profile(profile))
    if lab is None and DEFAULT_DB.is_file():
        return DEFAULT_DB
    looked = f"{profile.absolute()}" + ("" if lab is not None else
                                        f" ($LABWARDEN_LAB or the default), nor {DEFAULT_DB.absolute()}")
    fail(f"no transcript database: no --db, no $LABWARDEN_TRANSCRIPTS, and no lab profile at "
         f"{looked}", "pass --lab PROFILE (its data dir's transcripts.db), --db PATH, or set "
         "LABWARDEN_TRANSCRIPTS", 2)


@contextmanager
def _open(db: Path | None, lab: Path | None = None) -> Iterator[TranscriptStore]:
    db = db_path(db, lab)
    try:
        with TranscriptStore(db, create=False) as store:
            yield store
    except TranscriptError as exc:
        fail_on(exc)
    except sqlite3.DatabaseError as exc:
        fail(f"{db}: {exc}", "check that --db names a labwarden transcript database")


@app.command("list")
def list_cmd(db: DbOpt = None, lab: LabDirOpt = None) -> None:
    """List sessions, newest first, with event counts and dollars."""
    with _open(db, lab) as store:
        sessions = store.sessions()
    table = Table("client", "lab", "events", "$", "ended")
    table.columns.insert(0, Column("started (UTC)", no_wrap=True))
    table.columns.insert(0, Column("id", no_wrap=True))
    for s in sessions:
        table.add_row(Text(s.id), s.started_at[:19], Text(s.client), Text(s.lab_name or ""), str(s.events),
                      f"{s.cost_usd:.4f}", Text(s.end_reason or "open"))
    out.print(table if sessions else f"no sessions in {escape(str(db_path(db, lab)))}")


@app.command("show")
def show(session: IdArg, db: DbOpt = None, lab: LabDirOpt = None,
         json_out: Annotated[bool, typer.Option("--json", help="the stored events as JSON")] = False) -> None:
    """Show a session's stored events: seq, time, kind, chain hashes."""
    with _open(db, lab) as store:
        sid = store.resolve(session)
        info, events = store.session(sid), store.events(sid)
    if json_out:
        typer.echo("[" + ",\n".join(e.model_dump_json() for e in events) + "]")
        return
    out.print(Text(f"session {sid}: {info['client']}, lab {info['lab_name']}, started {info['started_at']}"))
    table = Table("seq", "ts (UTC)", "kind", "id", "prev_hash", "hash")
    for e in events:
        table.add_row(str(e.seq), e.event.ts.isoformat()[:23], e.event.kind, e.event.id, e.prev_hash[:12],
                      e.hash[:12])
    out.print(table)


@app.command("replay")
def replay_cmd(session: IdArg, db: DbOpt = None, lab: LabDirOpt = None) -> None:
    """Replay a session as a timeline: every call, decision, artifact and cost, with totals."""
    with _open(db, lab) as store:
        tl = timeline.of_session(store, store.resolve(session))
    out.print(replay.render(tl))


@app.command("audit")
def audit_cmd(session: IdArg, db: DbOpt = None, lab: LabDirOpt = None,
              checkpoint: Annotated[Path | None, typer.Option(
                  "--checkpoint", help="checkpoint file from `transcripts checkpoint` (detects truncation)",
                  exists=True, dir_okay=False)] = None) -> None:
    """Verify the hash chain, a checkpoint, file integrity, costs, measurement conditions and the
    tree of nested calls (each under its parent, inside its time span).

    Exit code 0 when everything holds, 1 when something does (the first bad event is named)."""
    with _open(db, lab) as store:
        report = audit(store, store.resolve(session), checkpoint)
    for w in report.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}")
    if report.ok:
        out.print(f"[green]ok[/green]: {report.events} events; checks: {', '.join(report.checks)}")
        return
    for p in report.problems:
        out.print(f"[red]problem:[/red] {escape(p)}")
    fail(f"audit failed: first bad event is seq {report.first_bad_seq}"
          if report.first_bad_seq is not None else "audit failed",
          "the transcript was changed after it was written: keep the file as evidence, compare it with "
          "an exported copy (transcripts export) and do not trust events from the first bad seq on")


@app.command("export")
def export_cmd(session: IdArg, db: DbOpt = None, lab: LabDirOpt = None,
               format: Annotated[str, typer.Option("--format", help="jsonl, html, otlp (OpenTelemetry "
                                                   "spans, OTLP/JSON) or otlp-proto (binary, "
                                                   "needs -o)")] = "jsonl",
               output: Annotated[Path | None, typer.Option("-o", "--output", help="file (default stdout)")]
               = None) -> None:
    """Export a session as JSON Lines (events with hashes), a self-contained HTML timeline, or
    OpenTelemetry spans with the GenAI and MCP semantic-convention attributes (OTLP)."""
    if format not in export.FORMATS:
        fail(f"unknown format {format!r}", f"use --format {' or '.join(export.FORMATS)}")
    if format == "otlp-proto" and output is None:
        fail("otlp-proto is binary", "write it to a file with -o FILE (or use --format otlp)")
    with _open(db, lab) as store:
        sid = store.resolve(session)
        data: str | bytes
        if format == "jsonl":
            data = export.jsonl(store.rows(sid))
        elif format == "html":
            data = export.html(timeline.of_session(store, sid))
        else:
            from labwarden.transcripts import otlp  # protobuf: imported only when asked for

            req = otlp.spans(sid, store.events(sid))
            data = otlp.to_json(req) if format == "otlp" else req.SerializeToString()
    if output is None:
        typer.echo(data, nl=False)
    else:
        output.write_bytes(data) if isinstance(data, bytes) else output.write_text(data)
        err.print(f"wrote {escape(str(output))}")


@app.command("checkpoint")
def checkpoint_cmd(session: IdArg,
                   output: Annotated[Path, typer.Option("-o", "--output", help="checkpoint file to write")],
                   db: DbOpt = None, lab: LabDirOpt = None) -> None:
    """Export a checkpoint (event count + head hash); keep it apart from the database."""
    with _open(db, lab) as store:
        cp = store.export_checkpoint(store.resolve(session), output)
    out.print(Text(f"checkpoint {cp.session_id}: {cp.count} events, head {cp.head_hash[:16]} -> {output}"))
