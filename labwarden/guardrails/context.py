"""What the guard reads and changes: the lab profile, the DUT, and the board state file. A typed
context of its own, so the guard depends on the lab layer only, never on the tools."""

from __future__ import annotations

from dataclasses import dataclass

from labwarden.lab.boardstate import BoardStateFile
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device


@dataclass(frozen=True)
class GuardContext:
    profile: LabProfile
    device: Device
    board: BoardStateFile
