"""uprobes on the DUT: offsets from the DUT's own library file (fetched once, cached by sha256),
registered in the DUT's tracefs with an argv (the line is data, never shell text), removed in
`finally` -- also when the measurement fails or is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from labwarden.core.devtext import quote
from labwarden.lab import elfsym, perfcount
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import CommandTimeout, DeviceError

Shield = Callable[[Awaitable[None]], Awaitable[None]]
"""How a removal is protected from cancellation: asyncio.shield, or a session's tracked shield
(LabContext.shielded) so the session waits for it before closing the connection."""

# $1 = line, $2 = file: append one line (tracefs needs O_APPEND, which `>>` gives)
_APPEND = ["sh", "-c", 'printf "%s\\n" "$1" >> "$2"', "lw-uprobe"]


async def _local_copy(dev: Device, remote: str, cache: Path) -> Path:
    sha = (await dev.sha256([remote])).get(remote)
    if sha is None:
        raise DeviceError(f"{remote} does not exist on the DUT", "check [target] library in the profile")
    local = cache / sha / Path(remote).name
    if not local.exists():
        local.parent.mkdir(parents=True, exist_ok=True)
        await dev.get(remote, local)
    return local


@contextlib.asynccontextmanager
async def registered(dev: Device, tracefs: str, library: str, probes: dict[str, str],
                     cache: Path, shield: Shield = asyncio.shield) -> AsyncIterator[list[str]]:
    """Register {counter: function} on `library`; yields perf event names
    `labwarden:counter_<token>` (strip with `counter_name`). tracefs is global to the kernel: the
    token keeps two sessions on one host (several vlabs) from colliding on a name."""
    local = await _local_copy(dev, library, cache)
    events = f"{tracefs.rstrip('/')}/uprobe_events"
    token = secrets.token_hex(3)
    done: list[str] = []
    try:
        for counter, func in probes.items():
            name = f"{counter}_{token}"
            line = perfcount.probe_line(name, Path(library), elfsym.dynsym_offset(local, func))
            res = await dev.run([*_APPEND, line, events], timeout=10)
            if res.exit_status != 0:
                raise DeviceError(f"cannot register uprobe {counter} ({func}): {quote(res.stderr)}",
                                  f"is tracefs mounted at {tracefs} and are you root on the DUT?")
            done.append(name)
        yield [f"{perfcount.GROUP}:{n}" for n in done]
    finally:
        if done:  # shielded: in a cancelled scope anyio cancels every await, clean-up included
            await shield(_remove_all(dev, events, done))


REMOVE_GRACE_S = 3.0
"""How long a removal retries while the event is still open: a perf that was just hung up
(a cancelled measurement) closes each uprobe event in ~0.1 s of kernel time after it dies."""


async def _remove_all(dev: Device, events: str, names: list[str]) -> None:
    """Remove each probe; tracefs refuses (EBUSY) while a perf still has one open, so retry."""
    deadline = asyncio.get_running_loop().time() + REMOVE_GRACE_S
    for name in names:
        with contextlib.suppress(Exception):
            while (await dev.run([*_APPEND, f"-:{perfcount.GROUP}/{name}", events], timeout=10)
                   ).exit_status != 0 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)


async def dut_available(dev: Device, tracefs: str) -> str | None:
    """None if the DUT can take uprobes now, else the reason (never blocks past a few seconds)."""
    events = f"{tracefs.rstrip('/')}/uprobe_events"
    try:
        res = await dev.exec(["cat", events], timeout=5, cap=0)
    except CommandTimeout:
        return perfcount.WEDGED.format(events=events, t=5)
    if res.exit_status != 0:
        return f"{events} is not readable on the DUT: mount tracefs there, as root"
    if (await dev.run(["test", "-w", events])).exit_status != 0:
        return f"{events} is not writable on the DUT (uprobes need root)"
    return None


def counter_name(event: str) -> str:
    """`labwarden:rpc_calls_1a2b3c` -> `rpc_calls`."""
    return event.split(":", 1)[-1].rsplit("_", 1)[0]


async def leftover(dev: Device, tracefs: str) -> list[str]:
    """labwarden's probes still registered (should be none outside a measurement)."""
    text = (await dev.read_file(f"{tracefs.rstrip('/')}/uprobe_events")).decode(errors="replace")
    return [ln for ln in text.splitlines() if f"{perfcount.GROUP}/" in ln]
