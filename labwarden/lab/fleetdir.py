"""Where a local fleet (`vlab up --places N`, `qlab up --places N`) keeps its parts.

DIR/fleet.json marks DIR as a fleet (what `down` looks for); DIR/PLACE/ is each DUT's own state
dir (a vlab or a qlab, with its own lab.toml); DIR/labgrid/ the coordinator and exporter
(lab/hub.py); DIR/labgrid-env.yaml the env whose RemotePlace names a template place;
DIR/lab.toml the fleet's profile; DIR/data its one ledger.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel

from labwarden.lab import hub
from labwarden.lab.host import cpupin
from labwarden.lab.host.cpupin import PinError

T = TypeVar("T")


class FleetRecord(BaseModel):
    kind: Literal["vlab", "qlab"]
    coordinator: str
    places: dict[str, str]
    """place -> its DUT's state dir"""


@dataclass(frozen=True)
class FleetDir:
    root: Path

    @classmethod
    def at(cls, root: str | Path) -> FleetDir:
        return cls(Path(root).expanduser().resolve())

    @property
    def record_file(self) -> Path:
        return self.root / "fleet.json"

    @property
    def hub(self) -> Path:
        return self.root / "labgrid"

    @property
    def env_yaml(self) -> Path:
        return self.root / "labgrid-env.yaml"

    @property
    def lab_toml(self) -> Path:
        return self.root / "lab.toml"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def place_dir(self, place: str) -> Path:
        return self.root / place

    def record(self) -> FleetRecord | None:
        try:
            return FleetRecord.model_validate_json(self.record_file.read_text())
        except FileNotFoundError:
            return None

    def is_fleet(self) -> bool:
        return self.record_file.exists()

    def places_status(self, kind: str, status: Callable[[str], T], error: Callable[[str, str], Exception]
                      ) -> tuple[FleetRecord, dict[str, T], bool]:
        """The fleet's record, each place's `status`, and whether the coordinator and exporter
        run; `error(problem, remedy)` is raised where no fleet is (`kind`: vlab or qlab)."""
        record = self.record()
        if record is None:
            raise error(f"no fleet in {self.root}",
                        f"`labwarden {kind} up --places N --dir DIR` starts one")
        places = {name: status(dir) for name, dir in record.places.items()}
        return record, places, hub.running(self.hub)


def place_progress(progress: Callable[[str], None], place: str) -> Callable[[str], None]:
    """`progress` with each message prefixed by its place's name."""
    return lambda msg: progress(f"{place}: {msg}")


@dataclass(frozen=True)
class FleetProfile:
    """What a fleet's profile adds to its first DUT's profile: where the places are."""

    dest: Path
    env_yaml: Path
    coordinator: str
    places: list[str]
    place_profiles: dict[str, str]
    data_dir: Path


def fleet_labgrid_section(fleet: FleetProfile, host_key: str) -> str:
    """The fleet profile's [dut.labgrid]."""
    places = ", ".join(json.dumps(p) for p in fleet.places)
    profiles = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in fleet.place_profiles.items())
    return (f"[dut.labgrid]\nenv = {json.dumps(str(fleet.env_yaml))}\n"
            f"coordinator = {json.dumps(fleet.coordinator)}\n"
            f"host_key = {json.dumps(host_key)}\nplaces = [{places}]\nplace_profiles = {{ {profiles} }}\n")


PLACE_MARK = "# -- this DUT is a labgrid place"
"""The first line of the [dut.place] section a fleet adds to each place's own profile (always
last in the file: `unbind_place` cuts from here)."""


def place_section(place: str, coordinator: str) -> str:
    """A place's own profile's [dut.place]: which place of which coordinator its DUT is."""
    return (f"{PLACE_MARK} of a fleet (written by `up --places`, removed by `down`): every call\n"
            "# that touches the DUT holds the place at the coordinator first, and is refused while\n"
            "# someone else holds or has reserved it\n"
            f"[dut.place]\nname = {json.dumps(place)}\ncoordinator = {json.dumps(coordinator)}\n")


def bind_place(lab_toml: str | Path, place: str, coordinator: str) -> None:
    """Append [dut.place] to a place's own profile (replacing one a fleet wrote before): a TOML
    table may follow the [dut] it belongs to anywhere in the file."""
    path = Path(lab_toml)
    text = _unbound(path.read_text())
    path.write_text(text.rstrip("\n") + "\n\n" + place_section(place, coordinator))


def unbind_place(lab_toml: str | Path) -> None:
    """Remove the [dut.place] a fleet added (the DUT is on its own again); none is fine."""
    path = Path(lab_toml)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return
    if PLACE_MARK in text:
        path.write_text(_unbound(text).rstrip("\n") + "\n")


def _unbound(text: str) -> str:
    at = text.find(PLACE_MARK)
    return text if at < 0 else text[:at]


def place_names(kind: str, n: int) -> list[str]:
    return [f"{kind}-{i}" for i in range(n)]


def cpus_for(n: int, option: str = "--places") -> list[int]:
    """One CPU per DUT: the first `n` this host runs processes on; PinError if it has fewer."""
    cpus = cpupin.host_cpus()
    if n > len(cpus):
        listed = ", ".join(map(str, cpus))
        raise PinError(f"{option} {n}: this host has {len(cpus)} CPU(s) ({listed}) and each "
                       "local DUT of a fleet is pinned to a CPU of its own (two DUTs on one CPU measure "
                       "each other)", f"use {option} {len(cpus)} or fewer")
    return cpus[:n]


def env_yaml(first_place: str, keyfile: Path | None, extra: str = "") -> str:
    """The fleet's env YAML: a RemotePlace whose name each lease replaces, the SSH key."""
    driver = f"    drivers:\n      SSHDriver: {{keyfile: '{keyfile}'}}\n" if keyfile else ""
    return (f"# labgrid env of a fleet, written by labwarden: RemotePlace is a template, a lease names "
            f"its place\ntargets:\n  main:\n    resources:\n      RemotePlace: {{name: {first_place}}}\n"
            f"{driver}{extra}")
