"""Lenient inputs (issue 15, class 5): every tool's input -- generated from the registry, so a
new tool is tried too -- refuses unknown fields, booleans or strings as numbers, numbers as
booleans, and unbounded items, at the door: before the guard leases the DUT or heals anything.
Real vlab; the drift that a heal would fix is left in place on purpose and must survive."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field

from labwarden.core.spec import ToolInput, unbounded
from labwarden.lab import features
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools import registry
from labwarden.vlab import tuning
from labwarden.vlab.layout import VlabLayout

from .test_guard_corpus import dut_snapshot

pytestmark = pytest.mark.anyio


def _numbers(schema: dict[str, Any]) -> dict[str, str]:
    """Top-level fields that take a number or a boolean: name -> 'integer' | 'number' | 'boolean'."""
    out = {}
    for name, prop in schema.get("properties", {}).items():
        kinds = {prop.get("type")} | {a.get("type") for a in prop.get("anyOf", [])}
        for kind in ("integer", "number", "boolean"):
            if kind in kinds:
                out[name] = kind
    return out


def _bad_inputs() -> list[tuple[str, dict[str, Any]]]:
    """(tool, args) that every strict input must refuse, for every registered tool."""
    cases: list[tuple[str, dict[str, Any]]] = []
    for name, spec in sorted(registry.TOOLS.items()):
        schema = spec.input.model_json_schema()
        cases.append((name, {"windows_s": 10}))  # a misspelt field
        cases.append((name, {"x" * 40: 1}))
        for field, kind in _numbers(schema).items():
            if kind == "boolean":
                cases += [(name, {field: 1}), (name, {field: "true"})]
            else:
                cases += [(name, {field: True}), (name, {field: "18"}), (name, {field: [18]})]
                if kind == "integer":
                    cases.append((name, {field: 18.5}))
    cases += [("sweep", {"densities": [18, 99999]}), ("sweep", {"densities": [True, 60]}),
              ("sweep", {"densities": list(range(1, 40))}), ("associate", {"stations": True}),
              ("build", {"patches": ["0901"] * 100}), ("build", {"ref": "H" * 5000}),
              ("report", {"title": "t" * 5000})]
    return cases


def test_every_tool_input_is_bounded() -> None:
    """The registry's inputs declare every bound (a ToolInput subclass without them is not even
    definable: next test)."""
    for name, spec in registry.TOOLS.items():
        assert issubclass(spec.input, ToolInput), name
        assert unbounded(spec.input) == [], name
        assert spec.input.model_config.get("strict") and spec.input.model_config.get("extra") == "forbid"


def test_an_unbounded_input_cannot_be_defined() -> None:
    with pytest.raises(TypeError, match=r"items\[\]: a number needs both bounds"):
        class Loose(ToolInput):
            items: list[int] = Field(default_factory=list, max_length=4)
    with pytest.raises(TypeError, match="names: a list needs max_length"):
        class Looser(ToolInput):
            names: list[str] = Field(default_factory=list)
    with pytest.raises(TypeError, match="n: a number needs both bounds"):
        class Loosest(ToolInput):
            n: int = Field(1, ge=0)


async def test_bad_inputs_are_refused_before_any_side_effect(lab: VlabLayout) -> None:
    cases = _bad_inputs()
    assert len(cases) > 60
    tuning.set_governor(lab, "schedutil")  # a heal would pin it back: it must not happen
    try:
        before = dut_snapshot(lab)
        profile = LabProfile.from_file(lab.lab_toml)
        async with open_lab(profile, client="test") as ctx:
            for tool, args in cases:
                rec = await call_tool(ctx, tool, args)
                assert not rec.ok and rec.error is not None, (tool, args)
                # a tool this lab cannot run (the vlab's traffic tools) is refused as such first
                code = "not_applicable" if features.not_applicable(registry.TOOLS[tool], profile) \
                    else "invalid_input"
                assert rec.error.code == code, (tool, args, rec.error)
                assert rec.error.kind == ("refused" if code == "not_applicable" else code)
                assert rec.error.remedy
            assert ctx.transcript is not None and ctx.session_id is not None
            events = [e.event for e in ctx.transcript.events(ctx.session_id)]
        assert dut_snapshot(lab) == before  # governor still schedutil, no lease, no stations
        assert not any(getattr(e, "decision", None) == "heal" for e in events)
        assert sum(e.kind == "tool_called" for e in events) == len(cases)
        misspelt = next(e for e in events if e.kind == "tool_called" and e.call.tool == "sweep"
                        and "windows_s" in e.call.error.message)
        assert "extra" in misspelt.call.error.message.lower() or "not permitted" in \
            misspelt.call.error.message.lower()
    finally:
        tuning.set_governor(lab, "performance")


async def test_a_report_of_an_unknown_session_is_a_clear_error(lab: VlabLayout) -> None:
    async with open_lab(LabProfile.from_file(lab.lab_toml), client="test") as ctx:
        for session in ("nosuchsession", "2099", "20261123-000000-ffffff", "a" * 120):
            rec = await call_tool(ctx, "report", {"session": session})
            assert rec.error is not None and rec.error.kind in ("invalid_input", "refused"), session
            assert "session" in rec.error.message and rec.error.remedy, rec.error
            assert "Traceback" not in rec.error.message
