"""Agent-written code never runs unconfined on the host: every spelling by which a diff gets a
build to run a command or read a file -- a Makefile recipe line, `$(shell)`, an `-include`d new
.mk, a generated script, a C `#include` of a host file and of a committed symlink -- tried through
the MCP door (the SDK's client, in memory) and the CLI door (`labwarden call`, typer's runner),
against a real vlab, real git, make, gcc and bubblewrap. Each probe proves it ran (it prints the
uid it ran as: one of tenancy's build uids, not nobody); none creates a file outside the
sandbox, reads the data dir or the DUT's key,
sees the server's environment (it counts variables named like the planted one) or reaches a
TCP listener on the host's loopback. A build past the session's wall time or `[build]
timeout_s` leaves no process behind (looked up by pid)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.lab.config import LabProfile
from labwarden.lab.host import sandbox
from labwarden.server.app import build_server
from labwarden.vlab.layout import VlabLayout

from .diffing import both, git_diff, prepend, replace, symlink, write

pytestmark = pytest.mark.anyio
runner = CliRunner()
SECRET = "LW-SECRET-7f3a"
ENV_SECRET = "LW-ENV-SECRET-91c2"


@pytest.fixture
def bait(vlab: VlabLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """What a build must not reach: a file in the data dir, the DUT's private key, a variable of
    the server's environment, a listener on the host's loopback; and where it must not write."""
    secret = vlab.data_dir / "secret.h"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(SECRET + "\n")
    monkeypatch.setenv("LW_SERVER_SECRET", ENV_SECRET)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    marker = tmp_path / "written-by-the-build"
    try:
        yield {"secret": str(secret), "key": str(vlab.client_key), "marker": str(marker),
               "port": str(listener.getsockname()[1])}
        with pytest.raises(BlockingIOError):  # nothing connected, from any probe
            listener.accept()
        assert not marker.exists()
    finally:
        listener.close()
        secret.unlink()


def _probe(b: dict[str, str]) -> str:
    """sh that tries everything and prints what it got, each line marked 'error:' so the build's
    failing lines carry it back."""
    return ("{ echo RAN uid=`id -u` vars=`env | grep -c _SECRET`; "
            f"busybox nc -w 1 127.0.0.1 {b['port']} </dev/null && echo NET-OPEN || echo NET-CLOSED; "
            f"touch {b['marker']}; cat {b['secret']} {b['key']}; "
            "} 2>&1 | sed 's/^/error: /'")


def _make_error(b: dict[str, str]) -> str:
    return f"$(error error: $(shell {_probe(b)}))\n"


SPELLINGS: dict[str, Callable[[dict[str, str]], Callable[[Path], None]]] = {
    "recipe": lambda b: replace("Makefile", "all: $(O)/libsta.so $(PROGS:%=$(O)/%)\n",
                                f"all: $(O)/libsta.so $(PROGS:%=$(O)/%)\n\t@{_probe(b)}; exit 1\n"),
    "shell": lambda b: prepend("Makefile", _make_error(b)),
    "include-mk": lambda b: both(write("extra.mk", _make_error(b)),
                                 prepend("Makefile", "-include extra.mk\n")),
    "generated-script": lambda b: both(write("gen.sh", "#!/bin/sh\n" + _probe(b) + "\n", 0o755),
                                       prepend("Makefile", "$(error error: $(shell ./gen.sh))\n")),
    "include-host-file": lambda b: prepend("hal.c", f'#include "{b["secret"]}"\n'),
    "include-symlink": lambda b: both(symlink("leak.h", b["secret"]),
                                      prepend("hal.c", '#include "leak.h"\n')),
}
RUNS = {"recipe", "shell", "include-mk", "generated-script"}
"""The spellings that run a command (the others read a file)."""


async def _mcp(vlab: VlabLayout, args: dict[str, object]) -> str:
    async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
        res = await client.call_tool("patch_submit", args)
    assert res.is_error
    return "\n".join(getattr(c, "text", "") for c in res.content)


def _cli(lab: Path, args: dict[str, object]) -> str:
    """The failure as the CLI prints it: the record's error (its args echo the diff) and stderr."""
    res = runner.invoke(app, ["call", "patch_submit", json.dumps(args), "--lab", str(lab), "--json"])
    assert res.exit_code == 1, res.output
    return json.dumps(json.loads(res.stdout)["error"]) + "\n" + res.stderr


