"""Builds are tenants: each runs under a uid and in a cgroup of its own, bounded as a whole, and
cannot make a user namespace. The attacks a red team made, as patches through the real doors
(MCP and `labwarden call`) against a real vlab, git, make, gcc and bubblewrap:
- a fork bomb in one build while an innocent build runs beside it (both through the doors, at
  the same time): the innocent one compiles -- before builds had their own uid and cgroup, the
  bomb took the one per-uid process limit every build shared and the innocent `make` failed with
  "Resource temporarily unavailable";
- two builds at once run under two uids, neither `nobody` (read from the host's /proc while
  both run);
- a 20 GB file (`fallocate -l 20G` in /build/out) and 5 GB of memory (three processes and a /tmp
  file) are refused, the error naming the limit and the `[build]` key to raise;
- `unshare -U -r` and `unshare -U` are refused inside a build.
And sandbox.run directly for the other limits: the worktree and /build/out together (many files,
each under the per-file limit), fallocate (refused: it would take disk faster than a watcher
acts), /tmp's size, the log's cap, forks. Whatever allocates is bounded twice:
by the limit under test and by a small profile value, so a broken limit cannot take the host
down."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.lab.config import LabProfile
from labwarden.lab.host import sandbox, tenancy
from labwarden.server.app import build_server
from labwarden.vlab.layout import VlabLayout

from .diffing import both, git_diff, prepend, replace, write

pytestmark = pytest.mark.anyio
runner = CliRunner()
ALL = "all: $(O)/libsta.so $(PROGS:%=$(O)/%)\n"
FIRST, COUNT = tenancy.UID_RANGES["build"]


def _profile(vlab: VlabLayout, tmp_path: Path, **keys: object) -> Path:
    """The vlab's profile with `[build]` keys set (the limits under test kept small)."""
    lines = "".join(f"{k} = {v}\n" for k, v in keys.items())
    lab = tmp_path / "lab.toml"
    lab.write_text(re.sub(r"^\[build\]\n", "[build]\n" + lines, vlab.lab_toml.read_text(),
                          count=1, flags=re.M))
    return lab


async def _mcp(lab: Path, name: str, diff: str) -> tuple[bool, str]:
    async with Client(build_server(LabProfile.from_file(lab))) as client:
        res = await client.call_tool("patch_submit", {"name": name, "diff": diff})
    return bool(res.is_error), "\n".join(getattr(c, "text", "") for c in res.content)


def _cli(lab: Path, name: str, diff: str) -> tuple[int, dict[str, object]]:
    res = runner.invoke(app, ["call", "patch_submit", json.dumps({"name": name, "diff": diff}),
                              "--lab", str(lab), "--json"])
    return res.exit_code, json.loads(res.stdout)


def _error_text(record: dict[str, object]) -> str:
    return json.dumps(record.get("error"))


def _procs(marker: str) -> dict[int, int]:
    """Host pid -> real uid of the processes whose command line holds `marker`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid = re.search(r"^Uid:\s+(\d+)", status, re.M)
        if uid:
            found[int(entry.name)] = int(uid.group(1))
    return found


def _release(vlab: VlabLayout, stop: str) -> None:
    """Let every held build go: a file named `stop` in each worktree (the builds poll for it)."""
    builds = Path(LabProfile.from_file(vlab.lab_toml).build.builds).expanduser()
    for tree in builds.glob("*/tree"):
        (tree / stop).touch()


async def _until(cond: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"never saw {what}"
        await anyio.sleep(0.3)


def _hold(tag: str) -> Callable[[Path], None]:
    """A build that waits (polling its worktree for STOP-tag) before compiling."""
    return prepend("Makefile", f"X := $(shell while [ ! -e STOP-{tag} ]; do sleep 0.2; done)\n")


BOMB_C = r"""#include <stdio.h>
#include <time.h>
#include <unistd.h>
/* forks children until fork is refused, and keeps trying, until STOP-%(tag)s appears; the
   children wait for it too (their output closed: make's $(shell) reads until every writer ends) */
