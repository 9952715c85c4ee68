"""Workload points a lab can hold: a call that asks for clients (or streams) its load cannot hold
is refused before anything runs, naming the argument -- never measured and recorded as if the
DUT held them. A DUT without a load (`[load] kind = "none"`: a daemon busy with its own input)
holds one point, 0; measuring "18 clients" there would store 18 stations the DUT never had."""

from __future__ import annotations

from collections.abc import Iterable

from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers


class Unholdable(LabError):
    """A workload point the lab's load cannot hold."""

    kind = "refused"


def check(profile: LabProfile, field: str, points: Iterable[int]) -> None:
    """Raise Unholdable (code `not_applicable`) when `field` asks for a point the load cannot
    hold: any point but 0 on a load without an axis."""
    driver = load_drivers.DRIVERS[profile.load.kind]
    asked = [p for p in points if p != 0]
    if driver.axis is not None or not asked:
        return
    raise Unholdable(
        f"{field}: {asked[0] if len(asked) == 1 else asked} asks for clients, and this lab has "
        f"no load to hold them ([load] kind = \"{profile.load.kind}\": the DUT works on its own "
        "input, one workload point: 0)",
        f"pass {field} {'[0]' if field == 'densities' else '0'} (or leave it out where it has a "
        "default): the DUT is measured at its own workload; for clients, give the lab profile a "
        "[load] that holds them", code="not_applicable")
