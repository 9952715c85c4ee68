"""The vlab's DUT is a sandbox of its own: a stad.c patch (the file an agent is meant to change)
whose stad forks a spy -- detached, in a session of its own -- is submitted, built and flashed
through the MCP door (the SDK's client, in memory), like the red team's. The spy lists /proc,
signals a host process of the uid every build ran as (65534), stamon and another DUT's stad,
opens stamon's /proc/PID/mem for writing, PTRACE_ATTACHes it, and writes a file through the
victim's /proc/PID/root; it writes what it got into its socket dir. Every attempt must fail, its
/proc must show only its own namespace; after a respawn of stad, and after the baseline is
flashed back, the spy must be gone (looked up by its host pid). The services' uids: the daemon's,
the monitor's and another DUT's all differ, none is a build's. Real vlabs, git, gcc, bubblewrap,
cgroups; nothing faked."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from labwarden.lab.config import LabProfile
from labwarden.lab.host import tenancy
from labwarden.server.app import build_server
from labwarden.vlab import confine, control, fleet, procs
from labwarden.vlab.layout import SERVICES, VlabLayout

from .diffing import both, git_diff, replace
from .tooling import baseline

pytestmark = pytest.mark.anyio
BUILD_UID = 65534
"""The uid every build sandbox and the vlab's services shared before they became tenants."""
SPY_COMM = "lwspy"

SPY = r'''
#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>

/* The spy: reads "name pid [path]" targets from $VLAB_ROOT/etc/spy-targets, tries each door on
 * each, reports one line per attempt ("what target ok|refused errno") into its socket dir. */
static void spy_try(FILE *out, const char *what, const char *name, int rc)
{
	fprintf(out, "%s %s %s %d\n", what, name, rc == 0 ? "ok" : "refused", rc == 0 ? 0 : errno);
}

static void spy(const char *sock)
{
	if (fork() != 0)
		return;
	setsid();
	if (fork() != 0)
		_exit(0); /* detached: its parent is gone */
	prctl(PR_SET_NAME, "lwspy");
	char targets[512], dir[512], tmp[600], done[600], line[512];
	snprintf(targets, sizeof targets, "%s/etc/spy-targets", getenv("VLAB_ROOT"));
	snprintf(dir, sizeof dir, "%s", sock);
	*strrchr(dir, '/') = 0;
	snprintf(tmp, sizeof tmp, "%s/spy.tmp", dir);
	snprintf(done, sizeof done, "%s/spy.out", dir);
	FILE *in = NULL;
	for (int i = 0; i < 1200 && !(in = fopen(targets, "r")); i++)
		usleep(50000);
	FILE *out = fopen(tmp, "w");
	if (!in || !out)
		_exit(1);
	DIR *d = opendir("/proc");
	for (struct dirent *e; d && (e = readdir(d));) {
		char p[300], comm[64] = "";
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(p, sizeof p, "/proc/%s/comm", e->d_name);
		FILE *c = fopen(p, "r");
		if (c && fgets(comm, sizeof comm, c))
			comm[strcspn(comm, "\n")] = 0;
		if (c)
			fclose(c);
		fprintf(out, "proc %s %s\n", e->d_name, comm);
	}
	while (fgets(line, sizeof line, in)) {
		char name[64], path[400] = "", p[600];
		int pid;
		if (sscanf(line, "%63s %d %399s", name, &pid, path) < 2)
			continue;
		spy_try(out, "signal0", name, kill(pid, 0));
		snprintf(p, sizeof p, "/proc/%d/mem", pid);
		int fd = open(p, O_RDWR);
		spy_try(out, "mem", name, fd < 0 ? -1 : 0);
		errno = 0;
		long rc = ptrace(PTRACE_ATTACH, pid, 0, 0);
		spy_try(out, "ptrace", name, rc < 0 ? -1 : 0);
		if (path[0]) {
			snprintf(p, sizeof p, "/proc/%d/root%s", pid, path);
			int w = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			spy_try(out, "root-write", name, w < 0 ? -1 : 0);
			spy_try(out, "kill", name, kill(pid, SIGKILL));
		}
	}
	fclose(out);
	rename(tmp, done);
	for (;;)
		pause();
}

int main(int argc, char **argv)'''


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VlabLayout]:
    """Another tenant: a second vlab's DUT (as a fleet's other place is)."""
    root = tmp_path_factory.mktemp("other")
    try:
        control.up(root)
        yield VlabLayout.at(root)
    finally:
        control.down(root)


@pytest.fixture
def victim() -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A host process of the builds' old uid and a directory of its own to plant a file in."""
    home = Path(tempfile.mkdtemp(prefix="lw-victim-", dir="/tmp"))
    os.chown(home, BUILD_UID, BUILD_UID)
    proc = subprocess.Popen(["setpriv", f"--reuid={BUILD_UID}", f"--regid={BUILD_UID}",
                             "--clear-groups", "sleep", "600"])
    try:
        yield proc, home
    finally:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # a spy tracing it holds its zombie
            proc.wait(timeout=10)
        for f in home.iterdir():
            f.unlink()
        home.rmdir()


