"""Transcripts: every session's events in SQLite, hash-chained, costed, replayable, auditable."""

from labwarden.core.events import (
    SCHEMA_VERSION,
    Event,
    GuardDecision,
    ModelCall,
    Note,
    SessionEnded,
    SessionStarted,
    ToolCalled,
)
from labwarden.core.usage import CacheCreation, Usage
from labwarden.transcripts.audit import AuditReport, audit
from labwarden.transcripts.pricing import Cost, UnknownModel, cost
from labwarden.transcripts.store import Checkpoint, StoredEvent, TranscriptError, TranscriptStore

__all__ = [
    "SCHEMA_VERSION", "AuditReport", "CacheCreation", "Checkpoint", "Cost", "Event",
    "GuardDecision", "ModelCall", "Note", "SessionEnded", "SessionStarted",
    "StoredEvent", "ToolCalled", "TranscriptError", "TranscriptStore", "UnknownModel", "Usage", "audit",
    "cost",
]
