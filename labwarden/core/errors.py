"""The one shape of a failure a person or a model can act on: what went wrong, what to do, and
its kind from a closed set (inspect_ai's habit: callers branch on the kind, never on text).

Every problem/remedy error in labwarden subclasses LabError; a subclass says its kind once, as a
class attribute. The runner turns any LabError into a ToolFailure in one `except`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

ErrorKind = Literal["invalid_input", "refused", "device", "build", "timeout", "cancelled", "tool",
                    "internal"]
"""invalid_input: the caller's arguments are wrong; refused: the guard or a policy said no;
device: the DUT or the load side failed; build: a patch or the compiler failed; timeout: waited
too long; cancelled: the caller gave up; tool: the tool could not do its work (a missing host
program, an unusable record); internal: a bug in labwarden (never raised on purpose)."""


class LabError(RuntimeError):
    """Base of labwarden's failures: `problem` (what went wrong), `remedy` (what to do), `kind`
    (from ErrorKind), and optionally the guard's refusal `code` and failing `lines`."""

    kind: ClassVar[ErrorKind] = "tool"

    def __init__(self, problem: str, remedy: str, *, kind: ErrorKind | None = None,
                 code: str | None = None, lines: list[str] | None = None):
        self.problem = problem
        self.remedy = remedy
        if kind is not None:
            self.kind = kind  # type: ignore[misc]  # an instance may narrow its class's kind
        self.code = code
        self.lines = lines or []
        super().__init__(f"{problem}\n  remedy: {remedy}")


class ToolError(LabError):
    """A tool fails with an explicit kind: `raise ToolError("device", "what", "remedy")`."""

    def __init__(self, kind: ErrorKind, message: str, remedy: str | None = None,
                 lines: list[str] | None = None):
        super().__init__(message, remedy or "", kind=kind, lines=lines)
