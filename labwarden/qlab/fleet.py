"""`qlab up --places N`: N qlabs as places of a labgrid coordinator of our own (lab/hub.py), each
exporting its guest's SSH endpoint, and the fleet's lab profile; `down` removes all of it.

The qlabs share the image's host key and client key, so one profile pins them for every place.
They are not pinned to CPUs: each QEMU runs its own vCPUs, and the qlab's default clock on TCG
(icount) makes a guest's CPU% independent of the host's load (`qlab up --clock`). A place
exports only its NetworkService (labgrid's exporter cannot export the qlab daemon's control
socket): the fleet profile flashes by the guest's own sysupgrade; each place's own profile
(place_profiles) keeps the labgrid flash through its qlab daemon.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.lab import hub
from labwarden.lab.fleetdir import (
    FleetDir,
    FleetProfile,
    FleetRecord,
    bind_place,
    env_yaml,
    place_names,
    place_progress,
    unbind_place,
)
from labwarden.qlab import control, firmware, image, profile_writer
from labwarden.qlab.layout import QlabLayout


class QlabFleetInfo(BaseModel):
    root: str
    lab_toml: str
    coordinator: str
    places: dict[str, control.QlabInfo] = Field(description="place -> its qlab")


class QlabFleetStatus(BaseModel):
    root: str
    up: bool = Field(description="the coordinator, the exporter and every qlab run")
    coordinator: str
    coordinator_up: bool
    places: dict[str, control.QlabStatus]


def status(root: str | Path) -> QlabFleetStatus:
    fleet = FleetDir.at(root)
    record, places, hub_up = fleet.places_status("qlab", control.status, control.QlabError)
    return QlabFleetStatus(root=str(fleet.root), up=hub_up and all(st.up for st in places.values()),
                           coordinator=record.coordinator, coordinator_up=hub_up, places=places)


def up(root: str | Path, places: int, *, accel: Literal["auto", "kvm", "tcg"] = "auto",
       clock: str | None = None, memory: str = "512M", smp: int | None = None,
       patches: list[str] | None = None,
       progress: Callable[[str], None] = lambda _msg: None) -> QlabFleetInfo:
    fleet = FleetDir.at(root)
    if places < 1:
        raise control.QlabError(f"--places {places}: a fleet has at least one place",
                                "use --places 1 or more")
    if fleet.is_fleet():
        raise control.QlabError(f"a fleet is already up in {fleet.root}",
                                f"use it (lab profile {fleet.lab_toml}), or `labwarden qlab down --dir "
                                f"{fleet.root}` first")
    if fleet.lab_toml.exists():
        raise control.QlabError(f"{fleet.root} holds a lab already ({fleet.lab_toml}): a fleet needs "
                                "a directory of its own", "pick another --dir")
    names = place_names("qlab", places)
    fleet.root.mkdir(parents=True, exist_ok=True)
    qlabs: dict[str, control.QlabInfo] = {}
    try:
        for name in names:
            progress(name)
            qlabs[name] = control.up(fleet.place_dir(name), accel=accel, clock=clock, memory=memory, smp=smp,
                                     patches=patches, progress=place_progress(progress, name))
            _record(fleet, "", {n: q.root for n, q in qlabs.items()})  # down finds them from here on
        progress("labgrid coordinator and exporter")
        return join(fleet.root, qlabs, patches)
    except BaseException:
        down(fleet.root)
        raise


def join(root: str | Path, qlabs: dict[str, control.QlabInfo],
         patches: list[str] | None = None) -> QlabFleetInfo:
    """Make running qlabs (place -> qlab) the places of a new coordinator and exporter in ROOT
    and write the fleet's profile there. `down(root, keep_qlabs=True)` undoes only this."""
    fleet = FleetDir.at(root)
    names = list(qlabs)
    fleet.root.mkdir(parents=True, exist_ok=True)
    hub_info = hub.up(fleet.hub, [hub.HubPlace(name=name, port=int(q.ssh.rsplit(":", 1)[1]),
                                               tags={"fleet": "qlab"}) for name, q in qlabs.items()])
    _record(fleet, hub_info.coordinator, {n: q.root for n, q in qlabs.items()})
    for name, q in qlabs.items():  # each qlab's own profile: touched only under its place
        bind_place(q.lab_toml, name, hub_info.coordinator)
    img = image.ensure()
    fleet.env_yaml.write_text(env_yaml(names[0], Path(img.client_key)))
    first = QlabLayout.at(qlabs[names[0]].root)
    manifest, _image = firmware.build(first, patches)
    profile_writer.write(first, img, manifest, clock=qlabs[names[0]].clock, fleet=FleetProfile(
        dest=fleet.lab_toml, env_yaml=fleet.env_yaml, coordinator=hub_info.coordinator, places=names,
        place_profiles={n: q.lab_toml for n, q in qlabs.items()}, data_dir=fleet.data_dir))
    return QlabFleetInfo(root=str(fleet.root), lab_toml=str(fleet.lab_toml), coordinator=hub_info.coordinator,
                         places=qlabs)


def _record(fleet: FleetDir, coordinator: str, places: dict[str, str]) -> None:
    fleet.record_file.write_text(
        FleetRecord(kind="qlab", coordinator=coordinator, places=places).model_dump_json(indent=1) + "\n")


def down(root: str | Path, *, keep_qlabs: bool = False) -> list[int]:
    """Stop the coordinator and exporter (places, reservations) and every qlab of the fleet (not
    with `keep_qlabs`); remove the fleet's files but the qlabs' state dirs and the fleet's data.
    Returns the pids stopped."""
    fleet = FleetDir.at(root)
    stopped = hub.down(fleet.hub)
    record = fleet.record()
    dirs = list(record.places.values()) if record else [
        str(p) for p in fleet.root.glob("qlab-*") if p.is_dir()]
    for qlab in dirs:
        unbind_place(QlabLayout.at(qlab).lab_toml)  # on its own again (kept, or for its next up)
    for qlab in [] if keep_qlabs else dirs:
        stopped += control.down(qlab)
    for path in (fleet.record_file, fleet.env_yaml, fleet.lab_toml):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return stopped
