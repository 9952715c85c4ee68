"""Exceptions a tool raises to fail with a kind, a message and a remedy (see record.ErrorKind)."""

from __future__ import annotations

from labwarden.tools.record import ErrorKind, ToolFailure


class ToolError(RuntimeError):
    def __init__(self, kind: ErrorKind, message: str, remedy: str | None = None,
                 lines: list[str] | None = None):
        self.failure = ToolFailure(kind=kind, message=message, remedy=remedy, lines=lines or [])
        super().__init__(message)
