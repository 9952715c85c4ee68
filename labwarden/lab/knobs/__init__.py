"""The DUT's knobs, one class per tunable (see base.py). `pinned()` lists the ones every
measurement depends on, in the order they are healed: cpufreq first, then the process manager
(it respawns what the topology reload restarts), then the topology."""

from __future__ import annotations

from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.knobs.base import Knob, KnobState
from labwarden.lab.knobs.cpufreq import Boost, Governor
from labwarden.lab.knobs.uciconf import MonitorRpc, ProcessManager, RadioTopology, Topology, TraceLevel

PINNED: tuple[type[Knob], ...] = (Governor, Boost, ProcessManager, RadioTopology)


def pinned(dev: Device, profile: LabProfile) -> list[Knob]:
    """The knobs measurement conditions are pinned by, bound to this DUT."""
    return [cls(dev, profile) for cls in PINNED]


__all__ = ["PINNED", "Boost", "Governor", "Knob", "KnobState", "MonitorRpc", "ProcessManager",
           "RadioTopology", "Topology", "TraceLevel", "pinned"]
