"""`labwarden lab health` and `lab clear-bad` on a fleet's profile: every place's health listed,
a bad place cleared to unknown with who cleared it, bad input refused naming the option and the
remedy. Real profile files, real health and board-state files; no lab is needed (the places are
the profile's `places`, or a dead coordinator's address for `place_match`)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.placehealth import HealthStore
from labwarden.lab.boardstate import BoardState
from labwarden.runtime.fleet import place_dir

FLEET = """[lab]
name = "fleet"
data_dir = "data"

[dut]
backend = "labgrid"

[dut.labgrid]
env = "env.yaml"
coordinator = "127.0.0.1:1"
{select}

[build]
repo = "src"
builds = "builds"
command = ["make"]
artifacts = {{ stad = "usr/sbin/stad" }}

[target]
process = "stad"
"""


def _fleet(tmp_path: Path, select: str = 'places = ["vlab-0", "vlab-1"]') -> Path:
    (tmp_path / "env.yaml").write_text("targets: {main: {resources: {RemotePlace: {name: vlab-0}}}}\n")
    lab = tmp_path / "fleet.toml"
    lab.write_text(FLEET.format(select=select))
    return lab


def _single(tmp_path: Path) -> Path:
    lab = tmp_path / "one.toml"
    lab.write_text(FLEET.format(select="").replace('backend = "labgrid"', 'backend = "ssh"')
                   .replace('env = "env.yaml"\ncoordinator = "127.0.0.1:1"\n', "")
                   .replace("[dut.labgrid]", '[dut.ssh]\nhost = "127.0.0.1"\nkey = "/dev/null"\n'
                            'known_hosts = "/dev/null"'))
    return lab


runner = CliRunner()


def test_health_lists_every_place_and_clear_bad_moves_one_to_unknown(tmp_path: Path) -> None:
    lab = _fleet(tmp_path)
    data = tmp_path / "data"
    store = HealthStore(data)
    store.mark("vlab-1", "bad", "the DUT does not answer: 127.0.0.1:4100 refused the connection")
    board = BoardState(board_health="bad", health_reason="health check failed at fingerprint_verify",
                       verified_build="b-1")
    board.save(place_dir(data, "vlab-1"))

    res = runner.invoke(app, ["lab", "health", "--lab", str(lab)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert any(ln.startswith("vlab-0: unknown (no record yet") for ln in lines), res.stdout
    bad = next(ln for ln in lines if ln.startswith("vlab-1: bad since "))
    assert "refused the connection" in bad
    assert "board: bad (health check failed at fingerprint_verify)" in res.stdout

    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", "vlab-1",
                              "--reason", "restarted its dutd"])
    assert res.exit_code == 0, res.output
    state = HealthStore(data).get("vlab-1")
    assert state.state == "unknown" and state.cleared_by == getpass.getuser()
    assert state.reason is not None and "restarted its dutd" in state.reason
    assert "was bad: the DUT does not answer" in state.reason and "prove itself" in state.reason
    # the guard's board state for that place: unknown too, so a health check runs first
    assert BoardState.load(place_dir(data, "vlab-1")).board_health == "unknown"
    assert HealthStore(data).bad() == set()
    # a place that proves itself becomes good again; clearing it twice says there is nothing to do
    assert HealthStore(data).mark("vlab-1", "good", None)
    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", "vlab-1"])
    assert res.exit_code == 1 and "vlab-1 is good, not bad: nothing to clear" in res.stdout
    res = runner.invoke(app, ["lab", "health", "--lab", str(lab)])
    assert "vlab-1: good since" in res.stdout
    assert json.loads((data / "fleet" / "health.json").read_text())["vlab-1"]["cleared_by"] \
        == getpass.getuser()


def test_clear_bad_on_a_fleet_refuses_bad_input_naming_the_option(tmp_path: Path) -> None:
    lab = _fleet(tmp_path)
    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab)])
    assert res.exit_code == 2
    assert "is a fleet's profile: --place is required" in res.stderr
    assert "labwarden lab health --lab" in res.stderr

    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", "vlab-7"])
    assert res.exit_code == 2
    assert "--place vlab-7: the fleet has no such place (places: vlab-0, vlab-1)" in res.stderr
    assert "remedy:" in res.stderr

    for evil in ("../vlab-0", "a/b", ".."):
        res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", evil])
        assert res.exit_code == 2 and "--place: place name" in res.stderr, res.stderr
    assert not (tmp_path / "data" / "fleet").exists(), "nothing written for refused input"

    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", "vlab-0"])
    assert res.exit_code == 1 and "vlab-0 is unknown (no record), not bad" in res.stdout

    one = _single(tmp_path)
    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(one), "--place", "vlab-0"])
    assert res.exit_code == 2
    assert "--place vlab-0:" in res.stderr and "single board's profile" in res.stderr
    assert "drop --place" in res.stderr


def test_health_with_a_coordinator_that_does_not_answer(tmp_path: Path) -> None:
    """place_match needs the coordinator to list places: when it does not answer, `health` says
    so and shows what the data dir knows; a bad place it knows can still be cleared."""
    lab = _fleet(tmp_path, 'place_match = "vlab-*"')
    HealthStore(tmp_path / "data").mark("vlab-3", "bad", "the DUT does not answer")
    res = runner.invoke(app, ["lab", "health", "--lab", str(lab)])
    assert res.exit_code == 0, res.output
    assert "note:" in res.stdout and "coordinator was not asked" in res.stdout
    assert "vlab-3: bad since" in res.stdout
    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", "vlab-3"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab), "--place", "nope"])
    assert res.exit_code == 2 and "no such place" in res.stderr


def test_single_board_health_is_unchanged(tmp_path: Path) -> None:
    one = _single(tmp_path)
    res = runner.invoke(app, ["lab", "health", "--lab", str(one)])
    assert res.exit_code == 0 and res.stdout.startswith("board: good"), res.output
