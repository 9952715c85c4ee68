"""Every tool, by name. The three doors (Python, CLI, MCP) and the guard read this mapping when
a call arrives, so a tool is one new module plus one line in `_MODULES`; `register` adds one at
run time (a plugin, a test's throwaway tool).

The mapping is lazy: a tool's module (and what it imports: scipy for compare, matplotlib for
report, the agent's summary for experiment) is imported the first time its spec is asked for.
`labwarden call lab_status` loads one tool, not twenty-one; iterating over the values loads all.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

from labwarden.core.spec import ToolSpec
from labwarden.lab import features
from labwarden.lab.config import LabProfile
from labwarden.results import register as register_output
from labwarden.results import unregister as unregister_output

_MODULES = {
    "lab_status": "lab_status",
    "env_pin": "env_pin",
    "build": "build",
    "flash": "flash",
    "fingerprint_verify": "fingerprint",
    "associate": "associate",
    "measure": "measure",
    "sweep": "sweep",
    "traffic_sweep": "traffic_sweep",
    "saturate": "saturate",
    "router_rules": "router_rules",
    "compare": "compare",
    "gate_check": "gate_check",
    "attribute": "attribute",
    "symbolize": "symbolize",
    "report": "report",
    "source_search": "source_search",
    "source_read": "source_read",
    "patch_submit": "patch_submit",
    "calibrate": "calibrate",
    "experiment": "experiment",
    "bisect": "bisect",
}
"""Tool name -> its module under labwarden/tools (which defines `SPEC`), in the order the doors
list them."""


class _Registry(MutableMapping[str, ToolSpec]):
    """name -> ToolSpec; the names are known without importing any tool."""

    def __init__(self) -> None:
        self._order: list[str] = list(_MODULES)
        self._specs: dict[str, ToolSpec] = {}

    def __getitem__(self, name: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            if name not in self._order or name not in _MODULES:
                raise KeyError(name)
            spec = importlib.import_module(f"labwarden.tools.{_MODULES[name]}").SPEC
            assert spec.name == name, f"labwarden.tools.{_MODULES[name]} defines {spec.name!r}"
            self._specs[name] = spec
        return spec

    def __setitem__(self, name: str, spec: ToolSpec) -> None:
        if name not in self._order:
            self._order.append(name)
        self._specs[name] = spec

    def __delitem__(self, name: str) -> None:
        if name not in self._order:
            raise KeyError(name)
        self._order.remove(name)
        self._specs.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._order

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)


TOOLS: MutableMapping[str, ToolSpec] = _Registry()


def listed(profile: LabProfile) -> list[ToolSpec]:
    """The tools this lab can run (lab/features.py), in the registry's order: what a model is
    shown (MCP's tools/list, the agent's `tools`) and what its prompts may name."""
    return features.applicable(TOOLS.values(), profile)


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
    register_output(spec.name, spec.output)  # its results read as its model (labwarden.results)


def unregister(name: str) -> None:
    TOOLS.pop(name, None)
    unregister_output(name)