def _pid(layout: VlabLayout, name: str) -> int:
    pid = procs.read_pid(layout.run_dir / f"{name}.pid")
    assert pid is not None and procs.alive(pid), name
    return pid


def _uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])


def _by_comm(comm: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                found.append(int(entry))
        except OSError:
            continue
    return found


def _until(pred: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _wait_for(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the spy wrote no {path}"
        time.sleep(0.1)
    return path.read_text()


async def _tool(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    res = await client.call_tool(name, args)
    assert not res.is_error, res.content
    return json.loads(res.content[0].text)  # type: ignore[union-attr,no-any-return]


async def test_a_spy_in_stad_reaches_no_other_tenant_and_dies_with_its_firmware(
        lab: VlabLayout, other: VlabLayout,
        victim: tuple[subprocess.Popen[bytes], Path]) -> None:
    sleeper, home = victim
    diff = git_diff(lab.src, both(
        replace("stad.c", "int main(int argc, char **argv)", SPY),
        replace("stad.c", "\tsignal(SIGPIPE, SIG_IGN);\n", "\tsignal(SIGPIPE, SIG_IGN);\n\tspy(sock);\n")))
    spy_out = lab.socket.parent / "spy.out"
    async with Client(build_server(LabProfile.from_file(lab.lab_toml))) as client:
        sub = await _tool(client, "patch_submit", {"name": "spy", "diff": diff})
        await _tool(client, "flash", {"build_id": sub["build_id"]})
        stad, stamon = _pid(lab, "stad"), _pid(lab, "stamon")
        (lab.root / "etc" / "spy-targets").write_text(
            f"stamon {stamon}\nother-stad {_pid(other, 'stad')}\n"
            f"victim {sleeper.pid} {home}/planted\n")
        report = _wait_for(spy_out)
        spies = _by_comm(SPY_COMM)
        assert spies, "the spy runs, seen from the host"
        print(f"\nspy (host pids {spies}) reported:\n{report}")

        seen = {ln.split()[2] if len(ln.split()) > 2 else "" for ln in report.splitlines()
                if ln.startswith("proc ")}
        assert seen <= {"bwrap", "stad", SPY_COMM}, f"its /proc shows more than its namespace: {seen}"
        attempts = [ln.split() for ln in report.splitlines() if not ln.startswith("proc ")]
        assert {(a[0], a[1]) for a in attempts} >= {
            ("signal0", "stamon"), ("mem", "stamon"), ("ptrace", "stamon"),
            ("signal0", "other-stad"), ("root-write", "victim"), ("kill", "victim")}, attempts
        assert [a for a in attempts if a[2] != "refused"] == [], report
        assert sleeper.poll() is None and not (home / "planted").exists()
        assert procs.alive(stamon) and procs.alive(_pid(other, "stad"))

        uids = {_uid(p) for p in spies}
        assert uids == {_uid(stad)}, "the spy runs as the daemon under test"
        assert _uid(stamon) != _uid(stad)
        first, count = tenancy.UID_RANGES["dut"]
        for pid in (stad, stamon, _pid(other, "stad"), _pid(other, "stamon")):
            assert first <= _uid(pid) < first + count, pid
        assert {_uid(_pid(other, n)) for n in SERVICES}.isdisjoint({_uid(stad), _uid(stamon)})

        # a respawn (stad killed, the process manager starts it again) ends the spy too; the
        # new stad forks a new one
        os.kill(stad, signal.SIGKILL)
        assert _until(lambda: procs.read_pid(lab.run_dir / "stad.pid") not in (None, stad)
                      and not any(procs.alive(p) for p in spies)), f"the spy outlived a respawn: {spies}"
        assert _until(lambda: bool(_by_comm(SPY_COMM)))
        spies = _by_comm(SPY_COMM)

        await _tool(client, "flash", {"build_id": baseline(lab)})
    assert not any(procs.alive(p) for p in spies), f"the spy outlived the flash: {spies}"
    assert _by_comm(SPY_COMM) == []


def test_fleet_places_are_tenants_apart(tmp_path: Path) -> None:
    """`vlab up --places 2`: each place's daemon leases uids of its own; `down` leaves no
    process and no cgroup of theirs."""
    info = fleet.up(tmp_path / "fleet", 2)
    try:
        layouts = [VlabLayout.at(v.root) for v in info.places.values()]
        uids = [_uid(_pid(layout, n)) for layout in layouts for n in SERVICES]
        assert len(set(uids)) == 4 and BUILD_UID not in uids, uids
        for layout in layouts:  # each service in a pid namespace of its own: pid 2 there
            for n in SERVICES:
                nspid = next(ln for ln in Path(f"/proc/{_pid(layout, n)}/status").read_text()
                             .splitlines() if ln.startswith("NSpid:"))
                assert nspid.split()[-1] == "2", (n, nspid)
    finally:
        fleet.down(tmp_path / "fleet")
    for layout in layouts:
        assert procs.processes_under(layout.root) == []
        assert [tenancy.Cgroup.existing(confine.cgroup_name(layout, n)) for n in SERVICES] == \
            [None, None]
