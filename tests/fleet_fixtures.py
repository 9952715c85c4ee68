"""What the vlab-fleet tests share: a real fleet (coordinator, exporter, N pinned vlabs) per
module, no LG_* variables from the caller's shell, and the short [decision] they judge with."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labwarden.lab.labgrid import in_session
from labwarden.runtime.fleet import PlacePool
from labwarden.vlab import control
from labwarden.vlab import fleet as vlab_fleet

from .conftest import needs_uprobes, uprobes_reason

QUICK = {"window_s": "2.0", "densities": "[60, 114]", "sweep_reps": "2", "max_windows": "9",
         "min_effect_pct": "10.0", "offered_load_tolerance_pct": "30.0"}
"""A short [decision] (tests/test_loop_vlab.py's, screening at 114 clients, where bulk-pull saves
~30% -- at 60, ~13% drowned once in a busy box's scatter): 2 s windows, at most 9; the
offered-load gate widened (2 s windows count ~12 RPC calls: one call is 8%, and a busy box moved
bulk-pull's full sweep by 25% once) -- these tests are about places, not that gate."""


@pytest.fixture(autouse=True)
def clean_lg_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's LG_COORDINATOR (or place, env) must not steer the test's own fleet. Autouse in
    every module that imports it."""
    for var in ("LG_COORDINATOR", "LG_USERNAME", "LG_HOSTNAME", "LG_ENV"):
        monkeypatch.delenv(var, raising=False)


def vlab_fleet_fixture(places: int, name: str) -> Callable[..., Iterator[vlab_fleet.FleetInfo]]:
    """A module-scoped fixture: `places` vlabs, each pinned to a CPU, as places vlab-0.. of a
    real coordinator, under a temp dir named `name`; torn down after the module."""

    @pytest.fixture(scope="module")
    def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vlab_fleet.FleetInfo]:
        reason = uprobes_reason() or (None if shutil.which("perf") else "perf is not installed")
        if reason and os.environ.get("CI") == "true":  # scripts/setup-system.sh mounts tracefs
            pytest.fail(f"uprobes unavailable on CI: {reason}")
        needs_uprobes()  # the offered load is counted by a uprobe on the RPC
        root = tmp_path_factory.mktemp(name) / "fleet"
        try:
            yield vlab_fleet.up(root, places)
        finally:
            vlab_fleet.down(root)

    return fleet


def with_decision(lab_toml: Path, rule: dict[str, str], name: str = "lab-quick.toml") -> Path:
    """`lab_toml` with `rule`'s keys set in its [decision] (each must be there), written beside it
    as `name`."""
    text = lab_toml.read_text()
    at = text.index("[decision]")
    head, tail = text[:at], text[at:]
    for key, value in rule.items():
        tail, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", tail, count=1, flags=re.M)
        assert n == 1, key
    path = lab_toml.with_name(name)
    path.write_text(head + tail)
    return path


def quick_profile(info: vlab_fleet.FleetInfo, rule: dict[str, str] = QUICK) -> Path:
    """The fleet's profile with `rule`'s keys set in its [decision] (lab-quick.toml)."""
    return with_decision(Path(info.lab_toml), rule)


async def sweep_a_on(pool: PlacePool, place: str, others: set[str]) -> str:
    """The agent's own full sweep of the base (A) on `place` with the experiment's settings
    (lab_status `workload.sweep`, perf on): the sweep a survivor there reuses. Its id."""
    from labwarden.runtime.runner import call_tool
    from labwarden.tools import experiment as experiment_tool
    from labwarden.tools.lab_status import workload

    async with pool.session(exclude=others) as q:
        assert q.place_name == place
        a = await experiment_tool._build(q.profile, [], "HEAD")
        for name in ("flash", "fingerprint_verify"):
            rec = await call_tool(q, name, {"build_id": a})
            assert rec.ok, rec
        rec = await call_tool(q, "sweep", {**workload(q.profile).sweep.model_dump(),
                                           "perf": True, "label": "base"})
        assert rec.ok and rec.result, rec
        return str(rec.result["sweep_id"])


def coordinator_state(coordinator: str) -> tuple[dict[str, str | None], list[Any]]:
    """(place -> holder, reservations) as the coordinator has them."""
    def read(session: Any) -> tuple[dict[str, str | None], list[Any]]:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        res = session.loop.run_until_complete(session.stub.GetReservations(pb2.GetReservationsRequest()))
        return {n: p.acquired for n, p in session.places.items()}, list(res.reservations)
    with ThreadPoolExecutor(1) as pool:  # labgrid's loop cannot run inside a running one
        return pool.submit(in_session, coordinator, "test", "probe", read).result()


def last_rowid(db: Path) -> int:
    """The transcript's newest event row (0 when it has none yet): what a watcher reads after."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT coalesce(max(rowid), 0) FROM events").fetchone()[0]


def kill_place_when(db: Path, after: int, info: vlab_fleet.FleetInfo,
                    pick: Callable[[dict[str, Any]], str | None], killed: list[str],
                    stop: threading.Event) -> None:
    """Stop the vlab of the first place `pick` names for a tool call logged after transcript row
    `after` (a thread's target: polls every 0.3 s until `stop`), and append it to `killed`."""
    while not stop.is_set():
        rows = []
        if db.exists():  # the loop creates it
            with contextlib.suppress(sqlite3.OperationalError), sqlite3.connect(db) as conn:  # no table yet
                rows = conn.execute("SELECT body FROM events WHERE rowid > ? AND kind = 'tool_called' "
                                    "ORDER BY rowid", [after]).fetchall()
        for (body,) in rows:
            place = pick(json.loads(body))
            if place is not None:
                control.down(info.places[place].root)
                killed.append(place)
                return
        time.sleep(0.3)
