"""The guest's clock: the host's real time (QEMU's default) or instruction counting (`-icount`).

Under TCG with the real-time clock, a guest second is a host second whoever else runs on the
host: when the host is busy, the vCPU threads get less of each second and the same work fills
more of it, so a daemon's CPU% moves with the host's load. With `-icount shift=N` each guest
instruction advances the guest's clock by 2^N ns, and `sleep=off` jumps an idle vCPU to its next
timer instead of waiting it out in real time: guest time is then made of the guest's own
instructions, and a descheduled QEMU costs it none. CPU% on that clock is a share of instructions
executed (and of idle time by the guest's own timers), not of real seconds.

icount makes TCG single-threaded (one host thread runs every vCPU in turn) and is TCG only: KVM
runs on the real-time clock.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError

DEFAULT_SPEC = "icount"
"""`qlab up`'s default on TCG (bench/qlab_noise.py: the windows' scatter on each clock)."""
DEFAULT_SHIFT = 0
"""1 ns per instruction. At 114 stations stad is ~54% with the guest ~45% idle (bench/decision.py
--lab-kind qlab: a 5% effect decided in 97% of draws). shift=1 boots ~2x faster but leaves stad at
~77% and the one vCPU ~20% idle: a window with some other guest work (perf stat, an ssh session)
saturates it, stamon's polls overrun their 1 s cadence, and the window reads ~22% low."""


class ClockError(LabError):
    kind = "invalid_input"


class GuestClock(BaseModel):
    """What drives the guest's time."""

    kind: Literal["realtime", "icount"]
    shift: int | Literal["auto"] = Field(DEFAULT_SHIFT, description="icount: 2^shift ns per "
                                         "instruction, or `auto` (QEMU tracks real time)")
    sleep: bool = Field(False, description="icount: an idle vCPU waits in real time (on) or "
                        "jumps to its next timer (off)")

    def _icount_options(self) -> str:
        return f"shift={self.shift},sleep={'on' if self.sleep else 'off'}"

    def qemu_args(self) -> list[str]:
        return [] if self.kind == "realtime" else ["-icount", self._icount_options()]

    @property
    def spec(self) -> str:
        """The form `parse` reads back (and `qlab up --clock` takes)."""
        return "realtime" if self.kind == "realtime" else f"icount:{self._icount_options()}"


_ICOUNT = re.compile(r"^icount(?::(?P<opts>.*))?$")


def parse(spec: str) -> GuestClock:
    """`realtime`, `icount` (shift DEFAULT_SHIFT, sleep off) or `icount:shift=N|auto,sleep=on|off`."""
    text = spec.strip().lower()
    if text == "realtime":
        return GuestClock(kind="realtime")
    m = _ICOUNT.match(text)
    if m is None:
        raise ClockError(f"unknown guest clock {spec!r}",
                         "use realtime, icount or icount:shift=N|auto,sleep=on|off")
    clock = GuestClock(kind="icount")
    for opt in filter(None, (m.group("opts") or "").split(",")):
        key, _, value = opt.partition("=")
        if key == "shift" and (value == "auto" or (value.isdigit() and int(value) <= 10)):
            clock.shift = value if value == "auto" else int(value)
        elif key == "sleep" and value in ("on", "off"):
            clock.sleep = value == "on"
        else:
            raise ClockError(f"bad icount option {opt!r} in {spec!r}",
                             "shift=0..10 or shift=auto, sleep=on or sleep=off")
    return clock


def for_accel(spec: str | None, accel: Literal["kvm", "tcg"], traffic: bool = False) -> GuestClock:
    """The clock a qlab runs on: `spec`, or the default -- icount on TCG; realtime on KVM (no
    icount there) and for the traffic variant, whose load is measured in real seconds on the host
    (iperf3's Mbit/s in the host netns)."""
    if spec is None:
        return parse(DEFAULT_SPEC if accel == "tcg" and not traffic else "realtime")
    clock = parse(spec)
    if clock.kind == "icount" and accel == "kvm":
        raise ClockError("-icount needs TCG; this qlab runs on KVM",
                         "use --clock realtime, or --accel tcg")
    return clock


def default_smp(clock: GuestClock) -> int:
    return 1 if clock.kind == "icount" else 2


def check_smp(clock: GuestClock, smp: int) -> None:
    """QEMU 7.2 under -icount (single-threaded TCG) hangs at `smp: Bringing up secondary CPUs`
    (shift=N; shift=auto gets past it with its delay calibration failing): one vCPU only."""
    if clock.kind == "icount" and smp > 1:
        raise ClockError(f"the icount clock runs one vCPU; got --smp {smp}",
                         "use --smp 1 (the default on icount), or --clock realtime")
