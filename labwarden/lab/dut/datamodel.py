"""The DUT's own count of its clients (AssociatedDevice objects per VAP), asked through the
profile's RPC client: the source of truth that associate, sweep and the gates check against."""

from __future__ import annotations

from labwarden.core.devtext import quote
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError


async def count(dev: Device, profile: LabProfile) -> dict[str, int]:
    """`{"total": N, "vap0": a, ...}` as the daemon reports it."""
    res = await dev.run([profile.target.rpc_client, "--socket", profile.load.socket, "count"],
                        timeout=10)
    if res.exit_status != 0:
        raise DeviceError(f"{profile.target.rpc_client} count failed: {quote(res.stderr)}",
                          f"is {profile.target.process} running? lab_status shows it")
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in res.stdout.split())}
