"""Every tool, by name. The three doors (Python, CLI, MCP) are generated from this list."""

from __future__ import annotations

from labwarden.tools import associate, build, fingerprint, flash, lab_status
from labwarden.tools.spec import ToolSpec

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (build.SPEC, flash.SPEC, fingerprint.SPEC, associate.SPEC, lab_status.SPEC)
}


def get(name: str) -> ToolSpec:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; tools: {', '.join(sorted(TOOLS))}") from None
