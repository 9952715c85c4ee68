"""What a tool declares about itself: schema, requirements and effect, as data.

The guard enforces `requires`; the MCP server derives annotations from `effect`; the CLI and
docs are generated from the models. Tool bodies never repeat these checks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

Requirement = Literal["lease", "board_healthy", "fingerprint_verified", "env_pinned",
                      "topology_asserted"]
Effect = Literal["read_only", "mutates_dut", "destructive", "host_only"]
"""read_only: reads the DUT; mutates_dut: changes DUT state reversibly (stations, signals);
destructive: replaces what runs (flash); host_only: builds or reads files on the host."""


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

    def schema(self) -> dict[str, Any]:
        return {"input": self.input.model_json_schema(), "output": self.output.model_json_schema()}


def describe(doc: str | None) -> str:
    """A tool's description: the first paragraph of its module docstring, minus 'name: '."""
    para = (doc or "").strip().split("\n\n")[0]
    text = " ".join(line.strip() for line in para.splitlines())
    return text.split(": ", 1)[1] if ": " in text.split(" ", 1)[0] + " " else text
