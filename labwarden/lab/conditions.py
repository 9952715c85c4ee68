"""The conditions a number was measured under (pyperf's habit: a number is worthless without
them). Snapshotted on the DUT at every window; compare and gates refuse to mix numbers whose
checked conditions differ."""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden import __version__
from labwarden.lab import knobs
from labwarden.lab.boardstate import LabState
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device

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


@cache
def labwarden_version() -> str:
    root = Path(__file__).resolve().parent.parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit, dirty = "", ""
    return f"{__version__}" + (f"+{commit}" if commit else "") + ("-dirty" if dirty else "")


async def clk_tck(dev: Device) -> int:
    res = await dev.run(["getconf", "CLK_TCK"], timeout=10)
    try:
        return int(res.stdout.strip())
    except ValueError:
        return 0  # unknown: gate 4 fails on it rather than guessing 100


async def snapshot(dev: Device, profile: LabProfile, state: LabState, stations: int,
                   perf: str | None = None) -> Conditions:
    topo = await knobs.topology(dev, profile)
    boost = await knobs.boost(dev, profile)
    host = (await dev.run(["uname", "-n"])).stdout.strip() or platform.node()
    return Conditions(
        build_id=state.verified_build if state.fingerprint_ok() else None,
        fingerprint_verified=state.fingerprint_ok(), governors=await knobs.read_governors(dev, profile),
        boost=boost.value, clk_tck=await clk_tck(dev), vaps_enabled=topo.vaps_enabled,
        channels=topo.channels, stations=stations, host=host, target=profile.target.process,
        perf=perf, labwarden=labwarden_version())
