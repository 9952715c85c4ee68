"""Knobs kept in the DUT's UCI config files (`[dut.paths] config`, /etc/config on OpenWrt): the
radio topology (enabled VAPs, pinned channels), the process manager, and two config levers a
patch may need (the trace zones' level, the monitor's RPC)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from labwarden.core.devtext import DeviceText
from labwarden.lab import uci
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.knobs.base import Knob, KnobState, run_reload


class Topology(BaseModel):
    vaps_enabled: list[DeviceText]
    vaps_disabled: list[DeviceText]
    channels: dict[str, DeviceText]


async def _uci_edit(knob: Knob, path: str, edit: Callable[[list[uci.Section]], list[str]]) -> list[str]:
    secs = uci.parse((await knob.dev.read_file(path)).decode(), path)
    changed = edit(secs)
    if changed:
        await knob.dev.write_file(path, uci.dumps(secs).encode())
    return changed


async def _exists(knob: Knob, path: str) -> bool:
    return (await knob.dev.run(["test", "-f", path])).exit_status == 0


class RadioTopology(Knob):
    """Enabled VAPs and pinned channels, from `wireless` (seed 000: 6 radios, channels pinned)."""

    name = "topology"
    requirement = "topology_asserted"
    refusal = "topology_drifted"
    remedy = 'allow healing ("topology") or re-enable the VAPs and pin channels'

    @property
    def path(self) -> str:
        return f"{self.profile.dut.paths.config}/wireless"

    async def available(self) -> str | None:
        return None if await _exists(self, self.path) else f"no wireless config ({self.path})"

    async def topology(self) -> Topology:
        secs = uci.parse((await self.dev.read_file(self.path)).decode(), "wireless")
        vaps = [s for s in secs if s.type == "wifi-iface"]
        return Topology(
            vaps_enabled=[s.name for s in vaps if s.options.get("disabled", "0") != "1"],
            vaps_disabled=[s.name for s in vaps if s.options.get("disabled", "0") == "1"],
            channels={s.name: s.options.get("channel", "auto") for s in secs if s.type == "wifi-device"})

    def judge(self, topo: Topology) -> KnobState:
        radios = self.profile.load.radios
        want = self.profile.topology
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
        return KnobState(name=self.name, value="; ".join(problems) or f"{radios} VAPs, channels pinned",
                         ok=not problems,
                         advice=None if not problems else "re-enable the scaling VAPs and pin channels")

    async def read(self) -> KnobState:
        return self.judge(await self.topology())

    def refusal_reason(self, state: KnobState) -> str:
        return state.value

    async def pin(self) -> list[str]:
        want = self.profile.topology
        if want is None:
            return []

        def edit(secs: list[uci.Section]) -> list[str]:
            changed = []
            for sec in secs:
                if sec.type == "wifi-iface" and sec.name in want.vaps and sec.options.get("disabled") == "1":
                    sec.options["disabled"] = "0"
                    changed.append(f"wireless.{sec.name}.disabled 1 -> 0")
                if sec.type == "wifi-device" and sec.name in want.channels \
                        and sec.options.get("channel") != want.channels[sec.name]:
                    changed.append(f"wireless.{sec.name}.channel {sec.options.get('channel')} -> "
                                   f"{want.channels[sec.name]}")
                    sec.options["channel"] = want.channels[sec.name]
            return changed

        changed = await _uci_edit(self, self.path, edit)
        if changed:
            await run_reload(self.dev, want.reload, "[topology] reload")
            changed.append("applied: " + " ".join(want.reload))
        return changed


class ProcessManager(Knob):
    """The DUT's process manager (procd-like) must be on: it respawns what a test crashes."""

    name = "procmgr"
    requirement = "topology_asserted"
    refusal = "topology_drifted"
    remedy = 'allow healing ("procmgr") or turn it on'

    @property
    def path(self) -> str:
        return f"{self.profile.dut.paths.config}/procmgr"

    async def available(self) -> str | None:
        return None if await _exists(self, self.path) else f"no process manager config ({self.path})"

    async def read(self) -> KnobState:
        try:
            secs = uci.parse((await self.dev.read_file(self.path)).decode())
            enabled = uci.get(secs, "main").options.get("enabled", "1") == "1"
        except (KeyError, uci.UciError):
            return KnobState(name=self.name, value="unknown", ok=False, advice="no procmgr config")
        return KnobState(name=self.name, value="on" if enabled else "off", ok=enabled,
                         advice=None if enabled else "force the process manager on")

    def refusal_reason(self, state: KnobState) -> str:
        return f"process manager {state.value}"

    async def pin(self) -> list[str]:
        if (await self.read()).ok:
            return []
        on = uci.Section("procmgr", "main", {"enabled": "1"})
        await self.dev.write_file(self.path, uci.dumps([on]).encode())
        return ["procmgr.main.enabled 0 -> 1"]


