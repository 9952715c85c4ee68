"""The profile checks itself: the published JSON Schema is the model's, `labwarden lab check`
names every problem of five broken profiles with a remedy that works (applied, the row turns
ok), and a good profile passes every row.

Real parts: the suite's stock-SSH DUT (tests/stockdut.py: Debian's dropbear in a mount
namespace, busybox ash as the DUT's shell, the logfilt daemon of its own), a real confined
build and a real sysupgrade flash before the checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # mcp's dependency, no stubs
import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile
from labwarden.lab.schema import REPO_PATH, profile_schema, schema_text
from labwarden.runtime import labcheck as checks
from labwarden.runtime import labinit
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import stockssh
from tests import stockdut
from tests.conftest import needs_uprobes

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


def test_committed_schema_is_the_models() -> None:
    committed = (ROOT / REPO_PATH).read_text()
    assert committed == schema_text(), (
        f"{REPO_PATH} differs from the model: run `labwarden lab schema --out {REPO_PATH}`")


def test_schema_accepts_the_example_and_names_a_typo() -> None:
    data = tomllib.loads((ROOT / "examples" / "lab.toml").read_text())
    jsonschema.validate(data, profile_schema())
    data["gates"]["unknown_frames_pct_mx"] = 1.0
    with pytest.raises(jsonschema.ValidationError, match="unknown_frames_pct_mx"):
        jsonschema.validate(data, profile_schema())


def test_schema_command_writes_the_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["lab", "schema", "--out", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s.json").read_text() == schema_text()


def test_an_invalid_profile_names_each_key(tmp_path: Path) -> None:
    lab = tmp_path / "lab.toml"
    lab.write_text('[lab]\nname = "x"\nkind = "bench"\n[dut]\nbackend = "ssh"\n')
    report = CliRunner().invoke(app, ["lab", "check", str(lab), "--json"])
    assert report.exit_code == 1
    got = json.loads(report.output)
    keys = [r["detail"].split(":")[0] for r in got["rows"]]
    assert {"lab.kind", "build", "target"} <= set(keys), keys
    assert all(r["status"] == "problem" and r["remedy"] for r in got["rows"])


def test_init_reads_an_address_and_guesses_a_build(tmp_path: Path) -> None:
    assert labinit.parse_address("admin@10.0.0.1:2222") == ("admin", "10.0.0.1", 2222)
    assert labinit.parse_address("192.168.1.1") == ("root", "192.168.1.1", 22)
    assert labinit.parse_address("root@[fe80::1]:22") == ("root", "fe80::1", 22)
    with pytest.raises(LabError):
        labinit.parse_address("root@host:99999")
    argv, why = labinit.guess_build(tmp_path)
    assert argv == ["make", "O={out}"] and "no Makefile" in why
    (tmp_path / "Makefile").write_text("all:\n\tcc -o fwd fwd.c\ninstall:\n\tcp fwd $(DESTDIR)/\n")
    argv, why = labinit.guess_build(tmp_path)
    assert argv == ["make", "DESTDIR={out}", "install"] and "a guess" in why


@pytest.fixture(scope="module")
def dut(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[stockssh.StockSsh, Path]]:
    """The logfilt DUT, flashed with its first image (its rootfs starts empty)."""
    yield from stockdut.logfilt_dut(tmp_path_factory.mktemp("check"))


@pytest.fixture(scope="module")
async def flashed(dut: tuple[stockssh.StockSsh, Path]) -> tuple[stockssh.StockSsh, Path]:
    needs_uprobes()
    async with open_lab(LabProfile.from_file(dut[1])) as ctx:
        built = await call_tool(ctx, "build", {})
        assert built.ok and built.result, built.error
        flashed = await call_tool(ctx, "flash", {"build_id": built.result["build_id"]})
        assert flashed.ok, flashed.error
    return dut


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _variant(lab: Path, name: str, edit: Any) -> Path:
    """A copy of the good profile with `edit(text) -> text` applied."""
    path = lab.parent / f"{name}.toml"
    path.write_text(edit(lab.read_text()))
    return path


def _row(report: checks.CheckReport, name: str) -> checks.CheckRow:
    return next(r for r in report.rows if r.check == name)


def _only_problem(report: checks.CheckReport, name: str) -> checks.CheckRow:
    assert not report.ok
    assert [r.check for r in report.problems()] == [name], report.rows
    return _row(report, name)


async def test_a_good_profile_passes_every_row(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    report = await checks.check(flashed[1], fresh=True)  # the build command runs (not cached)
    assert report.ok, [r for r in report.rows if r.status != "ok"]
    status = {r.check: r.status for r in report.rows}
    assert status == {"schema": "ok", "ssh": "ok", "shell": "ok", "perf": "ok", "uprobes": "ok",
                      "target": "ok", "version": "skipped", "flash": "ok", "build": "ok",
                      "artifacts": "ok"}, report.rows
    assert "busybox" in _row(report, "shell").detail
    assert "cached" not in _row(report, "build").detail
    builds = Path(LabProfile.from_file(flashed[1]).build.builds)
    assert not list(builds.glob(".check-*"))  # the scratch build is removed


def test_the_cli_table_and_exit_code(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    res = CliRunner().invoke(app, ["lab", "check", str(flashed[1]), "--skip-build"])
    assert res.exit_code == 0, res.output
    assert "every check passed" in res.output and "perf" in res.output


async def test_wrong_ssh_port(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    server, lab = flashed
    port = server.endpoint().port
    wrong = _variant(lab, "port", lambda t: t.replace(f"port = {port}\n", "port = 1\n"))
    report = await checks.check(wrong, build=False)
    row = _only_problem(report, "ssh")
    assert "refused" in row.detail and row.remedy and "[dut.ssh] port" in row.remedy
    assert {r.status for r in report.rows if r.check != "ssh" and r.check != "schema"} == {"skipped"}
    fixed = _variant(lab, "port", lambda t: t)  # the remedy: the port the server listens on
    assert (await checks.check(fixed, build=False)).ok


async def test_wrong_host_key(flashed: tuple[stockssh.StockSsh, Path], tmp_path: Path) -> None:
    import asyncssh

    server, lab = flashed
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    pinned = server.endpoint().host_key
    assert pinned
    wrong = _variant(lab, "hostkey", lambda t: t.replace(pinned, other))
    row = _only_problem(await checks.check(wrong, build=False), "ssh")
    assert "not the pinned one" in row.detail and row.remedy
    m = re.search(r'host_key = "([^"]+)"', row.remedy)
    assert m, row.remedy  # the remedy names the key the DUT presents
    assert m.group(1).split()[:2] == pinned.split()[:2]
    fixed = _variant(lab, "hostkey", lambda t: t.replace(other, m.group(1)))
    assert (await checks.check(fixed, build=False)).ok


async def test_perf_missing_on_the_dut(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    """A DUT whose PATH holds busybox's applets and no perf."""
    server, lab = flashed
    bb, nobb = server.root / "bb", server.root / "bb-noperf"
    if not nobb.exists():
        nobb.mkdir()
        for applet in bb.iterdir():
            if applet.name != "perf":
                (nobb / applet.name).symlink_to(os.readlink(applet))
    wrong = _variant(lab, "noperf", lambda t: t.replace(f"{bb}\"", f"{nobb}\""))
    assert str(nobb) in wrong.read_text()
    row = _only_problem(await checks.check(wrong, build=False), "perf")
    assert row.remedy and "[target] perf" in row.remedy
    perf = shutil.which("perf")
    assert perf
    fixed = _variant(lab, "noperf", lambda t: t.replace(f"{bb}\"", f"{nobb}\"").replace(
        "[target]\n", f"[target]\nperf = {json.dumps(perf)}\n"))  # the remedy: its full path
    assert (await checks.check(fixed, build=False)).ok