@pytest.mark.parametrize("door", ["mcp", "cli"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
async def test_a_patch_build_runs_confined(vlab: VlabLayout, bait: dict[str, str], door: str,
                                           spelling: str) -> None:
    diff = git_diff(vlab.src, SPELLINGS[spelling](bait))
    args: dict[str, object] = {"name": f"probe-{spelling}", "diff": diff}
    text = await _mcp(vlab, args) if door == "mcp" else \
        await anyio.to_thread.run_sync(_cli, vlab.lab_toml, args)
    assert "compile failed" in text, text
    assert SECRET not in text and ENV_SECRET not in text and "PRIVATE KEY" not in text
    if spelling in RUNS:  # it ran, as a build uid, without the network or the host's files
        assert re.search(r"RAN uid=11\d{5} vars=0", text), text  # tenancy's "build" uids
        assert "NET-CLOSED" in text and "NET-OPEN" not in text, text
        assert "No such file" in text  # the secret, the key and the marker's dir are not there
    else:
        assert "No such file" in text or "No rule to make target 'leak.h'" in text, text
    assert not list((vlab.data_dir / "patches").glob("probe-*.json"))


def _left(marker: str) -> list[int]:
    """Host pids whose command line holds `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmd:
                pids.append(int(entry.name))
    return pids


BUILD_SLEEP_S = 25
"""How long a sleeper build sleeps itself: what a build nobody stopped would take at least."""


def _sleeper(tag: str) -> Callable[[Path], None]:
    """A Makefile that starts a detached sleeper (its own session) and then sleeps itself."""
    return prepend("Makefile", f"X := $(shell (setsid sleep 47.{tag} >/dev/null 2>&1 &); "
                   f"sleep {BUILD_SLEEP_S}.{tag})\n")


@contextmanager
def _the_builds_own_sleep() -> Iterator[Callable[[], bool]]:
    """A host `sleep` as long as the build's own, started just before the build is asked for:
    the yielded function says whether it still sleeps. `assert still()` after the call is an
    order, not a time -- the call returned before the build's sleep, which began later, would
    have ended by itself -- so it fails for a stop that never came (the build slept its 25 s),
    whatever the host's load."""
    beside = subprocess.Popen(["sleep", str(BUILD_SLEEP_S)])
    try:
        yield lambda: beside.poll() is None
    finally:
        beside.kill()
        beside.wait()


async def test_the_sessions_wall_time_kills_the_build_and_its_processes(vlab: VlabLayout) -> None:
    prof = LabProfile.from_file(vlab.lab_toml)
    budgets = prof.policy.budgets.model_copy(update={"wall_time_s": 6})
    prof = prof.model_copy(update={"policy": prof.policy.model_copy(update={"budgets": budgets})})
    diff = git_diff(vlab.src, _sleeper("301"))
    async with Client(build_server(prof)) as client:
        with _the_builds_own_sleep() as still:
            res = await client.call_tool("patch_submit", {"name": "sleeper", "diff": diff})
            stopped_first = still()
    text = "\n".join(getattr(c, "text", "") for c in res.content)
    assert res.is_error and "wall time" in text, text
    assert stopped_first, "the call returned only after the build's own sleep would have ended"
    assert _left(f"sleep {BUILD_SLEEP_S}.301") == [] and _left("sleep 47.301") == []


def test_build_timeout_kills_the_build_and_its_processes(vlab: VlabLayout, tmp_path: Path) -> None:
    lab = tmp_path / "lab.toml"
    lab.write_text(re.sub(r"^\[build\]\n", "[build]\ntimeout_s = 3\n", vlab.lab_toml.read_text(),
                          count=1, flags=re.M))
    diff = git_diff(vlab.src, _sleeper("302"))
    with _the_builds_own_sleep() as still:
        res = runner.invoke(app, ["call", "patch_submit",
                                  json.dumps({"name": "sleeper", "diff": diff}), "--lab", str(lab),
                                  "--json"])
        stopped_first = still()
    assert stopped_first and res.exit_code == 1, res.output  # stopped before its sleep would end
    record = json.loads(res.stdout)
    assert record["error"]["kind"] == "timeout", record
    assert "timeout_s = 3" in " ".join(record["error"]["lines"])
    assert _left(f"sleep {BUILD_SLEEP_S}.302") == [] and _left("sleep 47.302") == []


def test_a_stopped_build_returns_only_once_its_namespace_is_gone(tmp_path: Path) -> None:
    """The kernel kills a pid namespace's other processes as its init exits, after the outer
    bwrap is reaped: before `run` waited for that, 11 of 20 stopped runs like these still had a
    setsid'd sleeper alive when `run` returned (unloaded host)."""
    tree, out = tmp_path / "tree", tmp_path / "out"
    tree.mkdir()
    out.mkdir()
    for run in range(5):
        tag = f"30{run}"
        detached = "; ".join(f"(setsid sleep 47.{tag}{k} >/dev/null 2>&1 &)" for k in range(20))
        stop = threading.Event()
        timer = threading.Timer(0.5, stop.set)
        timer.start()
        with _the_builds_own_sleep() as still:
            res = sandbox.run(["sh", "-c", f"{detached}; sleep {BUILD_SLEEP_S}.{tag}"], tree=tree,
                              out=out, limits=sandbox.Limits(timeout_s=30), log=tmp_path / "log",
                              stop=stop)
            stopped_first = still()
        assert res.stopped and stopped_first, res  # returned before its own sleep would have ended
        assert _left(f"sleep 47.{tag}") == [] and _left(f"sleep {BUILD_SLEEP_S}.{tag}") == [], run


def test_a_build_without_bubblewrap_is_refused_not_run_unconfined(
        vlab: VlabLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap made unfindable (its lookup stubbed: uninstalling it is not a test's to do)."""
    monkeypatch.setattr(sandbox.shutil, "which", lambda _name: None)
    diff = git_diff(vlab.src, replace("hal.c", "return 0;", "return 0; /* ok */"))
    out = _cli(vlab.lab_toml, {"name": "no-bwrap", "diff": diff})
    assert "bubblewrap" in out and "setup-system.sh" in out
