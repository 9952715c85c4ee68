"""The vlab DUT's tuning files: factory provisioning, what a reboot drifts, and a local reader.

A real device loses runtime tuning on reboot; the vlab reproduces the drift seed 000 hit
(scaling VAPs off, channels unpinned, governor schedutil, boost on, trace zones back to factory),
so the guard's healing has something true to heal.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.lab import uci
from labwarden.vlab.layout import VlabLayout

FACTORY_RELEASE = "r1-vlab"
"""DISTRIB_REVISION written at provisioning. sysupgrade never bumps it: it lies on purpose."""


def factory_config_dir() -> Path:
    """The firmware's factory defaults (what /rom/etc/config is on OpenWrt)."""
    return Path(str(resources.files("labwarden.vlab") / "firmware" / "sample-config"))


def cpu_count() -> int:
    return os.cpu_count() or 1


def governor_paths(layout: VlabLayout) -> list[Path]:
    return [
        layout.cpufreq_dir / f"cpu{i}" / "cpufreq" / "scaling_governor"
        for i in range(cpu_count())
    ]


def boost_path(layout: VlabLayout) -> Path:
    return layout.cpufreq_dir / "cpufreq" / "boost"


def provision(layout: VlabLayout) -> None:
    """Lay out a fresh DUT: factory config, process manager on, tuned sysfs mirror, release file."""
    for d in (layout.config_dir, layout.overlay, layout.run_dir, layout.tmp_dir, layout.logs,
              layout.rootfs / "sbin", layout.rootfs / "usr" / "sbin", layout.rootfs / "usr" / "lib"):
        d.mkdir(parents=True, exist_ok=True)
    for src in factory_config_dir().iterdir():
        if src.is_file():
            shutil.copyfile(src, layout.config_dir / src.name)
    uci.save(layout.config_dir / "procmgr",
             [uci.Section("procmgr", "main", {"enabled": "1"})])
    set_governor(layout, "performance")
    set_boost(layout, False)
    layout.openwrt_release.write_text(
        "DISTRIB_ID='OpenWrt'\n"
        "DISTRIB_RELEASE='vlab'\n"
        f"DISTRIB_REVISION='{FACTORY_RELEASE}'\n"
        "DISTRIB_TARGET='x86/64'\n"
        "DISTRIB_DESCRIPTION='labwarden virtual lab'\n"
    )


def set_governor(layout: VlabLayout, governor: str) -> None:
    for path in governor_paths(layout):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(governor + "\n")


