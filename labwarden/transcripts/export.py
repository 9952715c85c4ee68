"""Export a session: JSON Lines (one event per line, with its chain hashes) or one self-contained
HTML page of the replay timeline."""

from __future__ import annotations

import json

from labwarden.transcripts.store import EventRow
from labwarden.transcripts.timeline import Timeline

FORMATS = ("jsonl", "html", "otlp", "otlp-proto")
"""otlp: OpenTelemetry spans as OTLP/JSON; otlp-proto: the same as protobuf (binary)."""


def jsonl(rows: list[EventRow]) -> str:
    """One line per event: seq, kind, prev_hash, hash and the body as an object. The body's
    canonical form (sorted keys, no whitespace, ensure_ascii off) re-hashes to `hash`."""
    return "".join(json.dumps({"seq": r.seq, "kind": r.kind, "prev_hash": r.prev_hash, "hash": r.hash,
                               "event": json.loads(r.body)}, ensure_ascii=False) + "\n" for r in rows)


def html(tl: Timeline) -> str:
    """The timeline as a standalone HTML page (inline CSS, no scripts, everything escaped)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("labwarden.transcripts", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("replay.html.j2").render(tl=tl)