int main(void) {
    time_t end = time(0) + 180;
    long made = 0, refused = 0;
    while (time(0) < end && access("STOP-%(tag)s", F_OK) != 0) {
        pid_t p = fork();
        if (p == 0) {
            close(1); close(2);
            while (time(0) < end && access("STOP-%(tag)s", F_OK) != 0) sleep(1);
            _exit(0);
        }
        if (p < 0) { refused++; usleep(20000); } else made++;
    }
    printf("error: bomb made %%ld processes, %%ld forks refused\n", made, refused);
    return 1;
}
"""


async def test_a_fork_bomb_beside_an_innocent_build_leaves_it_compiling(vlab: VlabLayout) -> None:
    """The bomb (MCP) forks until refused and holds its processes; once its count stops
    growing, an innocent patch is submitted (CLI) and must compile while the bomb still holds."""
    tag = "b401"
    bomb = git_diff(vlab.src, both(
        write(f"bomb-{tag}.c", BOMB_C % {"tag": tag}),
        prepend("Makefile", f"X := $(shell gcc -o /tmp/bomb-{tag} bomb-{tag}.c && "
                f"/tmp/bomb-{tag})\n")))
    innocent = git_diff(vlab.src, replace("hal.c", "return 0;", "return 0; /* innocent */"))
    result: dict[str, tuple[bool, str]] = {}

    async def run_bomb() -> None:
        result["bomb"] = await _mcp(vlab.lab_toml, "bomb", bomb)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_bomb)
        try:
            counts: list[int] = []

            def saturated() -> bool:  # the bomb's processes stopped growing
                counts.append(len(_procs(f"/tmp/bomb-{tag}")))
                return len(counts) > 4 and counts[-1] > 100 and counts[-1] == counts[-4]

            await _until(saturated, "the bomb reach its limit")
            held = counts[-1]
            code, record = await anyio.to_thread.run_sync(_cli, vlab.lab_toml, "innocent", innocent)
            still = len(_procs(f"/tmp/bomb-{tag}"))
        finally:
            _release(vlab, f"STOP-{tag}")
    print(f"\nthe bomb held {held} processes (still {still} as the innocent build ended)")
    assert code == 0, _error_text(record)
    assert still >= held - 10  # the innocent build ran while the bomb held its processes
    assert held <= sandbox.Limits().max_procs
    assert _procs(f"/tmp/bomb-{tag}") == {}


async def test_two_builds_at_once_run_under_two_uids_of_their_own(vlab: VlabLayout) -> None:
    tag = "u402"
    diffs = [git_diff(vlab.src, both(_hold(tag), replace("hal.c", "return 0;",
                                                         f"return 0; /* {k} */"))) for k in "ab"]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_mcp, vlab.lab_toml, "hold-a", diffs[0])
        tg.start_soon(anyio.to_thread.run_sync, _cli, vlab.lab_toml, "hold-b", diffs[1])
        try:
            await _until(lambda: len(_procs(f"STOP-{tag}")) >= 2, "both builds running")
            uids = sorted(set(_procs(f"STOP-{tag}").values()))
        finally:
            _release(vlab, f"STOP-{tag}")
    print(f"\ntwo builds at once ran as uids {uids}")
    assert len(uids) == 2, uids
    assert all(FIRST <= u < FIRST + COUNT for u in uids), uids  # neither nobody nor root


async def test_a_20_gb_file_is_refused_naming_the_limit(vlab: VlabLayout) -> None:
    diff = git_diff(vlab.src, replace("Makefile", ALL, ALL + "\tfallocate -l 20G $(O)/big\n"))
    code, record = await anyio.to_thread.run_sync(_cli, vlab.lab_toml, "big-file", diff)
    text = _error_text(record)
    assert code == 1, text
    assert "[build] disk_mb = 8192 MiB" in text and "raise [build] disk_mb" in text, text


MEM_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* takes MiB of memory a chunk at a time (each touched), then holds it */
int main(int argc, char **argv) {
    long mib = atol(argv[1]);
    for (long i = 0; i < mib / 64; i++) {
        char *p = malloc(64 << 20);
        if (!p) { printf("error: malloc refused at %ld MiB\n", i * 64); return 1; }
        memset(p, 1, 64 << 20);
    }
    sleep(2);
    printf("error: held %ld MiB\n", mib);
    return 0;
}
"""


async def test_5_gb_of_memory_is_refused_naming_the_limit(vlab: VlabLayout, tmp_path: Path) -> None:
    """Three processes of 1600 MiB and a 300 MiB file in /tmp; the build may hold 1024 MiB."""
    lab = _profile(vlab, tmp_path, memory_mb=1024)
    rule = ("\tgcc -o /tmp/mem mem.c\n\thead -c 300M /dev/zero >/tmp/fill\n"
            "\t/tmp/mem 1600 & a=$$!; /tmp/mem 1600 & b=$$!; /tmp/mem 1600 & c=$$!; "
            "wait $$a && wait $$b && wait $$c\n")
    diff = git_diff(vlab.src, both(write("mem.c", MEM_C),
                                   replace("Makefile", ALL, ALL + rule)))
    is_error, text = await _mcp(lab, "five-gb", diff)
    assert is_error, text
    assert "more than [build] memory_mb = 1024 MiB" in text and "raise [build] memory_mb" in text, text
    assert "held 1600 MiB" not in text


