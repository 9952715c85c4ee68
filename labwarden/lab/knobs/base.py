"""A knob: one tunable of the DUT that measurement conditions depend on (pyperf's `Operation`
classes in `pyperf/_system.py`): whether the DUT has it, its state read and judged, and an
idempotent pin that says what it changed. `lab_status` shows knobs, `env_pin` pins them, the
guard heals them -- one code path, so the three never disagree on what "pinned" means.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceText, quote
from labwarden.core.events import RefusalCode
from labwarden.core.spec import Requirement
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError


class KnobState(BaseModel):
    name: str
    value: DeviceText = Field(description="what the DUT has now")
    ok: bool = Field(description="as measurement requires (always true when not applicable)")
    applicable: bool = Field(True, description="false: the DUT has no such knob (e.g. no "
                             "cpufreq); it is neither healed nor refused")
    advice: str | None = Field(None, description="how to fix it when not ok")


class Knob(ABC):
    """One tunable, bound to a DUT and the lab profile that describes it."""

    name: ClassVar[str]
    """Its name in `[policy] heal` and in lab_status."""
    requirement: ClassVar[Requirement | None] = None
    """The tool requirement it serves (None: a config lever set only on request)."""
    refusal: ClassVar[RefusalCode] = "env_unpinned"
    """The guard's code when it is off and healing it is not allowed."""
    remedy: ClassVar[str] = "pin it with env_pin"

    def __init__(self, dev: Device, profile: LabProfile):
        self.dev = dev
        self.profile = profile

    async def available(self) -> str | None:
        """None when the DUT has this knob; else why not (the knob is then not applicable)."""
        return None

    @abstractmethod
    async def read(self) -> KnobState:
        """The knob as it is now, judged (only called when available)."""

    @abstractmethod
    async def pin(self) -> list[str]:
        """Set it as measurement requires; one line per change, none when already set."""

    async def state(self) -> KnobState:
        """read(), or "not applicable" with the reason when the DUT lacks the knob."""
        reason = await self.available()
        if reason is not None:
            return KnobState(name=self.name, value=f"n/a: {reason}", ok=True, applicable=False)
        return await self.read()

    def refusal_reason(self, state: KnobState) -> str:
        """Why the guard refuses: the value read from the DUT is device text (quoted)."""
        return f"{self.name} is {quote(state.value)}: {state.advice}"

    async def missing(self, path: str, what: str) -> str | None:
        """None when `path` exists on the DUT, else "no WHAT (PATH)": an available() answer."""
        return None if (await self.dev.run(["test", "-e", path])).exit_status == 0 else f"no {what} ({path})"


async def write_value(dev: Device, path: str, value: str) -> None:
    """Write one sysfs/proc file in place (no temp file + rename there); value and path are argv."""
    res = await dev.run(["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "lw-write", value, path], timeout=10)
    if res.exit_status != 0:
        raise DeviceError(f"cannot write {path}: {quote(res.stderr)}", "root on the DUT?")


async def run_reload(dev: Device, argv: list[str], section: str) -> None:
    """Apply a config change with the profile's reload command (e.g. `wifi reload`)."""
    if argv:
        res = await dev.run(argv, timeout=60)
        if res.exit_status != 0:
            raise DeviceError(f"{' '.join(argv)} failed: {quote(res.stderr)}",
                              f"check {section} in the lab profile")
