"""What a tool declares about itself, as data: its schema, what the guard must ensure before it
runs, what it changes, and the facts other parts act on (labgrid's `bindings`, inspect_ai's
`@tool(...)` arguments). The guard, the budgets, the transcript, the audit and the three doors
read these fields; no module branches on a tool's name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Requirement = Literal["lease", "board_healthy", "fingerprint_verified", "env_pinned",
                      "topology_asserted"]
Effect = Literal["read_only", "mutates_dut", "destructive", "host_only"]
"""read_only: reads the DUT; mutates_dut: changes DUT state reversibly (stations, signals);
destructive: replaces what runs (flash); host_only: builds or reads files on the host."""

HealthRole = Literal["none", "observe", "restore", "prove"]
"""What a tool is to the board-health state machine (good -> unknown -> bad):
none: refused unless the board is good; observe: runs whatever the health (lab_status);
restore: the first half of a health check -- runs on an unknown board only with a known image,
and turns it bad if it fails (flash); prove: the second half -- runs on an unknown board, turns
it good when `proof_field` of its result is true and bad otherwise (fingerprint_verify)."""


class ToolInput(BaseModel):
    """Base of every tool's input model: what all doors accept. An unknown field is refused (a
    misspelt `window_s` must not silently measure with the default)."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input: type[BaseModel]
    output: type[BaseModel]
    run: Callable[..., Awaitable[BaseModel]]
    effect: Effect
    requires: frozenset[Requirement] = field(default_factory=frozenset)
    idempotent: bool = False
    budget_class: Literal["cheap", "measure", "flash", "build"] = "cheap"
    free_text: frozenset[str] = field(default_factory=frozenset)
    """Arguments that are prose or code (a diff, a query), exempt from the identifier check."""
    path_args: frozenset[str] = field(default_factory=frozenset)
    """Arguments whose items may be file paths (contained by the guard in the allowed roots)."""
    suspect_arg: str | None = None
    """The argument naming a DUT process to pause: the guard applies the suspect policy to it."""
    measures: bool = False
    """Its result is a measurement: the guard snapshots the conditions, the transcript marks the
    call `measured`, and audit requires verified, pinned conditions on it."""
    health: HealthRole = "none"
    proof_field: str | None = None
    """For health = "prove": the boolean result field that proves the board healthy."""
    image_arg: str | None = None
    """For health = "restore": the argument naming the image (must be a known one on an unknown
    board)."""
    counts_as_flash: bool = False
    """Counted against `flashes_per_hour` when it succeeds."""

    def schema(self) -> dict[str, Any]:
        return {"input": self.input.model_json_schema(), "output": self.output.model_json_schema()}


def describe(doc: str | None) -> str:
    """A tool's description: the first paragraph of its module docstring, minus 'name: '."""
    para = (doc or "").strip().split("\n\n")[0]
    text = " ".join(line.strip() for line in para.splitlines())
    return text.split(": ", 1)[1] if ": " in text.split(" ", 1)[0] + " " else text
