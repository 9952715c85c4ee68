"""The DUT's own count of its clients (e.g. AssociatedDevice objects per VAP), asked through the
profile's clients reader (`[readers] clients`): the source of truth that associate, sweep and the
gates check against. A DUT without one has no count: `count` says so (None), never a made-up 0."""

from __future__ import annotations

from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError

NOT_APPLICABLE = "no clients reader on this DUT ([readers] clients in the lab profile)"


def parse(text: str) -> dict[str, int]:
    """`total=N name=N ...` or a bare `N` -> {"total": N, ...}."""
    words = text.split()
    if len(words) == 1 and words[0].isdigit():
        return {"total": int(words[0])}
    counts = {k: int(v) for k, v in (w.split("=", 1) for w in words if "=" in w)}
    if "total" not in counts:
        raise ValueError(f"no total in {text[:80]!r}")
    return counts


async def count(dev: Device, profile: LabProfile) -> dict[str, int] | None:
    """`{"total": N, "vap0": a, ...}` as the DUT reports it; None when it has no clients reader."""
    argv = profile.clients_reader()
    if argv is None:
        return None
    res = await dev.run(argv, timeout=10)
    try:
        if res.exit_status != 0:
            raise ValueError(res.stderr.strip()[:200] or f"exit {res.exit_status}")
        return parse(res.stdout)
    except ValueError as exc:
        raise DeviceError(f"the clients reader `{' '.join(argv)}` failed: {exc}",
                          f"is {profile.target.process} running? lab_status shows it; check "
                          "[readers] clients in the lab profile") from exc


async def total(dev: Device, profile: LabProfile) -> int | None:
    """The DUT's client total, or None when it has no clients reader."""
    counts = await count(dev, profile)
    return None if counts is None else counts.get("total", -1)
