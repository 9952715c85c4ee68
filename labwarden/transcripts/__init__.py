"""Transcripts: every session's events in SQLite, hash-chained, costed, replayable, auditable.

The names below are loaded on first use (PEP 562): a tool call needs the store, not the audit
and the price table, and every CLI command pays for what it imports."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    **dict.fromkeys(("SCHEMA_VERSION", "Event", "GuardDecision", "MeasurementConditions",
                     "ModelCall", "Note", "SessionEnded", "SessionStarted", "ToolCalled"),
                    "labwarden.core.events"),
    **dict.fromkeys(("CacheCreation", "Usage"), "labwarden.core.usage"),
    **dict.fromkeys(("AuditReport", "audit"), "labwarden.transcripts.audit"),
    **dict.fromkeys(("Cost", "UnknownModel", "cost"), "labwarden.transcripts.pricing"),
    **dict.fromkeys(("Checkpoint", "StoredEvent", "TranscriptError", "TranscriptStore"),
                    "labwarden.transcripts.store"),
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
