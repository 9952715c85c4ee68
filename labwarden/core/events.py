"""Transcript events: a discriminated union of pydantic models keyed by `kind`.

One union with a discriminator (inspect_ai's choice) makes reading a stored event one keyed
lookup, and the schema is the documentation: every field carries a one-line docstring.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from labwarden.core.call import ToolCallRecord
from labwarden.core.conditions import CallConditions
from labwarden.core.devtext import UNTRUSTED_NOTE
from labwarden.core.ids import random_hex
from labwarden.core.usage import Usage

# Version of the stored event bodies. Do NOT reorder, rename or remove fields of any event, nor
# change a `kind` literal, without bumping it: bodies are hashed as written and read back by
# these models. Adding a field with a default keeps the version: old bodies read as before and
# older readers ignore the key. History: 1 (2026-11) first version; ToolCalled.guard added;
# ToolCalled.measured added (the spec's `measures`, so audit needs no list of tool names).
# 2 (2026-11): new kinds resource_read and request_refused (every request is logged at the
# door; a reader of version 1 cannot parse them); SessionStarted.principal and .mcp_session_id.
# 3 (2026-11): new kind request_served (listings and prompts are logged at the door too).
# 4 (2026-11): ToolCalled.parent_id and GuardDecision.parent_id -- a tool's nested calls (an
# experiment's flashes, verifications, windows) are calls of their own, logged as a tree; a
# version-3 body reads as a top-level call (parent_id None). EventBase.place added (a fleet's
# events name their place; an older body reads as None).
SCHEMA_VERSION = 4

RefusalCode = Literal[
    "invalid_input",          # the arguments do not match the tool's schema
    "too_deep",               # the arguments nest deeper than core/nesting.MAX_DEPTH levels
    "unsafe_argument",        # control characters, option injection, shell-looking identifiers
    "unsafe_path",            # outside the allowed roots, symlink escape, prefix look-alike
    "suspect_not_allowed",    # SIGSTOP of something not on the profile's allowlist
    "lease_held",             # another session holds the DUT
    "place_held",             # someone else holds (or has reserved) the DUT's labgrid place
    "board_unknown",          # a flash failed or was interrupted: only a health check may run
    "board_bad",              # a health check failed: a person must clear it
    "fingerprint_unverified", # measuring or acting on an image nobody verified since the flash
    "env_unpinned",           # governor/boost not pinned and healing is off
    "topology_drifted",       # VAPs/channels/process manager drifted and healing is off
    "budget_exceeded",        # tokens, dollars, wall time, tool calls or flashes per hour
    "tool_unknown",           # no such tool: nothing covers it, so it is refused
    "not_applicable",         # the tool exists but this lab lacks what it needs (lab/features.py)
]
"""The guard's closed set of refusal codes."""


class EventBase(BaseModel):
    """What every event has. The attribute docstrings below document the fields for people;
    they are not extracted into the JSON schema (pydantic's use_attribute_docstrings re-reads
    each class's source at import: ~40 ms of every command, and nothing shows these schemas)."""

    id: str = Field(default_factory=lambda: random_hex(8))
    """Unique id of this event."""
    session_id: str = ""
    """The session it belongs to (set by the store on append)."""
    seq: int = 0
    """Position in the session, from 1 (set by the store on append)."""
    ts: datetime = Field(default_factory=lambda: datetime.now(UTC))
    """When it happened (UTC)."""
    place: str | None = None
    """The fleet place (labgrid coordinator place) the event happened on; None off a fleet and
    for what happened on no place (a model call, a host-only tool)."""


class SessionStarted(EventBase):
    kind: Literal["session_started"] = "session_started"
    client: str
    """Who drives the session: cli, mcp, chat, loop, playbook."""
    lab_profile: str | None = None
    """Path of the lab profile (lab.toml) in use."""
    lab_name: str | None = None
    """Name of the lab."""
    labwarden_version: str
    """labwarden's version."""
    git_commit: str | None = None
    """labwarden's git commit, when run from a checkout."""
    git_dirty: bool | None = None
    """Whether that checkout had uncommitted changes."""
    schema_version: int = SCHEMA_VERSION
    """Version of the event schema this session was written with."""
    principal: str | None = None
    """Who the session acts for: `local:USER` (CLI, stdio, in-process), `bearer:CLIENT` (HTTP
    with a token), `mcp-session:ID` (anonymous HTTP on loopback: the session is its own
    principal). A session reads only transcripts of its own principal."""
    mcp_session_id: str | None = None
    """The MCP session (streamable HTTP's Mcp-Session-Id) this transcript session serves."""


