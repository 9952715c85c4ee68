"""A fleet place is touched only under its reservation (issue 45, deliverable 3).

`vlab up --places 2` (a real coordinator and exporter, two vlabs); a rival client -- the real
`labgrid-client`, under another identity -- holds place vlab-1 (acquired, or a reservation
allocated to it). `associate` and `flash` through vlab-1's OWN profile (the one `serve` and
`call` are pointed at) are refused on both doors, naming the rival, with a guard decision in the
transcript, and the DUT is untouched (no station, the daemon not restarted). Released, the same
calls run. `serve` on the fleet's profile refuses with error:/remedy:, no traceback.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from labwarden.lab.config import LabProfile
from labwarden.lab.hub import free_port
from labwarden.server.app import build_server
from labwarden.vlab import control
from labwarden.vlab import fleet as vlab_fleet

from .fleet_fixtures import clean_lg_env, coordinator_state  # noqa: F401 (autouse)

PLACE = "vlab-1"
RIVAL = "rival"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vlab_fleet.FleetInfo]:
    """Two vlabs as places vlab-0, vlab-1 of a real coordinator (no measurement: no uprobes)."""
    root = tmp_path_factory.mktemp("fleetres") / "fleet"
    try:
        yield vlab_fleet.up(root, 2)
    finally:
        vlab_fleet.down(root)


def rival(info: vlab_fleet.FleetInfo, *args: str) -> str:
    """`labgrid-client -x COORDINATOR ARGS` as the rival user; its stdout."""
    env = {**os.environ, "LG_USERNAME": RIVAL}
    res = subprocess.run([str(BIN / "labgrid-client"), "-x", info.coordinator, *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, (args, res.stdout, res.stderr)
    return res.stdout


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real `labwarden` CLI of this checkout."""
    return subprocess.run([sys.executable, "-m", "labwarden.cli.app", *args], capture_output=True,
                          stdin=subprocess.DEVNULL, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


def call(lab: str, tool: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """`labwarden call TOOL ARGS --lab LAB --json`: its exit status and JSON output."""
    res = cli("call", tool, json.dumps(args), "--lab", lab, "--json")
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)


def dut(info: vlab_fleet.FleetInfo) -> tuple[int, int | None]:
    """(stations the place's DUT holds, its daemon's pid): what associate and flash change."""
    st = control.status(info.places[PLACE].root)
    assert st.up and st.associated is not None, st
    return st.associated["total"], st.services["stad"]


def refusals(lab: str) -> list[dict[str, Any]]:
    """The guard's refusals in the place profile's transcript, oldest first."""
    db = LabProfile.from_file(lab).data_dir() / "transcripts.db"
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT body FROM events WHERE kind = 'guard_decision' ORDER BY rowid").fetchall()
    return [body for (raw,) in rows if (body := json.loads(raw))["decision"] == "refuse"]


def holder(info: vlab_fleet.FleetInfo) -> str | None:
    return coordinator_state(info.coordinator)[0][PLACE]


def rival_holder() -> str:
    return f"{socket.gethostname()}/{RIVAL}"


def test_the_place_profile_names_its_place(fleet: vlab_fleet.FleetInfo) -> None:
    """`vlab up --places` binds each DUT's own profile to its place at the coordinator."""
    for name, vlab in fleet.places.items():
        place = LabProfile.from_file(vlab.lab_toml).dut.place
        assert place is not None and (place.name, place.coordinator) == (name, fleet.coordinator)


def test_a_rival_hold_refuses_the_place_profile_on_the_cli(fleet: vlab_fleet.FleetInfo) -> None:
    lab = fleet.places[PLACE].lab_toml
    baseline = LabProfile.from_file(lab).build.baseline
    assert baseline is not None
    stations, stad = dut(fleet)
    assert stations == 0 and stad is not None
    seen = len(refusals(lab)) if (LabProfile.from_file(lab).data_dir() / "transcripts.db").exists() else 0

    def refused_naming(how: str) -> None:
        for tool, args in (("associate", {"stations": 6}), ("flash", {"build_id": baseline})):
            status, out = call(lab, tool, args)
            error = out["error"]
            assert status == 1 and not out["ok"] and error["code"] == "place_held", out
            assert how in error["message"] and rival_holder() in error["message"], out
            assert RIVAL in error["remedy"], out
        assert dut(fleet) == (0, stad)  # no station, no flash (the daemon was not restarted)

    # acquired by the rival
    rival(fleet, "-p", PLACE, "acquire")
    try:
        refused_naming("acquired by")
    finally:
        rival(fleet, "-p", PLACE, "release")
    # a reservation allocated to the rival: the coordinator lets only them acquire it
    token = next(line.split("=", 1)[1].strip("'\"") for line in
                 rival(fleet, "reserve", "--wait", "--shell", f"name={PLACE}").splitlines()
                 if line.startswith("export LG_TOKEN="))
    try:
        refused_naming("reserved for")
    finally:
        rival(fleet, "cancel-reservation", token)
    logged = refusals(lab)[seen:]
    assert [(r["tool"], r["code"]) for r in logged] == [("associate", "place_held"),
                                                        ("flash", "place_held")] * 2
    assert all(rival_holder() in r["reason"] for r in logged)

    # released: the same calls run, each under its own hold, given back after
    status, out = call(lab, "associate", {"stations": 6})
    assert status == 0 and out["result"]["datamodel_count"] == 6, out
    assert dut(fleet) == (6, stad)
    status, out = call(lab, "flash", {"build_id": baseline})
    assert status == 0 and out["result"]["flashed"], out
    stad_after = dut(fleet)[1]
    assert stad_after not in (None, stad)  # flashed: the daemon restarted
    assert holder(fleet) is None  # each call's session released the place
    assert call(lab, "associate", {"stations": 0})[0] == 0


@pytest.mark.anyio
async def test_a_rival_hold_refuses_the_place_profile_over_mcp(fleet: vlab_fleet.FleetInfo) -> None:
    """The MCP door: the server holds the place from its first DUT call until it stops; a rival
    holding it first, or taking it from the server (`release --kick`), gets the calls refused."""
    import anyio

    lab = fleet.places[PLACE].lab_toml
    profile = LabProfile.from_file(lab)
    me = await anyio.to_thread.run_sync(lambda: holder(fleet))
    assert me is None

    async def r(*args: str) -> str:
        return await anyio.to_thread.run_sync(lambda: rival(fleet, *args))

    async def held() -> str | None:
        return await anyio.to_thread.run_sync(lambda: holder(fleet))

    async with Client(build_server(profile)) as client:
        await r("-p", PLACE, "acquire")
        try:
            res = await client.call_tool("associate", {"stations": 6})
            text = res.content[0].text  # type: ignore[union-attr]
            assert res.is_error and "place_held" in text and rival_holder() in text, text
            assert (await anyio.to_thread.run_sync(lambda: dut(fleet)))[0] == 0
        finally:
            await r("-p", PLACE, "release")
        res = await client.call_tool("associate", {"stations": 6})
        assert not res.is_error and res.structured_content["datamodel_count"] == 6, res
        ours = await held()
        assert ours is not None and ours != rival_holder()  # the server holds it now
        # taken from the server: the next call is refused, naming the new holder
        await r("-p", PLACE, "release", "--kick")
        await r("-p", PLACE, "acquire")
        try:
            res = await client.call_tool("associate", {"stations": 0})
            text = res.content[0].text  # type: ignore[union-attr]
            assert res.is_error and "place_held" in text and rival_holder() in text, text
            assert (await anyio.to_thread.run_sync(lambda: dut(fleet)))[0] == 6
        finally:
            await r("-p", PLACE, "release")
        res = await client.call_tool("associate", {"stations": 0})  # held again
        assert not res.is_error, res
        assert await held() == ours
    assert await held() is None  # the server stopped: released


def test_serve_on_the_fleet_profile_says_error_and_remedy(fleet: vlab_fleet.FleetInfo,
                                                          tmp_path: Path) -> None:
    res = cli("serve", "--lab", fleet.lab_toml)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    text = " ".join(res.stderr.split())
    assert "error:" in text and "names a fleet" in text, text
    assert "remedy:" in text and "labwarden loop --lab PROFILE" in text, text
    # a lab that cannot be opened as the server starts (its one RemotePlace's coordinator is not
    # there) says so the same way, not through the server's task groups' traceback
    one = re.sub(r"(?m)^(places|place_profiles) = .*\n", "", Path(fleet.lab_toml).read_text())
    one = re.sub(r'(?m)^coordinator = .*$', f'coordinator = "127.0.0.1:{free_port()}"', one)
    (tmp_path / "one.toml").write_text(one)
    res = cli("serve", "--lab", str(tmp_path / "one.toml"))
    text = " ".join(res.stderr.split())
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "error: cannot reach the labgrid coordinator" in text and "remedy:" in text, text
