"""Every tool, by name. The three doors (Python, CLI, MCP) are generated from this list."""

from __future__ import annotations

from labwarden.core.spec import ToolSpec
from labwarden.tools import (
    associate,
    attribute,
    build,
    compare,
    env_pin,
    fingerprint,
    flash,
    gate_check,
    lab_status,
    profile,
    report,
    sweep,
    symbolize,
)

_SPECS = [
    lab_status.SPEC,
    env_pin.SPEC,
    build.SPEC,
    flash.SPEC,
    fingerprint.SPEC,
    associate.SPEC,
    profile.SPEC,
    sweep.SPEC,
    compare.SPEC,
    gate_check.SPEC,
    attribute.SPEC,
    symbolize.SPEC,
    report.SPEC,
]

TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in _SPECS}


def get(name: str) -> ToolSpec:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; tools: {', '.join(sorted(TOOLS))}") from None
