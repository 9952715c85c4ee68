"""uprobes on the DUT: offsets from the DUT's own binary (fetched once, cached by sha256) and the
build's debug symbols (a function need not be exported), registered in the DUT's tracefs with an
argv (the line is data, never shell text), removed in `finally` -- also when the measurement
fails or is cancelled. Every offset is resolved before the first registration: an unknown
symbol is refused with nothing registered."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

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
        raise DeviceError(f"{remote} does not exist on the DUT", "check [target] library and "
                          "uprobes in the profile", kind="invalid_input")
    local = cache / sha / Path(remote).name
    if not local.exists():
        local.parent.mkdir(parents=True, exist_ok=True)
        await dev.get(remote, local)
    return local


@contextlib.asynccontextmanager
async def registered(dev: Device, tracefs: str, probes: dict[str, tuple[str, str]], cache: Path,
                     symfs_roots: Sequence[Path] = (),
                     shield: Shield = asyncio.shield) -> AsyncIterator[list[str]]:
    """Register {counter: (DUT binary, function)}; yields perf event names
    `labwarden:counter_<token>` (strip with `counter_name`). `symfs_roots`: the build's symfs,
    whose debug files name the functions a stripped binary does not. tracefs is global to the
    kernel: the token keeps two sessions on one host (several vlabs) from colliding on a name."""
    lines: list[tuple[str, str, str]] = []  # (name, line, what) -- all resolved before registering
    token = secrets.token_hex(3)
    copies: dict[str, Path] = {}
    for counter, (binary, func) in probes.items():
        if binary not in copies:
            copies[binary] = await _local_copy(dev, binary, cache)
        local = copies[binary]
        offset = await asyncio.to_thread(elfsym.symbol_offset, local, func,
                                         elfsym.debug_files(local, symfs_roots))
        name = f"{counter}_{token}"
        lines.append((name, perfcount.probe_line(name, Path(binary), offset), f"{counter} ({func})"))
    events = f"{tracefs.rstrip('/')}/uprobe_events"
    done: list[str] = []
    try:
        for name, line, what in lines:
            res = await dev.run([*_APPEND, line, events], timeout=10)
            if res.exit_status != 0:
                raise DeviceError(f"cannot register uprobe {what}: {res.stderr.strip()[:200]}",
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
