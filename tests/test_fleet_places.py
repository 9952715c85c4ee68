"""A fleet's places on a real labgrid coordinator and exporter (labwarden.lab.hub on loopback):
selecting them, leasing them through reservations, and a rival client that never shares one."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from labwarden.lab import hub
from labwarden.lab.config import LabProfile
from labwarden.lab.fleet import Fleet, NoPlace
from labwarden.lab.labgrid import LabgridConfig, LabgridError, in_session
from labwarden.runtime.fleet import place_profile

from .fleet_fixtures import coordinator_state

pytestmark = pytest.mark.anyio

PLACES = ["vlab-0", "vlab-1", "vlab-2"]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _no_lg_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LG_COORDINATOR", "LG_USERNAME", "LG_HOSTNAME", "LG_ENV"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[hub.HubInfo]:
    """Three fleet places (tag fleet=t, NetworkService ports 2200+i) and one place outside it."""
    dir = tmp_path_factory.mktemp("hub") / "labgrid"
    places = [hub.HubPlace(name=name, port=2200 + i, tags={"fleet": "t"}) for i, name in enumerate(PLACES)]
    places.append(hub.HubPlace(name="other", port=2299))
    info = hub.up(dir, places)
    try:
        yield info
    finally:
        hub.down(dir)
        assert not hub.leftovers(dir) and not dir.exists()


def _cfg(tmp_path: Path, lab: hub.HubInfo, **fleet: Any) -> LabgridConfig:
    env = tmp_path / "env.yaml"
    env.write_text("targets:\n  main:\n    resources:\n      RemotePlace: {name: vlab-0}\n"
                   "    drivers:\n      SSHDriver: {keyfile: id}\n")
    return LabgridConfig(env=str(env), coordinator=lab.coordinator, host_key="ssh-ed25519 AAAA", **fleet)


def test_selectors(tmp_path: Path, lab: hub.HubInfo) -> None:
    async def places(**fleet: Any) -> list[str]:
        return await Fleet(_cfg(tmp_path, lab, **fleet)).places()

    assert asyncio.run(places(place_match="vlab-*")) == PLACES
    assert asyncio.run(places(place_tags={"fleet": "t"})) == PLACES
    assert asyncio.run(places(places=["vlab-2", "vlab-0"])) == ["vlab-0", "vlab-2"]
    assert asyncio.run(places()) == ["vlab-0"]  # no fleet: the env's RemotePlace
    assert not Fleet(_cfg(tmp_path, lab)).is_fleet() and Fleet(_cfg(tmp_path, lab, places=["a"])).is_fleet()


def test_selector_errors_name_the_field(tmp_path: Path, lab: hub.HubInfo) -> None:
    with pytest.raises(ValidationError, match="places and place_match"):
        _cfg(tmp_path, lab, places=["vlab-0"], place_match="vlab-*")
    with pytest.raises(ValidationError, match="places is empty"):
        _cfg(tmp_path, lab, places=[])
    with pytest.raises(NoPlace, match=r"place_match 'dut-\*' matches none .*vlab-0") as exc:
        asyncio.run(Fleet(_cfg(tmp_path, lab, place_match="dut-*")).places())
    assert "fix place_match" in exc.value.remedy
    with pytest.raises(NoPlace, match="places names nope, which the coordinator"):
        asyncio.run(Fleet(_cfg(tmp_path, lab, places=["vlab-0", "nope"])).lease())
    with pytest.raises(NoPlace, match="every place of the fleet is excluded"):
        asyncio.run(Fleet(_cfg(tmp_path, lab, places=["vlab-0"])).lease(exclude=["vlab-0"]))
    dead = _cfg(tmp_path, lab, place_match="vlab-*").model_copy(update={"coordinator": "127.0.0.1:1"})
    with pytest.raises(LabgridError, match=r"cannot reach the labgrid coordinator at 127\.0\.0\.1:1") as err:
        asyncio.run(Fleet(dead).lease())
    assert "coordinator:" in err.value.remedy


def test_lease_prefer_exclude_endpoint_release(tmp_path: Path, lab: hub.HubInfo) -> None:
    cfg = _cfg(tmp_path, lab, place_match="vlab-*")

    async def run() -> None:
        fleet = Fleet(cfg, user="loop-a", host="h")
        a = await fleet.lease(prefer="vlab-1")
        b = await fleet.lease(exclude=["vlab-0"])
        try:
            assert (a.place, b.place) == ("vlab-1", "vlab-2")
            assert a.endpoint().port == 2201 and b.endpoint().port == 2202  # each lease's own place
            holders, reservations = coordinator_state(lab.coordinator)
            assert holders["vlab-1"] == holders["vlab-2"] == "h/loop-a" and holders["vlab-0"] is None
            # one reservation per held place, in state acquired; the waiting ones were cancelled
            assert sorted(r.state for r in reservations) == [2, 2]
            assert {r.token for r in reservations} == {a.reservation, b.reservation}
            with pytest.raises(NoPlace, match=r"no place of the fleet became free in 0\.5 s"):
                await fleet.lease(exclude=["vlab-0"], timeout_s=0.5)
        finally:
            await a.release()
            await b.release()
        holders, reservations = coordinator_state(lab.coordinator)
        assert not any(holders.values()) and reservations == []

    asyncio.run(run())


def test_free_places_leave_out_every_holder(tmp_path: Path, lab: hub.HubInfo) -> None:
    """The places the loop may call idle (a turn comes back early for them): a place a rival
    client holds is not free, nor one this client holds; released, both are again."""
    cfg = _cfg(tmp_path, lab, place_match="vlab-*")

    async def run() -> None:
        ours = Fleet(cfg, user="loop-a", host="h")
        assert await ours.free_places() == PLACES
        rival = await Fleet(cfg, user="rival", host="h").lease(prefer="vlab-1")
        mine = await ours.lease(prefer="vlab-0")
        try:
            assert (rival.place, mine.place) == ("vlab-1", "vlab-0")
            assert await ours.free_places() == ["vlab-2"]
        finally:
            await rival.release()
            await mine.release()
        assert await ours.free_places() == PLACES

    asyncio.run(run())


def test_waiting_lease_gets_the_first_freed_place(tmp_path: Path, lab: hub.HubInfo) -> None:
    """All places held: a lease waits (its reservations queued), and gets the place released."""
    cfg = _cfg(tmp_path, lab, place_match="vlab-*")

    async def run() -> None:
        held = [await Fleet(cfg, user="a", host="h").lease() for _ in PLACES]
        # a waiting lease that is cancelled takes its reservations with it
        gone = asyncio.create_task(Fleet(cfg, user="c", host="h").lease())
        await _queued(lab, "h/c")
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert not any(r.owner == "h/c" for r in coordinator_state(lab.coordinator)[1])
        waiter = asyncio.create_task(Fleet(cfg, user="b", host="h").lease(timeout_s=20))
        await asyncio.sleep(1.5)
        assert not waiter.done()
        _, reservations = coordinator_state(lab.coordinator)
        assert sum(r.state == 0 for r in reservations) == len(PLACES)  # b waits on every place
        await held[1].release()
        got = await waiter
        try:
            assert got.place == held[1].place
            _, reservations = coordinator_state(lab.coordinator)
            assert len(reservations) == len(PLACES)  # b's other waiting reservations are gone
        finally:
            for lease in [*held, got]:
                await lease.release()

    asyncio.run(run())


def test_keep_alive_notices_a_kicked_place(tmp_path: Path, lab: hub.HubInfo) -> None:
    cfg = _cfg(tmp_path, lab, places=["vlab-0"])

    async def run() -> None:
        lease = await Fleet(cfg, user="a", host="h").lease(keepalive_s=0.2)
        try:
            subprocess.run([str(BIN / "labgrid-client"), "-x", lab.coordinator, "-p", "vlab-0",
                            "release", "--kick"], check=True, capture_output=True, timeout=30,
                           env={**os.environ, "LG_USERNAME": "admin"})
            for _ in range(50):
                if lease.lost:
                    break
                await asyncio.sleep(0.1)
            assert lease.lost and "vlab-0" in lease.lost
        finally:
            await lease.release()

    asyncio.run(run())


RIVAL = textwrap.dedent("""
    import asyncio, json, sys, time
    from labwarden.lab.fleet import Fleet
    from labwarden.lab.labgrid import LabgridConfig

    async def main(cfg, until, out):
        fleet = Fleet(LabgridConfig.model_validate_json(cfg), user="loop-b", host="rival")
        while time.time() < until:
            lease = await fleet.lease(timeout_s=30)
            t0 = time.time()
            await asyncio.sleep(0.3)
            out.write(json.dumps([lease.place, t0, time.time()]) + "\\n"); out.flush()
            await lease.release()

    with open(sys.argv[3], "w") as out:
        asyncio.run(main(sys.argv[1], float(sys.argv[2]), out))