def set_boost(layout: VlabLayout, on: bool) -> None:
    path = boost_path(layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("1\n" if on else "0\n")


def apply_drift(layout: VlabLayout) -> list[str]:
    """What a reboot silently does to runtime tuning. Returns what it changed, for the DUT log."""
    changed: list[str] = []
    wireless = uci.load(layout.config_dir / "wireless")
    for sec in wireless:
        if sec.type == "wifi-iface" and sec.options.get("scaling") == "1":
            if sec.options.get("disabled") != "1":
                changed.append(f"wireless.{sec.name}.disabled=1")
            sec.options["disabled"] = "1"
        if sec.type == "wifi-device":
            if sec.options.get("channel") != "auto":
                changed.append(f"wireless.{sec.name}.channel=auto")
            sec.options["channel"] = "auto"
    uci.save(layout.config_dir / "wireless", wireless)

    factory = {s.name: s for s in uci.load(factory_config_dir() / "trace")}
    trace = uci.load(layout.config_dir / "trace")
    for sec in trace:
        level = factory.get(sec.name, sec).options.get("level")
        if level is not None and sec.options.get("level") != level:
            changed.append(f"trace.{sec.name}.level={level}")
            sec.options["level"] = level
    uci.save(layout.config_dir / "trace", trace)

    set_governor(layout, "schedutil")
    set_boost(layout, True)
    changed += ["cpufreq.scaling_governor=schedutil", "cpufreq.boost=1"]
    return changed


class Tuning(BaseModel):
    """The DUT's tunable state as read from its files (locally; lab/ reads it over SSH)."""

    governors: list[str] = Field(description="scaling_governor of each CPU")
    boost: bool = Field(description="cpufreq boost/turbo on")
    vaps_enabled: list[str] = Field(description="wifi-iface sections not disabled")
    vaps_disabled: list[str]
    channels: dict[str, str] = Field(description="radio -> channel ('auto' = unpinned)")
    trace_levels: dict[str, int] = Field(description="trace zone name -> level")
    procmgr_enabled: bool
    stamon_rpc: str = Field(description="'full' or 'brief'")


def read_state(layout: VlabLayout) -> Tuning:
    wireless = uci.load(layout.config_dir / "wireless")
    vaps = [s for s in wireless if s.type == "wifi-iface"]
    stamon = uci.load(layout.config_dir / "stamon")
    return Tuning(
        governors=[p.read_text().strip() for p in governor_paths(layout)],
        boost=boost_path(layout).read_text().strip() == "1",
        vaps_enabled=[s.name for s in vaps if s.options.get("disabled", "0") != "1"],
        vaps_disabled=[s.name for s in vaps if s.options.get("disabled", "0") == "1"],
        channels={s.name: s.options.get("channel", "auto")
                  for s in wireless if s.type == "wifi-device"},
        trace_levels={s.options.get("name", s.name): int(s.options.get("level", "0"))
                      for s in uci.load(layout.config_dir / "trace") if s.type == "zone"},
        procmgr_enabled=uci.get(uci.load(layout.config_dir / "procmgr"), "main")
        .options.get("enabled") == "1",
        stamon_rpc=(stamon[0].options.get("rpc", "full") if stamon else "full"),
    )


def pin(layout: VlabLayout, stamon_rpc: str | None = None,
        trace_level: int | None = None) -> list[str]:
    """Undo reboot drift: factory topology (all VAPs on, channels pinned), governor performance,
    boost off; optionally choose stamon's RPC and lower the factory-400 trace zones.
    Takes effect for stad/stamon at their next start. Returns what it changed."""
    changed: list[str] = []
    factory = {s.name: s for s in uci.load(factory_config_dir() / "wireless")}
    wireless = uci.load(layout.config_dir / "wireless")
    for sec in wireless:
        want = factory.get(sec.name)
        if want is None:
            continue
        for key in ("disabled", "channel"):
            if key in want.options and sec.options.get(key) != want.options[key]:
                sec.options[key] = want.options[key]
                changed.append(f"wireless.{sec.name}.{key}={want.options[key]}")
    uci.save(layout.config_dir / "wireless", wireless)
    if stamon_rpc is not None:
        stamon = uci.load(layout.config_dir / "stamon")
        if stamon[0].options.get("rpc") != stamon_rpc:
            stamon[0].options["rpc"] = stamon_rpc
            changed.append(f"stamon.rpc={stamon_rpc}")
        uci.save(layout.config_dir / "stamon", stamon)
    if trace_level is not None:
        factory_trace = {s.name: s for s in uci.load(factory_config_dir() / "trace")}
        trace = uci.load(layout.config_dir / "trace")
        for sec in trace:
            if factory_trace.get(sec.name, sec).options.get("level") == "400":
                if sec.options.get("level") != str(trace_level):
                    sec.options["level"] = str(trace_level)
                    changed.append(f"trace.{sec.name}.level={trace_level}")
        uci.save(layout.config_dir / "trace", trace)
    if any(g != "performance" for g in (p.read_text().strip() for p in governor_paths(layout))):
        set_governor(layout, "performance")
        changed.append("cpufreq.scaling_governor=performance")
    if boost_path(layout).read_text().strip() != "0":
        set_boost(layout, False)
        changed.append("cpufreq.boost=0")
    return changed
