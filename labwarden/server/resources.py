"""MCP resources: lab status, runs and sweeps, flamegraphs and folded stacks, reports,
transcripts. Raw data stays server-side; a model reads it only when it asks, by id.

These are the templates (what can be read); browse.py lists the concrete resources a client
can open now (`resources/list`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from labwarden.core.paths import PathRefused, is_regular_file, within
from labwarden.core.records import RecordNotFound, RecordStore
from labwarden.lab.host.patchstore import PatchStore
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import LabSession
from labwarden.server.browse import FILE_TYPES, KINDS, inside
from labwarden.server.sessions import lab_for
from labwarden.tools.context import LabContext
from labwarden.transcripts.access import readable
from labwarden.transcripts.store import TranscriptError

_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


async def _lab(ctx: Context) -> LabSession:
    return await lab_for(ctx.request_context)


def register(server: MCPServer[Any]) -> None:
    @server.resource("labwarden://lab/{view}", name="lab", mime_type="application/json",
                     description="labwarden://lab/status: the lab right now (the lab_status tool; "
                     "read-only, guarded and logged).")
    async def lab_status(view: str, ctx: Context) -> str:
        if view != "status":
            raise ResourceError(f"unknown lab view {view!r}: use labwarden://lab/status")
        rec = await call_tool(await _lab(ctx), "lab_status", {})
        return json.dumps(rec.result if rec.ok else rec.error.model_dump() if rec.error else {})

    @server.resource("labwarden://records/{kind}", name="records", mime_type="application/json",
                     description="Ids of stored records of a kind: profiles, sweeps.")
    async def records(kind: str, ctx: Context) -> str:
        if kind not in KINDS:
            raise ResourceError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        return json.dumps(RecordStore((await _lab(ctx)).data_dir).ids(KINDS[kind]))

    @server.resource("labwarden://records/{kind}/{rid}", name="record", mime_type="application/json",
                     description="One stored record (a measurement's windows and conditions, a sweep...).")
    async def record(kind: str, rid: str, ctx: Context) -> str:
        if kind not in KINDS:
            raise ResourceError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        store = RecordStore((await _lab(ctx)).data_dir)
        try:
            return store.path(KINDS[kind], rid).read_text()  # resolved inside records/<kind>/
        except (RecordNotFound, PathRefused) as exc:
            raise ResourceError(f"{exc.problem}; {exc.remedy}") from None

    @server.resource("labwarden://artifacts/{rid}/{name}", name="artifact",
                     description="An artifact of a record: flamegraph SVGs, folded stacks, reports. "
                     "List them with labwarden://artifacts/{rid}.")
    async def artifact(rid: str, name: str, ctx: Context) -> str:
        path = _artifact_path(await _lab(ctx), rid, name)
        if path.suffix not in FILE_TYPES:
            raise ResourceError(f"{name} is binary ({path.suffix}); text artifacts only: "
                                f"{', '.join(FILE_TYPES)}")
        return path.read_text(errors="replace")

    @server.resource("labwarden://artifacts/{rid}", name="artifact_list", mime_type="application/json",
                     description="Artifact files of a record, with sizes.")
    async def artifact_list(rid: str, ctx: Context) -> str:
        base = _artifact_path(await _lab(ctx), rid, None)
        listed = {}
        for p in sorted(base.iterdir()):
            real = inside(base, p)  # a symlink out of the record's directory is not listed
            if real is not None:
                listed[p.name] = real.stat().st_size
        return json.dumps(listed)

    @server.resource("labwarden://symbolized/{key}/{name}", name="flamegraph",
                     description="A symbolize result's files: flame.svg (interactive flame graph), "
                     "stacks.folded, diff-<key>.svg (differential). `key` is in the symbolize result.")
    async def symbolized(key: str, name: str, ctx: Context) -> str:
        if not re.fullmatch(r"[0-9a-f]{16}", key) or not _FILE.fullmatch(name):
            raise ResourceError("keys are 16 hex digits and names plain file names (flame.svg)")
        try:
            path = within((await _lab(ctx)).data_dir / "symbolized", key, name, what="symbolized file")
        except PathRefused as exc:
            raise ResourceError(f"{exc.problem}; {exc.remedy}") from None
        if path.suffix not in (".svg", ".folded") or not is_regular_file(path):
            raise ResourceError(f"no symbolized file {key}/{name}: flame.svg, stacks.folded, diff-*.svg")
        return path.read_text(errors="replace")

    @server.resource("labwarden://reports/{name}", name="report", mime_type="text/html",
                     description="A report the report tool wrote (e.g. labwarden://reports/"
                     "report.html): one self-contained HTML page.")
    async def report(name: str, ctx: Context) -> str:
        if not _FILE.fullmatch(name) or not name.endswith(".html"):
            raise ResourceError(f"{name!r} is not a report file name: use e.g. report.html")
        data_dir = (await _lab(ctx)).data_dir
        path = inside(data_dir, data_dir / "reports" / name)  # symlinks out of the dir: refused
        if path is None:
            raise ResourceError(f"no report {name} in the lab's reports/: write one with the "
                                "report tool; resources/list lists them")
        return path.read_text(errors="replace")

    @server.resource("labwarden://patches/{pid}", name="patches", mime_type="application/json",
                     description="Submitted patches (patch_submit) of this client's principal, "
                     "and shared ones: labwarden://patches/index lists them (id, name, files, base, "
                     "author session, build); labwarden://patches/ID is one, with its diff.")
    async def patches(pid: str, ctx: Context) -> str:
        lab = await _lab(ctx)
        store = PatchStore(lab.data_dir / "patches")
        # another principal's patch does not exist for this client, unless it was shared
        if pid == "index":
            return json.dumps([store.shown(m, lab.principal).model_dump(mode="json")
                               for m in store.seen(lab.principal)])
        meta = store.meta(pid)
        diff = store.diff(pid)  # both resolved inside the store: planted symlinks are no patch
        if meta is None or diff is None or not store.visible(meta, lab.principal):
            known = ", ".join(m.id for m in store.seen(lab.principal)[-8:]) or "none yet"
            raise ResourceError(f"no submitted patch {pid[:64]!r}; known: {known}")
        return json.dumps({**store.shown(meta, lab.principal).model_dump(mode="json"), "diff": diff})

    @server.resource("labwarden://transcripts/{session}", name="transcript", mime_type="application/json",
                     description="A transcript session's events (the current one: 'current'); only "
                     "sessions of this client's own principal. Its session_started, then the "
                     f"newest events that fit in {TRANSCRIPT_CHARS // 1024} KiB (the whole "
                     "session: `labwarden transcripts show ID --json`).")
    async def transcript(session: str, ctx: Context) -> str:
        lab = await _lab(ctx)
        if lab.transcript is None:
            raise ResourceError("this server runs without a transcript")
        if session == "current":
            sid = lab.session_id
        else:
            try:  # another principal's session does not exist for this client
                sid = lab.transcript.resolve(session, readable(lab.transcript, lab.principal))
            except TranscriptError as exc:
                raise ResourceError(f"{exc.problem}; {exc.remedy}") from None
        assert sid is not None
        return _newest_events(lab.transcript.events(sid))


TRANSCRIPT_CHARS = 512 * 1024
"""A transcript read stays well under a client's message limit (the SDK's: 1 MiB per event)."""


def _newest_events(events: list[Any]) -> str:
    """session_started, then the newest events whose JSON fits in TRANSCRIPT_CHARS."""
    dumped = [json.dumps(e.model_dump(mode="json")) for e in events]
    keep: list[str] = []
    size = len(dumped[0]) if dumped else 0
    for text in reversed(dumped[1:]):
        if size + len(text) + 2 > TRANSCRIPT_CHARS:
            break
        keep.append(text)
        size += len(text) + 2
    return "[" + ", ".join(dumped[:1] + keep[::-1]) + "]"


def _artifact_path(lab: LabContext, rid: str, name: str | None) -> Path:
    """An artifact (or a record's artifact directory), resolved inside artifacts/<rid>/."""
    if not re.fullmatch(r"[a-z]{2,12}-[0-9a-f]{12}", rid) or (name is not None and not _FILE.fullmatch(name)):
        raise ResourceError("artifact ids look like prof-0123456789ab and names are plain file names")
    try:
        path = RecordStore(lab.data_dir).artifact(rid, name)
    except (RecordNotFound, PathRefused) as exc:
        raise ResourceError(f"{exc.problem}; {exc.remedy}") from None
    if not (path.is_dir() if name is None else is_regular_file(path)):
        raise ResourceError(f"no artifact {rid}/{name or ''}")
    return path