class ToolCalled(EventBase):
    kind: Literal["tool_called"] = "tool_called"
    call: ToolCallRecord
    """The tool call as run: args, result, error, duration, artifacts, progress."""
    result_chars: int = 0
    """Characters of the JSON result the client received."""
    result_tokens_est: int = 0
    """Estimated tokens the agent pays to read that result: ceil(chars / 4)."""
    conditions: CallConditions | None = None
    """What the guard read before a measuring call ran (core/conditions.py)."""
    guard: Literal["allow"] | None = None
    """"allow" when the guard let the call run (any heal before it is its own guard_decision
    event, committed before the tool ran); None when unguarded or refused (a refusal is a
    guard_decision event)."""
    measured: bool = False
    """The tool's result is a measurement (its spec's `measures`): audit requires verified,
    pinned conditions on it."""
    parent_id: str | None = None
    """The `call.id` of the call this one ran inside (a tool asked `ctx.call` for it); None for
    a call a client made. The parent's own event comes later: it is logged when it ends."""

    @classmethod
    def of(cls, call: ToolCallRecord, *, result_json: str | None = None,
           conditions: CallConditions | dict[str, Any] | None = None,
           guard: Literal["allow"] | None = None, measured: bool = False,
           parent_id: str | None = None) -> ToolCalled:
        """Wrap a record; `result_json` is what the client received (default: result or error)."""
        if result_json is None:
            payload = call.result if call.ok else (call.error.model_dump() if call.error else None)
            result_json = json.dumps(payload, default=str)
        chars = len(result_json)
        if isinstance(conditions, dict):
            conditions = CallConditions.model_validate(conditions)
        return cls(call=call, result_chars=chars, result_tokens_est=math.ceil(chars / 4),
                   conditions=conditions, guard=guard, measured=measured, parent_id=parent_id)


class GuardDecision(EventBase):
    """What the guard decided about one call: the guard returns these and the transcript stores
    them as they are (one type for both)."""

    kind: Literal["guard_decision"] = "guard_decision"
    tool: str
    """The tool the decision is about."""
    decision: Literal["allow", "refuse", "heal"]
    """Allowed as is, refused, or allowed after the guard changed lab state."""
    code: RefusalCode | None = None
    """Refusal code from the guard's closed set (None for allow and heal)."""
    reason: str = Field("", json_schema_extra={"x-untrusted": UNTRUSTED_NOTE})
    """Why (device text it quotes -- a lease holder, a knob's value -- is marked)."""
    remedy: str | None = None
    """What to do about a refusal."""
    changes: list[str] = Field(default_factory=list)
    """What a heal changed, one line each."""
    parent_id: str | None = None
    """The `call.id` of the running call whose nested call (or mid-call heal) this decision is
    about; None at the top level."""


class ModelCall(EventBase):
    kind: Literal["model_call"] = "model_call"
    model: str
    """Model id as called."""
    usage: Usage
    """Token usage as the API reported it."""
    cost_usd: float
    """Dollars, from usage and the price table."""
    pricing_version: str
    """Version of the price table used."""
    request_id: str | None = None
    """The API's request id."""
    stop_reason: str | None = None
    """Why the model stopped."""


class Note(EventBase):
    kind: Literal["note"] = "note"
    text: str
    """The note."""
    author: str = "user"
    """Who wrote it (user, agent, labwarden)."""


class ResourceRead(EventBase):
    kind: Literal["resource_read"] = "resource_read"
    uri: str
    """The URI read (a long one stored bounded, with its digest)."""
    ok: bool
    """Whether the read returned content."""
    chars: int = 0
    """Characters returned."""
    error: str | None = None
    """Why it failed."""


class RequestRefused(EventBase):
    """A request refused before it became a tool call or a resource read: by the HTTP transport
    (unauthenticated, wrong Origin, oversized body, an unknown session, a protocol era this
    server does not serve) or by the MCP SDK (an unknown method, malformed parameters)."""

    kind: Literal["request_refused"] = "request_refused"
    transport: str
    """http, stdio, memory."""
    method: str | None = None
    """The JSON-RPC method, when the body could be read."""
    status: int | None = None
    """The HTTP status sent back."""
    reason: str
    """Why it was refused."""
    body: dict[str, Any] | None = None
    """The request body: small ones as they came, larger ones as a digest (size, sha256, head)."""
    mcp_session_id: str | None = None
    """The Mcp-Session-Id the request named, if any."""


class RequestServed(EventBase):
    """A request that is neither a tool call nor a resource read: a listing (resources/list,
    resources/templates/list, prompts/list) or a prompt (prompts/get), served or failed."""

    kind: Literal["request_served"] = "request_served"
    method: str
    """The JSON-RPC method."""
    name: str | None = None
    """The prompt asked for (prompts/get), stored bounded."""
    ok: bool
    """Whether it was answered."""
    items: int = 0
    """How many entries a listing returned, or messages a prompt."""
    error: str | None = None
    """Why it failed."""


class SessionEnded(EventBase):
    kind: Literal["session_ended"] = "session_ended"
    reason: str = "done"
    """Why the session ended."""


Event = Annotated[SessionStarted | ToolCalled | GuardDecision | ModelCall | Note | ResourceRead
                  | RequestRefused | RequestServed | SessionEnded, Field(discriminator="kind")]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(body: str) -> Event:
    """Read one stored event body."""
    return EVENT_ADAPTER.validate_json(body)
