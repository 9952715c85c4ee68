"""`vlab up --places N`: N vlabs, each pinned to a CPU of its own, as places of a labgrid
coordinator of our own (lab/hub.py), and the fleet's lab profile; `down` removes all of it.

The DUTs share one SSH host key and client key (vlab-0's, copied before the others come up): the
fleet's profile pins one host key and its env YAML names one key, like a fleet of one image.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.lab import hub
from labwarden.lab.fleetdir import (
    FleetDir,
    FleetProfile,
    FleetRecord,
    bind_place,
    cpus_for,
    env_yaml,
    place_names,
    place_progress,
    unbind_place,
)
from labwarden.vlab import control, firmware, profile_writer
from labwarden.vlab.layout import VlabLayout


class FleetInfo(BaseModel):
    root: str
    lab_toml: str
    coordinator: str
    places: dict[str, control.VlabInfo] = Field(description="place -> its vlab")
    notes: list[str] = Field(default_factory=list)


def up(root: str | Path, places: int, patches: list[str] | None = None,
       progress: Callable[[str], None] = lambda _msg: None) -> FleetInfo:
    fleet = FleetDir.at(root)
    if places < 1:
        raise control.VlabError(f"--places {places}: a fleet has at least one place",
                                "use --places 1 or more")
    if fleet.is_fleet():
        raise control.VlabError(f"a fleet is already up in {fleet.root}",
                                f"use it (lab profile {fleet.lab_toml}), or `labwarden vlab down --dir "
                                f"{fleet.root}` first")
    cpus = cpus_for(places)
    if fleet.lab_toml.exists():
        raise control.VlabError(f"{fleet.root} holds a lab already ({fleet.lab_toml}): a fleet needs "
                                "a directory of its own", "pick another --dir")
    names = place_names("vlab", places)
    fleet.root.mkdir(parents=True, exist_ok=True)
    vlabs: dict[str, control.VlabInfo] = {}
    try:
        for name, cpu in zip(names, cpus, strict=True):
            layout = VlabLayout.at(fleet.place_dir(name))
            if vlabs:  # one host key and client key for the fleet: the first DUT's
                first = VlabLayout.at(fleet.place_dir(names[0]))
                shutil.copytree(first.keys, layout.keys, dirs_exist_ok=True)
            progress(f"{name} (CPU {cpu})")
            vlabs[name] = control.up(layout.root, patches=patches, cpu=cpu,
                                     progress=place_progress(progress, name))
            _record(fleet, "", {n: v.root for n, v in vlabs.items()})  # down finds them from here on
        progress("labgrid coordinator and exporter")
        hub_info = hub.up(fleet.hub, [hub.HubPlace(name=name, port=int(v.ssh.rsplit(":", 1)[1]),
                                                   tags={"fleet": "vlab"}) for name, v in vlabs.items()])
        _record(fleet, hub_info.coordinator, {n: v.root for n, v in vlabs.items()})
        for name, v in vlabs.items():  # each DUT's own profile: touched only under its place
            bind_place(v.lab_toml, name, hub_info.coordinator)
        first = VlabLayout.at(vlabs[names[0]].root)
        fleet.env_yaml.write_text(env_yaml(names[0], first.client_key))
        manifest, _cached = firmware.build(first, patches)
        profile_writer.write(first, int(vlabs[names[0]].ssh.rsplit(":", 1)[1]), manifest,
                             fleet=FleetProfile(
                                 dest=fleet.lab_toml, env_yaml=fleet.env_yaml,
                                 coordinator=hub_info.coordinator,
                                 places=names, place_profiles={n: v.lab_toml for n, v in vlabs.items()},
                                 data_dir=fleet.data_dir))
    except BaseException:
        down(fleet.root)
        raise
    return FleetInfo(root=str(fleet.root), lab_toml=str(fleet.lab_toml), coordinator=hub_info.coordinator,
                     places=vlabs, notes=[n for v in vlabs.values() for n in v.notes])


class FleetStatus(BaseModel):
    root: str
    up: bool = Field(description="the coordinator, the exporter and every DUT run")
    coordinator: str
    coordinator_up: bool
    places: dict[str, control.VlabStatus]


def status(root: str | Path) -> FleetStatus:
    fleet = FleetDir.at(root)
    record, places, hub_up = fleet.places_status("vlab", control.status, control.VlabError)
    return FleetStatus(root=str(fleet.root), up=hub_up and all(st.up for st in places.values()),
                       coordinator=record.coordinator, coordinator_up=hub_up, places=places)


def _record(fleet: FleetDir, coordinator: str, places: dict[str, str]) -> None:
    fleet.record_file.write_text(
        FleetRecord(kind="vlab", coordinator=coordinator, places=places).model_dump_json(indent=1) + "\n")


def down(root: str | Path) -> list[int]:
    """Stop the coordinator and exporter (places, reservations), every vlab of the fleet; remove
    the fleet's files but the DUTs' state dirs (their builds are a cache) and its data."""
    fleet = FleetDir.at(root)
    stopped = hub.down(fleet.hub)
    record = fleet.record()
    dirs = list(record.places.values()) if record else [
        str(p) for p in fleet.root.glob("vlab-*") if p.is_dir()]
    for vlab in dirs:
        stopped += control.down(vlab)
        unbind_place(VlabLayout.at(vlab).lab_toml)
    for path in (fleet.record_file, fleet.env_yaml, fleet.lab_toml):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return stopped
