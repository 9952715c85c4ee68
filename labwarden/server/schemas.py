"""What `tools/list` publishes for a tool: what a model needs to choose and call it, and no more.

A client sends the tool list to its model on every turn, so its size is paid for all night
(bench/token_economy.py measures it per lab kind). Published per tool:
- the description, and the guard's requirements when there are any (the effect is in the
  annotations' hints, the untrusted-output note once in the server's instructions);
- the input schema as the tool's model writes it -- descriptions, bounds, defaults, examples:
  what calling it right takes -- with shared parts defined once (`$defs`), no generated titles;
- an output schema of the fields that can carry device text (`x-untrusted`), typed: the part of
  the output a model must treat as data. It validates every result (no field is required, others
  are allowed). The whole output schema, with every field's description, is the resource
  `labwarden://schemas/{tool}` and `labwarden call TOOL --help`.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import Tool, ToolAnnotations

from labwarden.core.spec import ToolSpec
from labwarden.tools import registry

UNTRUSTED = "x-untrusted"


def _marked(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """`node` cut to the parts that lead to an x-untrusted field, or None if none does: types
    and structure only (no descriptions, defaults, required lists)."""
    if not isinstance(node, dict):
        return None
    if UNTRUSTED in node:
        kept = {k: node[k] for k in ("type", "items", "additionalProperties", "anyOf")
                if k in node and k != "items"}
        if "items" in node:
            kept["items"] = _marked(node["items"], defs, seen) or {
                k: v for k, v in node["items"].items() if k == "type"}
        kept[UNTRUSTED] = True
        return kept
    if "$ref" in node:
        name = node["$ref"].split("/")[-1]
        if name in seen:
            return None
        return node if _marked(defs[name], defs, seen | {name}) is not None else None
    out: dict[str, Any] = {}
    props = {name: cut for name, sub in node.get("properties", {}).items()
             if (cut := _marked(sub, defs, seen)) is not None}
    if props:
        out["properties"] = props
    for key in ("items", "additionalProperties"):
        cut = _marked(node.get(key), defs, seen)
        if cut is not None:
            out[key] = cut
    branches = [cut for sub in node.get("anyOf", []) if (cut := _marked(sub, defs, seen)) is not None]
    if branches:
        # the other branches by their type alone (any value where they have none): the cut
        # schema must still accept every result
        out["anyOf"] = [*branches, *({"type": s["type"]} if "type" in s else {}
                                    for s in node["anyOf"] if _marked(s, defs, seen) is None)]
    if not out:
        return None
    if "type" in node:
        out["type"] = node["type"]
    return out


def output_schema(spec: ToolSpec) -> dict[str, Any]:
    """The output fields that can carry device text, typed, with the $defs they reach."""
    full = spec.output.model_json_schema()
    defs = full.get("$defs", {})
    top = _marked({k: v for k, v in full.items() if k != "$defs"}, defs) or {}
    used: dict[str, Any] = {}
    pending = _refs(top)
    while pending:
        name = pending.pop()
        if name not in used:
            used[name] = _marked(defs[name], defs) or {}
            pending |= _refs(used[name])
    out: dict[str, Any] = {"type": "object", "properties": top.get("properties", {})}
    if used:
        out["$defs"] = dict(sorted(used.items()))
    return out


def _refs(node: Any) -> set[str]:
    text = json.dumps(node)
    return {part.split('"')[0] for part in text.split('"$ref": "#/$defs/')[1:]}


def description(spec: ToolSpec) -> str:
    needs = ", ".join(sorted(spec.requires))
    return spec.description + (f"\n\nGuard requires: {needs}." if needs else "")


def tool_annotations(spec: ToolSpec) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=spec.effect in ("read_only", "host_only"),
        destructive_hint=spec.effect == "destructive",
        idempotent_hint=spec.idempotent,
        open_world_hint=False)


def tool(spec: ToolSpec) -> Tool:
    return Tool(name=spec.name, description=description(spec), input_schema=spec.input_schema(),
                output_schema=output_schema(spec), annotations=tool_annotations(spec))


def register(server: MCPServer[Any]) -> None:
    @server.resource("labwarden://schemas/{tool}", name="schema", mime_type="application/json",
                     description="A tool's whole input and output schema, every field described "
                     "(tools/list carries what choosing and calling it takes).")
    async def schema(tool: str) -> str:
        if tool not in registry.TOOLS:
            raise ResourceError(f"unknown tool {tool!r}: one of {', '.join(registry.TOOLS)}")
        return json.dumps(registry.TOOLS[tool].schema())