async def test_wrong_artifact_key(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    _, lab = flashed
    wrong = _variant(lab, "artifact", lambda t: t.replace("{ logfilt = ", "{ fwd = "))
    report = await checks.check(wrong)
    row = _only_problem(report, "artifacts")
    assert _row(report, "build").status == "ok"
    text = "\n".join([row.detail, *row.lines])
    assert "{out}/fwd" in text and "{out} holds at its top: logfilt, logspam" in text, text
    assert row.remedy and "[build] artifacts" in row.remedy
    fixed = _variant(lab, "artifact", lambda t: t)  # the key named after a file at {out}'s top
    assert (await checks.check(fixed)).ok


async def test_a_build_that_fails(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    _, lab = flashed
    broken = '"CC=cc -include /nonexistent/fw-config.h"'
    wrong = _variant(lab, "build", lambda t: t.replace('"GIT_HASH={git_hash}"]',
                                                         f'"GIT_HASH={{git_hash}}", {broken}]'))
    report = await checks.check(wrong)
    row = _only_problem(report, "build")
    assert any("fw-config.h" in ln for ln in row.lines), row.lines  # the build's last lines
    assert row.remedy and _row(report, "artifacts").status == "skipped"
    fixed = _variant(lab, "build", lambda t: t)  # the remedy: fix what the lines name
    assert (await checks.check(fixed)).ok



def test_init_writes_a_profile_that_checks(flashed: tuple[stockssh.StockSsh, Path],
                                           tmp_path: Path) -> None:
    """`lab init` against the stock DUT: the profile validates, every guess is commented, the
    busy daemon is among the candidates; given the target, its SSH/shell/target rows pass."""
    server, lab = flashed
    ep = server.endpoint()
    repo = LabProfile.from_file(lab).build.repo
    guessed = tmp_path / "guessed.toml"
    runner = CliRunner()
    res = runner.invoke(app, ["lab", "init", "--ssh", f"root@127.0.0.1:{ep.port}", "--repo", repo,
                              "--key", ep.key, "--out", str(guessed), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["target"] == "logfilt", got  # the busiest process the repo's Makefile names
    text = guessed.read_text()
    prof = LabProfile.from_file(guessed)  # it validates
    assert prof.dut.ssh and prof.dut.ssh.host_key and prof.dut.ssh.host_key.split()[:2] == \
        (ep.host_key or "").split()[:2]
    assert prof.build.command[:2] == ["make", "O={out}"] and "GIT_HASH={git_hash}" in prof.build.command
    assert text.count("a guess") >= 3 and "labwarden lab check" in text

    chosen = tmp_path / "lab.toml"
    res = runner.invoke(app, ["lab", "init", "--ssh", f"root@127.0.0.1:{ep.port}", "--repo", repo,
                              "--key", ep.key, "--out", str(chosen), "--target", "logfilt"])
    assert res.exit_code == 0, res.output
    assert "next: labwarden lab check" in res.output
    prof = LabProfile.from_file(chosen)
    assert prof.target.process == "logfilt"
    assert list(prof.build.artifacts) == ["logfilt"]
    assert prof.build.artifacts["logfilt"].endswith("rootfs/usr/sbin/logfilt")
    res = runner.invoke(app, ["lab", "check", str(chosen), "--json", "--skip-build"])
    rows = {r["check"]: r for r in json.loads(res.output)["rows"]}
    for name in ("schema", "ssh", "shell", "target"):
        assert rows[name]["status"] == "ok", rows[name]
    again = runner.invoke(app, ["lab", "init", "--ssh", f"root@127.0.0.1:{ep.port}", "--repo",
                                repo, "--key", ep.key, "--out", str(chosen)])
    assert again.exit_code == 1 and "--force" in again.output  # never overwritten silently


async def test_version_form_when_declared(flashed: tuple[stockssh.StockSsh, Path]) -> None:
    """`[target] prints_git_hash = true`: `--version` is run, and prints the hash it was built
    from."""
    _, lab = flashed
    declared = _variant(lab, "version", lambda t: t.replace(
        "[target]\n", "[target]\nprints_git_hash = true\n"))
    row = _row(await checks.check(declared, build=False), "version")
    assert row.status == "ok" and re.search(r"logfilt [0-9a-f]{40}", row.detail), row
