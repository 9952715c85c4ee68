"""Run a build command confined: bubblewrap, an unprivileged uid, no network, no inherited state.

A patch can change every file a build reads -- Makefiles, included .mk files, generated
scripts, C headers -- so whatever `[build] command` runs is agent-written code. It runs here:
- as uid/gid 65534 (nobody) with no capabilities and no_new_privs when the server is root
  (bwrap sets up the mounts as root, then setpriv drops to nobody: the build's uid is nobody on
  the host too, not a user-namespace alias of root), as the server's own uid otherwise; in new
  pid, network (only `lo`), ipc, uts and cgroup namespaces (and a user namespace when not root);
- with an environment of its own (PATH, HOME=/tmp, LANG, TMPDIR): none of the server's variables;
- seeing the host read-only and only as far as a toolchain needs (/usr, the few /etc files the
  loader and alternatives read, the profile's `[build] readonly_paths`); a private /tmp, /dev
  and /proc; writing only the worktree (at /build/src) and the output dir (at /build/out). The data
  dir, keys, transcripts, $HOME and every other build are not in its filesystem at all;
- under rlimits (address space `[build] memory_mb`, CPU seconds, processes) and a wall-clock
  limit (`[build] timeout_s`); a caller's stop event (the session's wall time) ends it too.
Ending it kills the process group, and bwrap's pid namespace takes every process the build
started with it (a process that left the group by setsid included); `run` returns once they are
gone.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError

NOBODY = 65534
SRC = "/build/src"
OUT = "/build/out"
"""Where the worktree and the output dir appear in the sandbox: fixed paths (the real ones may
lie under directories only root can enter; and the same sources give the same debug info)."""
REAP_S = 10.0
"""How long a killed sandbox's namespace may take to be torn down before `run` returns."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")
"""What a toolchain reads under /etc: the loader's cache and gcc/cc's alternatives links. Not
passwd, not ssh, not the machine's identity."""
MAX_PROCS = 4096


class SandboxError(LabError):
    kind = "build"


class Limits(BaseModel):
    """What a confined command may spend."""

    timeout_s: float = Field(600, gt=0, description="wall-clock limit")
    memory_mb: int = Field(4096, gt=0, description="address space of each process")
    readonly_paths: list[Path] = Field(default_factory=list, description="host paths it may read "
                                       "besides /usr (a cross toolchain in /opt, say)")


class Outcome(BaseModel):
    returncode: int
    output: str = Field(description="stdout and stderr, interleaved, at most the last 256 KiB")
    timed_out: bool = False
    stopped: bool = False
    duration_s: float


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxError("bubblewrap (bwrap) is not installed: builds of patched code never run "
                           "unconfined", "install it: scripts/setup-system.sh (apt-get install "
                           "bubblewrap)")
    return found


def parent_dirs(*dests: str) -> list[str]:
    """Create the parents of bind targets world-traversable (bwrap makes them 0700, and the
    build's uid is not the one that set up the mounts)."""
    args: list[str] = []
    seen: set[str] = set()
    for dest in dests:
        for parent in reversed(Path(dest).parents):
            if str(parent) != "/" and str(parent) not in seen:
                seen.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
    return args


def system_binds() -> list[str]:
    """/usr (and the merged-/usr links), and the few /etc files the loader and alternatives
    read, read-only."""
    args = ["--ro-bind", "/usr", "/usr", *parent_dirs("/etc/x")]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    for name in ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def command_line(argv: Sequence[str], tree: Path, out: Path, limits: Limits) -> list[str]:
    """The full argv: prlimit (rlimits bwrap and everything under it inherit) + bwrap
    [+ setpriv down to nobody, as root] + argv, run in the worktree."""
    mem = limits.memory_mb << 20
    cpu = max(1, int(limits.timeout_s))
    root = os.geteuid() == 0
    spaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try"] if root else ["--unshare-all"]
    args = ["prlimit", f"--as={mem}", f"--cpu={cpu}", f"--nproc={MAX_PROCS}", "--core=0", "--",
            bwrap(), *spaces, "--die-with-parent", "--new-session", "--clearenv",
            "--hostname", "labwarden-build", *system_binds(),
            "--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
    for ro in limits.readonly_paths:
        args += [*parent_dirs(str(ro)), "--ro-bind", str(ro), str(ro)]
    args += [*parent_dirs(SRC), "--bind", str(tree), SRC, "--bind", str(out), OUT]
    tool_bins = [str(ro / "bin") for ro in limits.readonly_paths if (ro / "bin").is_dir()]
    env = {"PATH": ":".join([*tool_bins, PATH]), "HOME": "/tmp", "TMPDIR": "/tmp",
           "LANG": "C.UTF-8"}
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--chdir", SRC, "--"]
    if root:
        args += ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return [*args, *argv]


def hand_over(paths: Sequence[Path]) -> None:
    """Give the writable paths to the build's uid (when the server is root): the build writes
    there and nowhere else. Symlinks are not followed."""
    if os.geteuid() != 0:
        return
    for top in paths:
        os.lchown(top, NOBODY, NOBODY)
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), NOBODY, NOBODY)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the group and wait until the sandbox's pid namespace is gone. Its init (bwrap's
    child, not ours to wait for) is killed with the group; the kernel kills the rest of the
    namespace as that init exits, which lags behind the outer bwrap's death -- on a loaded host
    a setsid'd process of the build was still alive after `proc.wait()`. A pidfd of the init
    turns readable only once every process of its namespace has been reaped."""
    pidfds = []
    for child in _children(proc.pid):  # taken before the kill: after it, the init is orphaned
        try:
            pidfds.append(os.pidfd_open(child))
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    for fd in pidfds:  # poll, not select: a busy server's fds pass select's 1024 limit
        try:
            waiter = select.poll()
            waiter.register(fd, select.POLLIN)
            waiter.poll(REAP_S * 1000)
        finally:
            os.close(fd)


def run(argv: Sequence[str], *, tree: Path, out: Path, limits: Limits, log: Path,
        stop: threading.Event | None = None) -> Outcome:
    """Run `argv` confined in `tree` (seen as SRC), writing `out` (seen as OUT); its output goes
    to `log` (outside the sandbox) and its tail is returned. Never leaves a process behind: on
    timeout or `stop`, the group is killed."""
    full = command_line(argv, tree, out, limits)
    hand_over([tree, out])
    t0 = time.monotonic()
    timed_out = stopped = False
    with log.open("wb") as sink:
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True, env={})
        try:
            while proc.poll() is None:
                if stop is not None and stop.is_set():
                    stopped = True
                    break
                if time.monotonic() - t0 > limits.timeout_s:
                    timed_out = True
                    break
                try:
                    proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:
                _kill(proc)
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - (256 << 10)))
        output = f.read().decode(errors="replace")
    return Outcome(returncode=proc.returncode, output=output, timed_out=timed_out,
                   stopped=stopped, duration_s=round(time.monotonic() - t0, 3))
