"""Snapshot a window's measurement conditions on the DUT (the model is core/conditions.py)."""

from __future__ import annotations

import platform

from labwarden.core.conditions import Conditions
from labwarden.core.provenance import labwarden_version
from labwarden.lab import knobs
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device


async def clk_tck(dev: Device) -> int:
    res = await dev.run(["getconf", "CLK_TCK"], timeout=10)
    try:
        return int(res.stdout.strip())
    except ValueError:
        return 0  # unknown: gate 4 fails on it rather than guessing 100


async def snapshot(dev: Device, profile: LabProfile, state: BoardState, stations: int,
                   perf: str | None = None) -> Conditions:
    radio, boost, gov = (knobs.RadioTopology(dev, profile), knobs.Boost(dev, profile),
                         knobs.Governor(dev, profile))
    topo = await radio.topology() if await radio.available() is None else None
    boost_state = await boost.state()
    governors = await gov.governors() if await gov.available() is None else []
    host = (await dev.run(["uname", "-n"])).stdout.strip() or platform.node()
    return Conditions(
        build_id=state.verified_build if state.fingerprint_ok() else None,
        fingerprint_verified=state.fingerprint_ok(), governors=governors,
        boost=boost_state.value, clk_tck=await clk_tck(dev),
        vaps_enabled=topo.vaps_enabled if topo else [], channels=topo.channels if topo else {},
        stations=stations, host=host, target=profile.target.process,
        perf=perf, labwarden=labwarden_version())
