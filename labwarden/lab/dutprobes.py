"""uprobes on the DUT: offsets from the DUT's own library file (fetched once, cached by sha256),
registered in the DUT's tracefs with an argv (the line is data, never shell text), removed in
`finally` -- also when the measurement fails or is cancelled."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from labwarden.lab import uprobes
from labwarden.lab.device import Device, DeviceError

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
                     cache: Path) -> AsyncIterator[list[str]]:
    """Register {counter: function} on `library`; yields perf event names `labwarden:counter`."""
    local = await _local_copy(dev, library, cache)
    events = f"{tracefs.rstrip('/')}/uprobe_events"
    done: list[str] = []
    try:
        for name, func in probes.items():
            line = uprobes.probe_line(name, Path(library), uprobes.dynsym_offset(local, func))
            res = await dev.run([*_APPEND, line, events], timeout=10)
            if res.exit_status != 0:
                raise DeviceError(f"cannot register uprobe {name} ({func}): {res.stderr.strip()[:200]}",
                                  f"is tracefs mounted at {tracefs} and are you root on the DUT?")
            done.append(name)
        yield [f"{uprobes.GROUP}:{n}" for n in done]
    finally:
        for name in done:
            with contextlib.suppress(Exception):
                await dev.run([*_APPEND, f"-:{uprobes.GROUP}/{name}", events], timeout=10)


async def leftover(dev: Device, tracefs: str) -> list[str]:
    """labwarden's probes still registered (should be none outside a measurement)."""
    text = (await dev.read_file(f"{tracefs.rstrip('/')}/uprobe_events")).decode(errors="replace")
    return [ln for ln in text.splitlines() if f"{uprobes.GROUP}/" in ln]