class TraceLevel(Knob):
    """Lever: every trace zone at or below a level (the config half of a trace short-circuit,
    seed 000's patch 0100 + zones 400 -> 200). Pinned only when asked (env_pin)."""

    name = "trace_zones"

    def __init__(self, dev: Device, profile: LabProfile, max_level: int | None = None):
        super().__init__(dev, profile)
        self.max_level = max_level

    @property
    def path(self) -> str | None:
        lv = self.profile.levers
        return None if lv.trace_config is None else f"{self.profile.dut.paths.config}/{lv.trace_config}"

    async def available(self) -> str | None:
        return None if self.path is not None else "no [levers] trace_config in the lab profile"

    async def levels(self) -> dict[str, int]:
        if self.path is None:
            return {}
        secs = uci.parse((await self.dev.read_file(self.path)).decode())
        return {s.options.get("name", s.name): int(s.options.get("level", "0"))
                for s in secs if s.type == "zone"}

    async def read(self) -> KnobState:
        top = max((await self.levels()).values(), default=0)
        ok = self.max_level is None or top <= self.max_level
        return KnobState(name=self.name, value=f"highest zone level {top}", ok=ok,
                         advice=None if ok else f"lower the zones to {self.max_level}")

    async def pin(self) -> list[str]:
        if self.path is None or self.max_level is None:
            return []
        level = self.max_level

        def edit(secs: list[uci.Section]) -> list[str]:
            out = []
            for s in secs:
                if s.type == "zone" and int(s.options.get("level", "0")) > level:
                    out.append(f"trace.{s.name}.level {s.options['level']} -> {level}")
                    s.options["level"] = str(level)
            return out

        changed = await _uci_edit(self, self.path, edit)
        if changed:
            lv = self.profile.levers
            await run_reload(self.dev, lv.trace_reload, "[levers] trace_reload")
            changed.append("applied: " + " ".join(lv.trace_reload))
        return changed


class MonitorRpc(Knob):
    """Lever: which stats RPC the monitor polls (`full`, or `brief` with patch 0902)."""

    name = "monitor_rpc"

    def __init__(self, dev: Device, profile: LabProfile, rpc: str | None = None):
        super().__init__(dev, profile)
        self.rpc = rpc

    @property
    def path(self) -> str | None:
        lv = self.profile.levers
        return None if lv.monitor_config is None else f"{self.profile.dut.paths.config}/{lv.monitor_config}"

    async def available(self) -> str | None:
        return None if self.path is not None else "no [levers] monitor_config in the lab profile"

    async def read(self) -> KnobState:
        assert self.path is not None
        secs = uci.parse((await self.dev.read_file(self.path)).decode())
        now = secs[0].options.get("rpc", "full") if secs else "full"
        ok = self.rpc is None or now == self.rpc
        return KnobState(name=self.name, value=now, ok=ok, advice=None if ok else f"set rpc {self.rpc}")

    async def pin(self) -> list[str]:
        if self.path is None or self.rpc is None:
            return []
        rpc, lv = self.rpc, self.profile.levers

        def edit(secs: list[uci.Section]) -> list[str]:
            main = secs[0]
            if main.options.get("rpc") == rpc:
                return []
            old = main.options.get("rpc", "full")
            main.options["rpc"] = rpc
            return [f"{lv.monitor_config}.{main.name}.rpc {old} -> {rpc}"]

        changed = await _uci_edit(self, self.path, edit)
        if changed:
            await run_reload(self.dev, lv.monitor_reload, "[levers] monitor_reload")
            changed.append("applied: " + " ".join(lv.monitor_reload))
        return changed
