"""Lab knobs read on the DUT and judged (pyperf's show/tune symmetry): governor, boost,
topology (VAPs and channels), process manager, trace zones. `lab_status` shows them; the guard
and `env_pin` apply them (apply lives beside read so they cannot disagree on what "pinned" is).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.lab import uci
from labwarden.lab.device import Device
from labwarden.lab.profile import LabProfile


class KnobState(BaseModel):
    name: str
    value: str = Field(description="what the DUT has now")
    ok: bool = Field(description="pinned as measurement requires")
    advice: str | None = Field(None, description="how to fix it when not ok")


def _cpufreq(profile: LabProfile) -> str:
    return f"{profile.dut.paths.sysfs.rstrip('/')}/devices/system/cpu"


async def read_governors(dev: Device, profile: LabProfile) -> list[str]:
    base = _cpufreq(profile)
    ls = await dev.run(["ls", base])
    cpus = sorted((n for n in ls.stdout.split() if n.startswith("cpu") and n[3:].isdigit()),
                  key=lambda n: int(n[3:]))
    out = []
    for cpu in cpus:
        try:
            out.append((await dev.read_file(f"{base}/{cpu}/cpufreq/scaling_governor")).decode().strip())
        except Exception:
            out.append("unavailable")
    return out


async def governor(dev: Device, profile: LabProfile) -> KnobState:
    govs = await read_governors(dev, profile)
    ok = bool(govs) and all(g == "performance" for g in govs)
    return KnobState(name="governor", value=",".join(govs) or "none", ok=ok,
                     advice=None if ok else "pin every CPU's scaling_governor to performance")


async def boost(dev: Device, profile: LabProfile) -> KnobState:
    try:
        val = (await dev.read_file(f"{_cpufreq(profile)}/cpufreq/boost")).decode().strip()
    except Exception:
        return KnobState(name="boost", value="unavailable", ok=False,
                         advice="the profile's sysfs path has no cpufreq/boost")
    return KnobState(name="boost", value=val, ok=val == "0",
                     advice=None if val == "0" else "turn boost/turbo off (write 0)")


class Topology(BaseModel):
    vaps_enabled: list[str]
    vaps_disabled: list[str]
    channels: dict[str, str]


async def topology(dev: Device, profile: LabProfile) -> Topology:
    text = (await dev.read_file(f"{profile.dut.paths.config}/wireless")).decode()
    secs = uci.parse(text, "wireless")
    vaps = [s for s in secs if s.type == "wifi-iface"]
    return Topology(
        vaps_enabled=[s.name for s in vaps if s.options.get("disabled", "0") != "1"],
        vaps_disabled=[s.name for s in vaps if s.options.get("disabled", "0") == "1"],
        channels={s.name: s.options.get("channel", "auto") for s in secs if s.type == "wifi-device"})


def judge_topology(topo: Topology, profile: LabProfile) -> KnobState:
    radios = profile.load.radios
    problems = []
    if len(topo.vaps_enabled) != radios:
        problems.append(f"{len(topo.vaps_enabled)} of {radios} VAPs enabled "
                        f"(disabled: {' '.join(topo.vaps_disabled) or 'none'})")
    unpinned = [r for r, ch in topo.channels.items() if ch == "auto"]
    if unpinned:
        problems.append(f"channels unpinned on {' '.join(unpinned)}")
    return KnobState(name="topology", value="; ".join(problems) or f"{radios} VAPs, channels pinned",
                     ok=not problems,
                     advice=None if not problems else "re-enable the scaling VAPs and pin channels")


async def procmgr(dev: Device, profile: LabProfile) -> KnobState:
    try:
        secs = uci.parse((await dev.read_file(f"{profile.dut.paths.config}/procmgr")).decode())
        enabled = uci.get(secs, "main").options.get("enabled", "1") == "1"
    except Exception:
        return KnobState(name="procmgr", value="unknown", ok=False, advice="no procmgr config")
    return KnobState(name="procmgr", value="on" if enabled else "off", ok=enabled,
                     advice=None if enabled else "force the process manager on")


async def datamodel_count(dev: Device, profile: LabProfile) -> dict[str, int]:
    """AssociatedDevice objects per VAP, from the daemon itself (the source of truth)."""
    res = await dev.run([profile.target.rpc_client, "--socket", profile.load.socket, "count"],
                        timeout=10)
    if res.exit_status != 0:
        from labwarden.lab.device import DeviceError

        raise DeviceError(f"{profile.target.rpc_client} count failed: {res.stderr.strip()[:200]}",
                          f"is {profile.target.process} running? lab_status shows it")
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in res.stdout.split())}
