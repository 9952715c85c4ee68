"""The conditions a number was measured under (pyperf's habit: a number is worthless without
them). compare and gates refuse to mix numbers whose checked conditions differ; lab/conditions.py
snapshots them on the DUT at every window."""

from __future__ import annotations

from pydantic import BaseModel, Field

CHECKED = ("governors", "boost", "clk_tck", "vaps_enabled", "channels", "host", "target")
"""Keys that must be equal for two measurements to be comparable (the build may differ)."""


class Conditions(BaseModel):
    build_id: str | None = Field(description="build flashed and verified (None: unverified)")
    fingerprint_verified: bool
    governors: list[str]
    boost: str
    clk_tck: int = Field(description="the DUT's getconf CLK_TCK (ticks per second of /proc times)")
    vaps_enabled: list[str]
    channels: dict[str, str]
    stations: int = Field(description="datamodel count when the window started")
    host: str = Field(description="DUT hostname")
    target: str = Field(description="process measured")
    perf: str | None = Field(None, description="perf record options, if perf ran")
    labwarden: str = Field(description="labwarden version (+git commit of its checkout)")

    def pinned(self) -> bool:
        return bool(self.governors) and all(g == "performance" for g in self.governors) \
            and self.boost == "0"

    def differences(self, other: Conditions) -> list[str]:
        return [f"{k}: {getattr(self, k)!r} != {getattr(other, k)!r}"
                for k in CHECKED if getattr(self, k) != getattr(other, k)]