""")


def test_two_loops_never_share_a_place(tmp_path: Path, lab: hub.HubInfo) -> None:
    """Loop A (here) and loop B (another process, its own Fleet, started first) lease from a fleet
    of two places for a few seconds, holding each lease 0.3 s, while a third client,
    `labgrid-client reserve --wait` plus `acquire`, takes one place by name now and then. No two
    holding intervals on a place overlap, everyone gets places, and the coordinator never shows a
    place held by someone else than the lease that says it holds it."""
    cfg = _cfg(tmp_path, lab, places=["vlab-0", "vlab-1"])
    until = time.time() + 7
    log_b = tmp_path / "b.jsonl"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    rival = subprocess.Popen([sys.executable, "-c", RIVAL, cfg.model_dump_json(), str(until), str(log_b)],
                             env=env, stderr=subprocess.PIPE, text=True)
    intervals: list[tuple[str, str, float, float]] = []

    def client(*args: str) -> str:
        return subprocess.run([str(BIN / "labgrid-client"), "-x", lab.coordinator, *args], check=True,
                              capture_output=True, text=True, timeout=60,
                              env={**env, "LG_USERNAME": "loop-c"}).stdout

    async def loop_a() -> None:
        fleet = Fleet(cfg, user="loop-a", host="h")
        while time.time() < until:
            lease = await fleet.lease(timeout_s=30)
            t0 = time.time()
            holders, _ = coordinator_state(lab.coordinator)
            assert holders[lease.place or ""] == "h/loop-a"
            await asyncio.sleep(0.3)
            intervals.append(("a", lease.place or "", t0, time.time()))
            await lease.release()

    async def loop_c() -> None:
        # labgrid's own client, queued by the coordinator like the fleets: reserve, wait, acquire
        while time.time() < until - 1:
            out = await asyncio.to_thread(client, "reserve", "--wait", "--shell", "name=vlab-1")
            token = out.split("LG_TOKEN=")[1].split()[0]
            await asyncio.to_thread(client, "-p", f"+{token}", "acquire")
            t0 = time.time()
            await asyncio.sleep(0.3)
            intervals.append(("c", "vlab-1", t0, time.time()))
            await asyncio.to_thread(client, "-p", "vlab-1", "release")
            await asyncio.to_thread(client, "cancel-reservation", token)

    async def run() -> None:
        await asyncio.gather(loop_a(), loop_c())

    try:
        for _ in range(300):  # B (a Python process importing labgrid) is leasing: A and C join it
            if rival.poll() is not None or (log_b.exists() and log_b.read_text()):
                break
            time.sleep(0.05)
        asyncio.run(run())
        _, err = rival.communicate(timeout=60)
        assert rival.returncode == 0, err
    finally:
        rival.kill()
    intervals += [("b", p, t0, t1) for p, t0, t1 in map(json.loads, log_b.read_text().splitlines())]
    who = {w for w, *_ in intervals}
    assert who == {"a", "b", "c"}, intervals
    for place in ("vlab-0", "vlab-1"):
        spans = sorted((t0, t1, w) for w, p, t0, t1 in intervals if p == place)
        for (_, end, w1), (start, _, w2) in itertools.pairwise(spans):
            assert end <= start, f"{place} held by {w1} and {w2} at once"
    holders, reservations = coordinator_state(lab.coordinator)
    assert not any(holders.values()) and reservations == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real `labwarden` CLI of this checkout (not the venv's entry point: it is another tree's)."""
    return subprocess.run([sys.executable, "-m", "labwarden.cli.app", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})


