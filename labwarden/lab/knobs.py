"""Lab knobs read on the DUT and judged (pyperf's show/tune symmetry): governor, boost,
topology (VAPs and channels), process manager, trace zones. `lab_status` shows them; the guard
and `env_pin` apply them (apply lives beside read so they cannot disagree on what "pinned" is).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceText
from labwarden.lab import uci
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device


class KnobState(BaseModel):
    name: str
    value: DeviceText = Field(description="what the DUT has now")
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
    vaps_enabled: list[DeviceText]
    vaps_disabled: list[DeviceText]
    channels: dict[str, DeviceText]


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
    want = profile.topology
    problems = []
    if want is not None:
        off = [v for v in want.vaps if v not in topo.vaps_enabled]
        if off:
            problems.append(f"VAPs disabled: {' '.join(off)}")
        wrong = [f"{r}={topo.channels.get(r, '?')} (want {ch})" for r, ch in want.channels.items()
                 if topo.channels.get(r) != ch]
        if wrong:
            problems.append("channels " + ", ".join(wrong))
    else:
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
        from labwarden.lab.dut.errors import DeviceError

        raise DeviceError(f"{profile.target.rpc_client} count failed: {res.stderr.strip()[:200]}",
                          f"is {profile.target.process} running? lab_status shows it")
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in res.stdout.split())}


# ---- apply (healing and env_pin): idempotent, each returns what it changed ----

_WRITE = ["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "lw-write"]
"""sysfs files are written in place (no temp file + rename there); value and path are argv."""


async def _write(dev: Device, path: str, value: str) -> None:
    res = await dev.run([*_WRITE, value, path], timeout=10)
    if res.exit_status != 0:
        from labwarden.lab.dut.errors import DeviceError

        raise DeviceError(f"cannot write {path}: {res.stderr.strip()[:200]}", "root on the DUT?")


async def pin_governor(dev: Device, profile: LabProfile) -> list[str]:
    changed = []
    base = _cpufreq(profile)
    for i, gov in enumerate(await read_governors(dev, profile)):
        if gov != "performance":
            await _write(dev, f"{base}/cpu{i}/cpufreq/scaling_governor", "performance")
            changed.append(f"cpu{i} scaling_governor {gov} -> performance")
    return changed


async def pin_boost(dev: Device, profile: LabProfile) -> list[str]:
    state = await boost(dev, profile)
    if state.ok or state.value == "unavailable":
        return []
    await _write(dev, f"{_cpufreq(profile)}/cpufreq/boost", "0")
    return [f"boost {state.value} -> 0"]


async def pin_topology(dev: Device, profile: LabProfile) -> list[str]:
    want = profile.topology
    if want is None:
        return []
    path = f"{profile.dut.paths.config}/wireless"
    secs = uci.parse((await dev.read_file(path)).decode(), "wireless")
    changed = []
    for sec in secs:
        if sec.type == "wifi-iface" and sec.name in want.vaps and sec.options.get("disabled") == "1":
            sec.options["disabled"] = "0"
            changed.append(f"wireless.{sec.name}.disabled 1 -> 0")
        if sec.type == "wifi-device" and sec.name in want.channels:
            if sec.options.get("channel") != want.channels[sec.name]:
                changed.append(f"wireless.{sec.name}.channel {sec.options.get('channel')} -> "
                               f"{want.channels[sec.name]}")
                sec.options["channel"] = want.channels[sec.name]
    if changed:
        await dev.write_file(path, uci.dumps(secs).encode())
        res = await dev.run(want.reload, timeout=60)
        if res.exit_status != 0:
            from labwarden.lab.dut.errors import DeviceError

            raise DeviceError(f"{' '.join(want.reload)} failed: {res.stderr.strip()[:200]}",
                              "check [topology] reload in the profile")
        changed.append("applied: " + " ".join(want.reload))
    return changed


async def pin_procmgr(dev: Device, profile: LabProfile) -> list[str]:
    state = await procmgr(dev, profile)
    if state.ok:
        return []
    path = f"{profile.dut.paths.config}/procmgr"
    await dev.write_file(path, uci.dumps([uci.Section("procmgr", "main", {"enabled": "1"})]).encode())
    return ["procmgr.main.enabled 0 -> 1"]


async def _uci_edit(dev: Device, path: str, edit) -> list[str]:  # type: ignore[no-untyped-def]
    secs = uci.parse((await dev.read_file(path)).decode(), path)
    changed = edit(secs)
    if changed:
        await dev.write_file(path, uci.dumps(secs).encode())
    return changed


async def _reload(dev: Device, argv: list[str]) -> None:
    if argv:
        res = await dev.run(argv, timeout=60)
        if res.exit_status != 0:
            from labwarden.lab.dut.errors import DeviceError

            raise DeviceError(f"{' '.join(argv)} failed: {res.stderr.strip()[:200]}",
                              "check [levers] in the lab profile")


async def trace_levels(dev: Device, profile: LabProfile) -> dict[str, int]:
    lv = profile.levers
    if lv.trace_config is None:
        return {}
    secs = uci.parse((await dev.read_file(f"{profile.dut.paths.config}/{lv.trace_config}")).decode())
    return {s.options.get("name", s.name): int(s.options.get("level", "0")) for s in secs if s.type == "zone"}


async def set_trace_max(dev: Device, profile: LabProfile, level: int) -> list[str]:
    """Lower every trace zone above `level` to it (the config half of patch 0100)."""
    lv = profile.levers
    if lv.trace_config is None:
        return []

    def edit(secs: list[uci.Section]) -> list[str]:
        out = []
        for s in secs:
            if s.type == "zone" and int(s.options.get("level", "0")) > level:
                out.append(f"trace.{s.name}.level {s.options['level']} -> {level}")
                s.options["level"] = str(level)
        return out

    changed = await _uci_edit(dev, f"{profile.dut.paths.config}/{lv.trace_config}", edit)
    if changed:
        await _reload(dev, lv.trace_reload)
        changed.append("applied: " + " ".join(lv.trace_reload))
    return changed


async def set_monitor_rpc(dev: Device, profile: LabProfile, rpc: str) -> list[str]:
    lv = profile.levers
    if lv.monitor_config is None:
        return []

    def edit(secs: list[uci.Section]) -> list[str]:
        main = secs[0]
        if main.options.get("rpc") == rpc:
            return []
        old = main.options.get("rpc", "full")
        main.options["rpc"] = rpc
        return [f"{lv.monitor_config}.{main.name}.rpc {old} -> {rpc}"]

    changed = await _uci_edit(dev, f"{profile.dut.paths.config}/{lv.monitor_config}", edit)
    if changed:
        await _reload(dev, lv.monitor_reload)
        changed.append("applied: " + " ".join(lv.monitor_reload))
    return changed
