"""Every tool, by name. The three doors (Python, CLI, MCP) and the guard read this mapping when
a call arrives, so a tool is one new module plus one line in `_SPECS`; `register` adds one at
run time (a plugin, a test's throwaway tool)."""

from __future__ import annotations

from labwarden.core.spec import ToolSpec
from labwarden.tools import (
    associate,
    attribute,
    bisect,
    build,
    compare,
    env_pin,
    experiment,
    fingerprint,
    flash,
    gate_check,
    lab_status,
    patch_submit,
    profile,
    report,
    router_rules,
    saturate,
    source_read,
    source_search,
    sweep,
    symbolize,
    traffic_sweep,
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
    traffic_sweep.SPEC,
    saturate.SPEC,
    router_rules.SPEC,
    compare.SPEC,
    gate_check.SPEC,
    attribute.SPEC,
    symbolize.SPEC,
    report.SPEC,
    source_search.SPEC,
    source_read.SPEC,
    patch_submit.SPEC,
    experiment.SPEC,
    bisect.SPEC,
]

TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in _SPECS}


def get(name: str) -> ToolSpec:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; tools: {', '.join(sorted(TOOLS))}") from None


def register(spec: ToolSpec) -> None:
    """Add a tool; every door sees it from the next call on. A name may be registered once."""
    if spec.name in TOOLS:
        raise ValueError(f"a tool named {spec.name!r} is already registered")
    TOOLS[spec.name] = spec


def unregister(name: str) -> None:
    TOOLS.pop(name, None)