async def _in_dut(lease: Any) -> list[str]:
    """$VLAB_ROOT, the CPUs an SSH session's shell may run on and its nice, on the lease's DUT."""
    import asyncssh

    ep = lease.endpoint()
    known = asyncssh.import_known_hosts(f"[{ep.host}]:{ep.port} {ep.host_key}\n")
    async with asyncssh.connect(ep.host, ep.port, username=ep.user, client_keys=[ep.key],
                                known_hosts=known) as conn:
        res = await conn.run("echo $VLAB_ROOT; grep Cpus_allowed_list /proc/self/status; "
                             "cut -d' ' -f19 /proc/self/stat", check=True)
    return str(res.stdout).split()


@pytest.mark.vlab
def test_vlab_up_places_2_then_down(tmp_path: Path) -> None:
    """`vlab up --places 2`: two pinned vlabs as places of a real coordinator, the fleet profile
    leases each (SSH into each DUT through its place); `down` leaves no process, place or cpuset."""
    import tomllib

    from labwarden.lab.host import cpupin
    from labwarden.lab.host.pidfile import alive
    from labwarden.vlab import procs

    too_many = len(cpupin.host_cpus()) + 1
    res = _cli("vlab", "up", "--places", str(too_many), "--dir", str(tmp_path / "big"))
    assert res.returncode == 1 and f"--places {too_many}: this host has" in res.stderr
    assert f"--places {too_many - 1} or fewer" in " ".join(res.stderr.split())
    assert not (tmp_path / "big" / "fleet.json").exists()

    dir = tmp_path / "fleet"
    res = _cli("vlab", "up", "--places", "2", "--dir", str(dir))
    record = json.loads((dir / "fleet.json").read_text()) if (dir / "fleet.json").exists() else None
    try:
        assert res.returncode == 0, res.stderr
        assert record is not None and sorted(record["places"]) == ["vlab-0", "vlab-1"]
        profile = tomllib.loads((dir / "lab.toml").read_text())
        section = profile["dut"]["labgrid"]
        assert profile["dut"]["backend"] == "labgrid" and section["places"] == ["vlab-0", "vlab-1"]
        cfg = LabgridConfig(**section)

        async def lease_both() -> dict[str, list[str]]:
            fleet = Fleet(cfg, user="e2e", host="h")
            assert await fleet.places() == ["vlab-0", "vlab-1"]
            a, b = await fleet.lease(), await fleet.lease()
            try:
                return {a.place or "": await _in_dut(a), b.place or "": await _in_dut(b)}
            finally:
                await a.release()
                await b.release()

        seen = asyncio.run(lease_both())
        cpus = cpupin.host_cpus()
        assert seen == {f"vlab-{i}": [record["places"][f"vlab-{i}"], "Cpus_allowed_list:", str(cpus[i]),
                                      str(cpupin.DUT_NICE)]  # the shell's nice: the DUT's
                        for i in range(2)}
        # each place's calls run with the fleet's rule and the place's own DUT side, the
        # functional parity check too (it names the place's socket: on another's, A and B
        # would both be judged by a DUT running neither)
        text = (dir / "lab.toml").read_text()
        (dir / "lab-rule.toml").write_text(text.replace("window_s = 4.0", "window_s = 2.5", 1))
        home = LabProfile.from_file(dir / "lab-rule.toml")
        for p in ("vlab-0", "vlab-1"):
            mine = place_profile(home, p)
            sock = str(Path(record["places"][p]) / "run" / "sta" / "stad.sock")
            assert mine.decision.parity_check[-1] == sock and sock in mine.readers.clients
            assert mine.decision.window_s == 2.5 and mine.data_dir() == home.data_dir()
        pins = [cpupin.load(Path(record["places"][p]) / "run" / "cpu.pin") for p in ("vlab-0", "vlab-1")]
        assert all(pin is not None and pin.tasks() for pin in pins)  # the DUTs run in their cpusets
        hub_pids = json.loads((dir / "labgrid" / "hub.json").read_text())["pids"]
        assert all(alive(pid) for pid in hub_pids.values())
        # a session is on one place: `call` on the fleet's profile says so (it would otherwise
        # run on the env's template place with the fleet's DUT side)
        refused = _cli("call", "lab_status", "--lab", str(dir / "lab.toml"))
        assert refused.returncode != 0 and "names a fleet" in " ".join(refused.stderr.split())
        assert "labwarden loop --lab PROFILE" in " ".join(refused.stderr.split()), refused.stderr
        status = json.loads(_cli("vlab", "status", "--json", "--dir", str(dir)).stdout)
        assert status["up"] and status["coordinator"] == record["coordinator"]
        assert sorted(status["places"]) == ["vlab-0", "vlab-1"]
    finally:
        down = _cli("vlab", "down", "--dir", str(dir))
    assert down.returncode == 0, down.stderr
    assert _cli("vlab", "status", "--dir", str(dir)).returncode == 1  # nothing up there
    assert not any(alive(pid) for pid in hub_pids.values())
    assert not (dir / "labgrid").exists() and not (dir / "fleet.json").exists()  # places.yaml went too
    assert not hub.port_open(int(record["coordinator"].rsplit(":", 1)[1]))
    for place_dir in record["places"].values():
        assert procs.processes_under(Path(place_dir)) == []
    assert all(pin is not None and (pin.cgroup is None or not pin.cgroup.exists()) for pin in pins)



