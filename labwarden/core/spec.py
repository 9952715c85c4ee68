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

LabFeature = Literal["clients", "traffic", "router_config", "suspects", "repo_history"]
"""What a lab may lack that a tool needs at all (lab/features.py reads each from the profile):
clients -- a load that holds clients ([load] kind other than "none"); traffic -- a traffic load
([load] kind = "iperf3"); router_config -- a DUT rule set to change ([load] router_config);
suspects -- processes that may be paused ([target] suspects); repo_history -- a firmware repo
with more than one commit (a range to bisect)."""

HealthRole = Literal["none", "observe", "restore", "prove"]
"""What a tool is to the board-health state machine (good -> unknown -> bad):
none: refused unless the board is good; observe: runs whatever the health (lab_status);
restore: the first half of a health check -- runs on an unknown board only with a known image,
and turns it bad if it fails (flash); prove: the second half -- runs on an unknown board, turns
it good when `proof_field` of its result is true and bad otherwise (fingerprint_verify)."""


MAX_STR = 4096
"""Longest string any tool input accepts unless its field says otherwise (a free-text field
such as a diff sets its own max_length)."""


class ToolInput(BaseModel):
    """Base of every tool's input model: what all doors accept, for every tool alike.

    - an unknown field is refused (a misspelt `window_s` must not silently measure with the
      default);
    - strict types: `true` is not a number, `"18"` is not an int, `1` is not a boolean;
    - every string is bounded (MAX_STR unless the field sets its own max_length);
    - every number, list and mapping must declare its bounds -- a subclass that leaves one
      unbounded fails when it is defined (`unbounded()` names the field), so a tool's input is
      refused at the door, before the guard takes a lease or heals anything.
    """

    model_config = ConfigDict(extra="forbid", strict=True, str_max_length=MAX_STR)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        missing = unbounded(cls)
        if missing:
            raise TypeError(f"{cls.__name__}: unbounded input field(s): {'; '.join(missing)} -- "
                            "give numbers ge/le (or gt/lt), lists and mappings max_length, list "
                            "items their own bounds (Annotated[int, Field(ge=.., le=..)])")


def unbounded(model: type[BaseModel]) -> list[str]:
    """Fields of `model`'s JSON schema (what every client is shown) that accept an unbounded
    value: a number without both bounds, an array without maxItems, an object without
    maxProperties, a string without maxLength (an enum or const is bounded)."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    out: list[str] = []

    def walk(node: dict[str, Any], path: str, depth: int) -> None:
        if depth > 8:
            return
        if "$ref" in node:
            node = defs.get(node["$ref"].split("/")[-1], {})
        if "enum" in node or "const" in node:
            return
        for key in ("anyOf", "allOf", "oneOf"):
            for sub in node.get(key, []):
                walk(sub, path, depth + 1)
        kind = node.get("type")
        if kind in ("integer", "number"):
            low = "minimum" in node or "exclusiveMinimum" in node
            high = "maximum" in node or "exclusiveMaximum" in node
            if not (low and high):
                out.append(f"{path}: a number needs both bounds")
        elif kind == "string" and "maxLength" not in node:
            out.append(f"{path}: a string needs max_length")
        elif kind == "array":
            if "maxItems" not in node:
                out.append(f"{path}: a list needs max_length")
            walk(node.get("items", {}), f"{path}[]", depth + 1)
        elif kind == "object":
            props = node.get("properties")
            if props is not None:
                for name, sub in props.items():
                    walk(sub, f"{path}.{name}" if path else name, depth + 1)
            elif "maxProperties" not in node:
                out.append(f"{path}: a mapping needs max_length")
            if isinstance(node.get("additionalProperties"), dict):
                walk(node["additionalProperties"], f"{path}.*", depth + 1)

    walk(schema, "", 0)
    return out


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
    needs: frozenset[LabFeature] = field(default_factory=frozenset)
    """What the lab must have for the tool to apply at all: a lab without it does not list the
    tool (MCP, the agent), and a call is refused `not_applicable` with the reason."""
    precheck: Callable[[Any, Any], None] | None = None
    """(ctx, input) -> None, raising a LabError: what the arguments name is checked to exist
    (a patch id) before the guard takes a lease, heals or flashes anything."""

    def schema(self) -> dict[str, Any]:
        return {"input": self.input.model_json_schema(), "output": self.output.model_json_schema()}

    def input_schema(self) -> dict[str, Any]:
        """The input schema a model is shown (MCP's tools/list, the agent's `tools`): the
        model's own, without pydantic's generated titles (a property's repeats its name)."""
        schema: dict[str, Any] = untitled(self.input.model_json_schema())
        return schema


def untitled(node: Any) -> Any:
    """A JSON schema without its generated `title`s."""
    if isinstance(node, dict):
        return {k: untitled(v) if k not in ("properties", "$defs") else
                {name: untitled(sub) for name, sub in v.items()}
                for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [untitled(x) for x in node]
    return node


def describe(doc: str | None) -> str:
    """A tool's description: the first paragraph of its module docstring, minus 'name: '."""
    para = (doc or "").strip().split("\n\n")[0]
    text = " ".join(line.strip() for line in para.splitlines())
    return text.split(": ", 1)[1] if ": " in text.split(" ", 1)[0] + " " else text
