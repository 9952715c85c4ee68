"""Helpers to call tools the way every door does (runner + open_lab) in tests."""

from __future__ import annotations

from typing import Any

from labwarden.core.call import ToolCallRecord
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab.layout import VlabLayout


async def call(layout: VlabLayout, name: str, args: dict[str, Any] | None = None,
               profile: LabProfile | None = None) -> ToolCallRecord:
    prof = profile or LabProfile.from_file(layout.lab_toml)
    async with open_lab(prof) as ctx:
        return await call_tool(ctx, name, args or {})


async def ok(layout: VlabLayout, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    rec = await call(layout, name, args)
    assert rec.ok, rec.error
    assert rec.result is not None
    return rec.result


def baseline(layout: VlabLayout) -> str:
    return LabProfile.from_file(layout.lab_toml).build.baseline or ""