async def _queued(lab: hub.HubInfo, owner: str) -> None:
    """Until a reservation of `owner` (or of an owner ending so) waits on the coordinator."""
    for _ in range(300):
        if any(r.owner.endswith(owner) and r.state == 0 for r in coordinator_state(lab.coordinator)[1]):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no waiting reservation of {owner}")


def test_waiting_clients_queue_fairly(tmp_path: Path, lab: hub.HubInfo) -> None:
    """With every place held, `labgrid-client reserve --wait name=vlab-0` queues first and a
    fleet lease second: the freed vlab-0 goes to labgrid-client (the lease does not jump the
    queue), the next freed place to the lease; a higher-priority lease is served first."""
    cfg = _cfg(tmp_path, lab, place_match="vlab-*")
    env = {**os.environ, "LG_USERNAME": "queued"}

    def client(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([str(BIN / "labgrid-client"), "-x", lab.coordinator, *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def run() -> None:
        leases = [await Fleet(cfg, user="a", host="h").lease() for _ in PLACES]
        held = {lease.place: lease for lease in leases}
        first = client("reserve", "--wait", "--shell", "name=vlab-0")
        await _queued(lab, "/queued")  # before the lease below (labgrid-client takes ~0.5 s to start)
        second = asyncio.create_task(Fleet(cfg, user="b", host="h").lease(timeout_s=20))
        await _queued(lab, "h/b")
        await held["vlab-0"].release()
        out, err = await asyncio.to_thread(first.communicate, timeout=20)
        assert first.returncode == 0, err
        token = out.split("LG_TOKEN=")[1].split()[0]
        await asyncio.sleep(1.0)  # the lease polls every 0.5 s
        assert not second.done()  # vlab-0 is the queued client's, not the lease's
        await held["vlab-2"].release()
        got = await second
        assert got.place == "vlab-2"
        # priorities: with vlab-2 held by b, a low and then a high lease wait; vlab-1 goes to high
        low = asyncio.create_task(Fleet(cfg, user="low", host="h").lease(timeout_s=20))
        await _queued(lab, "h/low")
        high = asyncio.create_task(Fleet(cfg, user="high", host="h").lease(timeout_s=20, prio=1.0))
        await _queued(lab, "h/high")
        await held["vlab-1"].release()
        top = await high
        assert top.place == "vlab-1" and not low.done()
        await got.release()
        bottom = await low
        assert bottom.place == "vlab-2"
        for lease in (top, bottom):
            await lease.release()
        await asyncio.to_thread(subprocess.run, [str(BIN / "labgrid-client"), "-x", lab.coordinator,
                                                 "cancel-reservation", token], env=env, check=True,
                                capture_output=True, timeout=30)

    asyncio.run(run())
    holders, reservations = coordinator_state(lab.coordinator)
    assert not any(holders.values()) and reservations == []


def test_a_reproduction_waits_ahead_of_new_experiments(tmp_path: Path, lab: hub.HubInfo) -> None:
    """A place session asked for with a priority (an experiment's reproduction: REPRODUCE_PRIO)
    files its reservations with it on the coordinator, so a freed place goes to it before the
    experiments queued earlier at priority 0 (the ordering itself: test_waiting_clients_queue_fairly).
    Cancelled while it waits, it leaves no reservation behind."""
    from types import SimpleNamespace

    from labwarden.runtime.fleet import PlacePool
    from labwarden.tools.experiment import REPRODUCE_PRIO

    cfg = _cfg(tmp_path, lab, place_match="vlab-*")

    async def run() -> list[tuple[str, float]]:
        held = [await Fleet(cfg, user="a", host="h").lease() for _ in PLACES]
        home = SimpleNamespace(data_dir=tmp_path)  # the pool reads only the home's health file here
        pool = PlacePool(home, Fleet(cfg, user="loop", host="h"))  # type: ignore[arg-type]

        async def reproduce() -> None:
            async with pool.session(prio=REPRODUCE_PRIO):
                raise AssertionError("every place is held: the session must wait")

        waiting = asyncio.create_task(reproduce())
        await _queued(lab, "h/loop")
        seen = [(r.owner, r.prio) for r in coordinator_state(lab.coordinator)[1] if r.state == 0]
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        for lease in held:
            await lease.release()
        return seen

    seen = asyncio.run(run())
    assert REPRODUCE_PRIO > 0 and seen and all(prio == REPRODUCE_PRIO for _, prio in seen), seen
    assert all(owner.endswith("h/loop") for owner, _ in seen), seen
    holders, reservations = coordinator_state(lab.coordinator)
    assert not any(holders.values()) and reservations == []


def test_cpu_pins_by_cpuset_and_by_affinity() -> None:
    """A pin holds a process and what it forks to its CPU: by the cpuset where the host has a
    writable cpuset v1 (removed again, refused while a process is in it), else by affinity."""
    from labwarden.lab.host import cpupin

    cpu = cpupin.host_cpus()[-1]
    for pin in (cpupin.pin_for("test-" + str(os.getpid()), cpu), cpupin.Pin(cpu, None)):
        proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], preexec_fn=pin.preexec())
        children: list[int] = []
        try:
            for _ in range(100):
                listed = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text()
                children = [int(p) for p in listed.split()]
                if children:
                    break
                time.sleep(0.02)
            assert children
            for pid in [proc.pid, *children]:
                status = Path(f"/proc/{pid}/status").read_text()
                assert f"Cpus_allowed_list:\t{cpu}\n" in status, (pin, pid)
            if pin.cgroup is not None:
                assert proc.pid in pin.tasks() and len(pin.tasks()) == 2
                with pytest.raises(cpupin.PinError, match="still run in"):
                    cpupin.unpin(pin)
        finally:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
            for _ in range(100):  # the killed sleep leaves the cpuset once init reaps it
                if not pin.tasks():
                    break
                time.sleep(0.02)
        cpupin.unpin(pin)
        assert pin.cgroup is None or not pin.cgroup.exists()


def test_a_place_without_its_resource_is_skipped(tmp_path: Path, lab: hub.HubInfo) -> None:
    """A place whose match finds no exported resource (its exporter gone) is given back: the lease
    takes another place; with no other place it fails naming the place and why."""
    def coordinator(*requests: Any) -> None:
        """Place requests in-process (`labgrid-client -p broken create` etc. take ~1 s each)."""
        def send(session: Any) -> None:
            for request in requests:
                method = type(request).__name__.removesuffix("Request")
                session.loop.run_until_complete(getattr(session.stub, method)(request))
        with ThreadPoolExecutor(1) as pool:
            pool.submit(in_session, lab.coordinator, "admin", "h", send).result()

    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    coordinator(pb2.AddPlaceRequest(name="broken"), pb2.AddPlaceMatchRequest(
        placename="broken", pattern="gone-exporter/broken/NetworkService"))
    try:
        async def run() -> None:
            fleet = Fleet(_cfg(tmp_path, lab, places=["broken", "vlab-1"]), user="a", host="h")
            lease = await fleet.lease(prefer="broken", timeout_s=10)
            try:
                assert lease.place == "vlab-1"
            finally:
                await lease.release()
            with pytest.raises(NoPlace, match=r"broken: place broken: ") as exc:
                await Fleet(_cfg(tmp_path, lab, places=["broken"]), user="a", host="h").lease(timeout_s=10)
            assert "show" in exc.value.remedy

        asyncio.run(run())
        holders, reservations = coordinator_state(lab.coordinator)
        assert not any(holders.values()) and reservations == []
    finally:
        coordinator(pb2.DeletePlaceRequest(name="broken"))
