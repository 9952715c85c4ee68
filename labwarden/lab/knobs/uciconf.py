"""Knobs kept in the DUT's UCI config files (`[dut.paths] config`, /etc/config on OpenWrt): the
radio topology (enabled VAPs, pinned channels), the process manager, and two config levers a
patch may need (the trace zones' level, the monitor's RPC)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel

from labwarden.core.devtext import DeviceText, quote
from labwarden.lab import uci
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.knobs.base import Knob, KnobState, run_reload


class Topology(BaseModel):
    vaps_enabled: list[DeviceText]
    vaps_disabled: list[DeviceText]
    channels: dict[DeviceText, DeviceText]


async def _uci_edit(knob: Knob, path: str, edit: Callable[[list[uci.Section]], list[str]]) -> list[str]:
    secs = uci.parse((await knob.dev.read_file(path)).decode(), path)
    changed = edit(secs)
    if changed:
        await knob.dev.write_file(path, uci.dumps(secs).encode())
    return changed


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
        if self.profile.topology is None:  # the reader is declared by the profile, or absent
            return "no [topology] in the lab profile"
        return await self.missing(self.path, "wireless config")

    async def topology(self) -> Topology:
        secs = uci.parse((await self.dev.read_file(self.path)).decode(), "wireless")
        vaps = [s for s in secs if s.type == "wifi-iface"]
        return Topology(
            vaps_enabled=[s.name for s in vaps if s.options.get("disabled", "0") != "1"],
            vaps_disabled=[s.name for s in vaps if s.options.get("disabled", "0") == "1"],
            channels={s.name: s.options.get("channel", "auto") for s in secs if s.type == "wifi-device"})

    def judge(self, topo: Topology) -> KnobState:
        want = self.profile.topology
        assert want is not None  # available() says not applicable without it
        problems = []
        off = [v for v in want.vaps if v not in topo.vaps_enabled]
        if off:
            problems.append(f"VAPs disabled: {' '.join(off)}")
        wrong = [f"{r}={topo.channels.get(r, '?')} (want {ch})" for r, ch in want.channels.items()
                 if topo.channels.get(r) != ch]
        if wrong:
            problems.append("channels " + ", ".join(wrong))
        return KnobState(name=self.name, value="; ".join(problems) or
                         f"{len(want.vaps)} VAPs, channels pinned", ok=not problems,
                         advice=None if not problems else "re-enable the scaling VAPs and pin channels")

    async def read(self) -> KnobState:
        return self.judge(await self.topology())

    def refusal_reason(self, state: KnobState) -> str:
        return f"topology: {quote(state.value)}"  # VAP and channel names read from the DUT

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
        return await self.missing(self.path, "process manager config")

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


class UciLever(Knob):
    """A config lever: one UCI file named in [levers] of the lab profile, set only on request
    (env_pin) to `want`, and applied with the reload command named beside it."""

    file_key: ClassVar[str]
    """The [levers] key naming the UCI file."""
    reload_key: ClassVar[str]
    """The [levers] key holding the argv that applies a change."""

    def __init__(self, dev: Device, profile: LabProfile, want: Any = None):
        super().__init__(dev, profile)
        self.want = want

    @property
    def path(self) -> str | None:
        name = getattr(self.profile.levers, self.file_key)
        return None if name is None else f"{self.profile.dut.paths.config}/{name}"

    async def available(self) -> str | None:
        return None if self.path is not None else f"no [levers] {self.file_key} in the lab profile"

    async def sections(self) -> list[uci.Section]:
        assert self.path is not None
        return uci.parse((await self.dev.read_file(self.path)).decode(), self.path)

    async def apply(self, edit: Callable[[list[uci.Section]], list[str]]) -> list[str]:
        """Edit the file; when something changed, run the reload and say so."""
        if self.path is None or self.want is None:
            return []
        changed = await _uci_edit(self, self.path, edit)
        if changed:
            argv = getattr(self.profile.levers, self.reload_key)
            await run_reload(self.dev, argv, f"[levers] {self.reload_key}")
            changed.append("applied: " + " ".join(argv))
        return changed


class TraceLevel(UciLever):
    """Lever: every trace zone at or below a level (the config half of a trace short-circuit,
    seed 000's patch 0100 + zones 400 -> 200)."""

    name = "trace_zones"
    file_key = "trace_config"
    reload_key = "trace_reload"

    async def levels(self) -> dict[str, int]:
        if self.path is None:
            return {}
        return {s.options.get("name", s.name): int(s.options.get("level", "0"))
                for s in await self.sections() if s.type == "zone"}

    async def read(self) -> KnobState:
        top = max((await self.levels()).values(), default=0)
        ok = self.want is None or top <= self.want
        return KnobState(name=self.name, value=f"highest zone level {top}", ok=ok,
                         advice=None if ok else f"lower the zones to {self.want}")

    async def pin(self) -> list[str]:
        level = self.want

        def edit(secs: list[uci.Section]) -> list[str]:
            out = []
            for s in secs:
                if s.type == "zone" and int(s.options.get("level", "0")) > level:
                    out.append(f"trace.{s.name}.level {s.options['level']} -> {level}")
                    s.options["level"] = str(level)
            return out

        return await self.apply(edit)


class MonitorRpc(UciLever):
    """Lever: which stats RPC the monitor polls (`full`, or `brief` with patch 0902)."""

    name = "monitor_rpc"
    file_key = "monitor_config"
    reload_key = "monitor_reload"

    async def read(self) -> KnobState:
        secs = await self.sections()
        now = secs[0].options.get("rpc", "full") if secs else "full"
        ok = self.want is None or now == self.want
        return KnobState(name=self.name, value=now, ok=ok, advice=None if ok else f"set rpc {self.want}")

    async def pin(self) -> list[str]:
        rpc, file = self.want, self.profile.levers.monitor_config

        def edit(secs: list[uci.Section]) -> list[str]:
            main = secs[0]
            if main.options.get("rpc") == rpc:
                return []
            old = main.options.get("rpc", "full")
            main.options["rpc"] = rpc
            return [f"{file}.{main.name}.rpc {old} -> {rpc}"]

        return await self.apply(edit)