async def test_a_build_cannot_make_a_user_namespace(vlab: VlabLayout) -> None:
    probe = ("{ unshare -U -r true && echo USERNS-R-OPEN || echo USERNS-R-REFUSED; "
             "unshare -U true && echo USERNS-OPEN || echo USERNS-REFUSED; } 2>&1 | "
             "sed 's/^/error: /'; exit 1")
    diff = git_diff(vlab.src, replace("Makefile", ALL, ALL + f"\t@{probe}\n"))
    is_error, text = await _mcp(vlab.lab_toml, "userns", diff)
    assert is_error and "compile failed" in text, text
    assert "USERNS-R-REFUSED" in text and "USERNS-REFUSED" in text, text
    assert "OPEN" not in text and "Operation not permitted" in text, text


# sandbox.run directly: the limits whose refusals need no vlab


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    tree, out = tmp_path / "tree", tmp_path / "out"
    tree.mkdir()
    out.mkdir()
    return tree, out


def _run(dirs: tuple[Path, Path], script: str, log: Path, **limits: int) -> sandbox.Outcome:
    tree, out = dirs
    return sandbox.run(["sh", "-c", script], tree=tree, out=out, log=log,
                       limits=sandbox.Limits(timeout_s=60, **limits))


def test_many_files_past_disk_mb_kill_the_build(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """Each file under the per-file limit, together past it: the watcher kills the build."""
    res = _run(dirs, "for i in $(seq 40); do head -c 8M /dev/zero >/build/out/f$i || exit 3; "
               "done; sleep 30; echo all-written", tmp_path / "log", disk_mb=64)
    assert res.returncode != 0 and "all-written" not in res.output, res
    assert [h.key for h in res.limits_hit] == ["disk_mb"], res.limits_hit
    assert "[build] disk_mb = 64 MiB" in res.limits_hit[0].line
    assert sandbox.disk_usage(list(dirs)) < 200 << 20


POSIX_FALLOCATE_C = r"""#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
int main(void) {
    int fd = open("/build/out/p", O_CREAT | O_WRONLY, 0644);
    struct stat st;
    int err = posix_fallocate(fd, 0, 4 << 20);
    fstat(fd, &st);
    printf("posix %d %lld\n", err, (long long)st.st_size);
    return err;
}
"""


def test_fallocate_takes_no_disk_at_once(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """An allocation takes disk at once (8 GB in ~30 ms here): ten in parallel would be past any
    watcher before it looked. Refused (EOPNOTSUPP), and posix_fallocate writes instead."""
    (dirs[0] / "p.c").write_text(POSIX_FALLOCATE_C)
    res = _run(dirs, "for i in $(seq 10); do fallocate -l 256M /build/out/f$i & done; wait; "
               "gcc -o /tmp/p p.c && /tmp/p", tmp_path / "log", disk_mb=2048)
    assert "fallocate failed: Operation not supported" in res.output, res
    assert "posix 0 4194304" in res.output, res  # glibc's fallback wrote it
    assert sandbox.disk_usage(list(dirs)) < 8 << 20


def test_tmp_is_a_tmpfs_of_tmp_mb(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    res = _run(dirs, "head -c 40M /dev/zero >/tmp/fill", tmp_path / "log", tmp_mb=16)
    assert res.returncode != 0, res
    assert "tmp_mb" in [h.key for h in res.limits_hit], res
    assert "[build] tmp_mb = 16 MiB" in " ".join(h.line for h in res.limits_hit)


def test_build_log_stops_at_log_mb_and_the_tail_is_returned(dirs: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    res = _run(dirs, "yes 0123456789abcdef | head -c 30000000; echo THE-END", log, log_mb=1)
    assert res.returncode == 0 and res.log_capped, res
    assert res.output.rstrip().endswith("THE-END")
    assert log.stat().st_size < (1 << 20) + sandbox.TAIL_BYTES + 4096
    assert "stopped at [build] log_mb = 1 MiB" in log.read_text(errors="replace")


def test_forks_past_max_procs_are_refused_naming_the_key(dirs: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    res = _run(dirs, "i=0; while [ $i -lt 500 ]; do sleep 20 & i=$((i+1)); done; echo forked",
               tmp_path / "log", max_procs=64)
    assert "forked" not in res.output
    assert [h.key for h in res.limits_hit] == ["max_procs"], res
    assert "forks refused at [build] max_procs = 64" in res.limits_hit[0].line


def test_a_stale_cgroup_of_the_same_name_does_not_refuse_the_next_build() -> None:
    """A cgroup left with a smaller memory limit (v1 refuses raising the limit above the old
    memory+swap one) is removed and made anew with the build's limits."""
    name = f"build-stale-{time.monotonic_ns()}"
    tenancy.Cgroup.create(name, pids_max=64, memory_bytes=256 << 20)
    group = sandbox._cgroup(name, sandbox.Limits(memory_mb=2048))
    try:
        assert group.name == name
        limits = [int((d / f).read_text()) for d in group.dirs
                  for f in ("memory.limit_in_bytes", "memory.max") if (d / f).exists()]
        assert limits == [2048 << 20], limits
    finally:
        group.remove()
