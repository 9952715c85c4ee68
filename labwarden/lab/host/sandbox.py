"""Run a build command confined: bubblewrap, a uid and a cgroup of its own, no network, no
inherited state, bounded as a whole.

A patch can change every file a build reads -- Makefiles, included .mk files, generated
scripts, C headers -- so whatever `[build] command` runs is agent-written code. It runs here:
- as a uid of its own when the server is root: leased for the build's life from tenancy's
  "build" range (lab/host/tenancy.py), so no other build, no DUT and no host process shares it --
  not its RLIMIT_NPROC, not its signals, /proc/PID/mem or /proc/PID/root. bwrap sets up the mounts
  as root, then setpriv drops to that uid with no capabilities and no_new_privs (the build's uid is
  that uid on the host too, not a user-namespace alias of root). As the server's own uid otherwise;
  in new pid, network (only `lo`), ipc, uts and cgroup namespaces (and a user namespace when not
  root);
- unable to make a user namespace (and with it capabilities): a seccomp filter
  (lab/host/seccomp.py) refuses `unshare`/`clone` with CLONE_NEWUSER; it refuses `fallocate`
  too (an allocation takes gigabytes faster than the disk watcher below can act) and io_uring;
- with an environment of its own (PATH, HOME=/tmp, LANG, TMPDIR): none of the server's variables;
- seeing the host read-only and only as far as a toolchain needs (/usr, the few /etc files the
  loader and alternatives read, the profile's `[build] readonly_paths`); a private /tmp (a tmpfs
  of `[build] tmp_mb`), /dev and /proc; writing only the worktree (at /build/src) and the output
  dir (at /build/out). The data dir, keys, transcripts, $HOME and every other build are not in its
  filesystem at all;
- bounded as a whole, in a cgroup of its own (when root): processes and threads `[build]
  max_procs`, memory `[build] memory_mb` (every process together, the private /tmp's pages
  included: the kernel's OOM killer ends the build past it); the worktree and /build/out together
  `[build] disk_mb` (a file larger is refused by RLIMIT_FSIZE; a watcher here kills the build
  when their total passes it); a wall-clock limit `[build] timeout_s` and CPU seconds; its output
  kept in build.log up to `[build] log_mb` (the rest is read and dropped; the tail is kept). A
  caller's stop event (the session's wall time) ends it too.
Ending it kills the cgroup (every process the build started, wherever it went); without a cgroup
(not root) the process group, and bwrap's pid namespace takes every process with it. `run`
returns once they are gone.
"""

from __future__ import annotations

import contextlib
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
from labwarden.lab.host import tenancy

NOBODY = 65534
"""The uid confined services ran as before tenants had uids of their own (kept for callers that
still drop to it)."""
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
"""The old per-uid process limit (a default for callers that pass no Limits)."""
TAIL_BYTES = 256 << 10
DISK_POLL_S = 0.05
"""How often the host's free space is read (one statvfs): the worktree and /build/out are walked
only once it fell by more than the build may still write."""


class SandboxError(LabError):
    kind = "build"


class Limits(BaseModel):
    """What a confined command may spend (the `[build]` keys of the same names)."""

    timeout_s: float = Field(600, gt=0, description="wall-clock limit")
    memory_mb: int = Field(4096, gt=0, description="memory of the whole build (every process, "
                           "the private /tmp's pages included)")
    max_procs: int = Field(1024, gt=0, description="processes and threads of the whole build")
    tmp_mb: int = Field(1024, gt=0, description="size of the private /tmp (a tmpfs; its pages "
                        "count in memory_mb too)")
    disk_mb: int = Field(8192, gt=0, description="what the worktree and /build/out may hold "
                         "together (and so the largest file)")
    log_mb: int = Field(64, gt=0, description="how much output build.log keeps")
    readonly_paths: list[Path] = Field(default_factory=list, description="host paths it may read "
                                       "besides /usr (a cross toolchain in /opt, say)")


class LimitHit(BaseModel):
    """A limit that refused the build something: what happened and the key to raise."""

    key: str = Field(description="the [build] key, e.g. memory_mb")
    line: str
    remedy: str


class Outcome(BaseModel):
    returncode: int
    output: str = Field(description="stdout and stderr, interleaved, at most the last 256 KiB")
    timed_out: bool = False
    stopped: bool = False
    duration_s: float
    uid: int | None = Field(None, description="the uid the build ran as (None: the server's)")
    limits_hit: list[LimitHit] = Field(default_factory=list, description="limits that refused "
                                       "the build something (forks, memory, disk, /tmp)")
    log_capped: bool = Field(False, description="build.log stopped at [build] log_mb")


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


def command_line(argv: Sequence[str], tree: Path, out: Path, limits: Limits, *,
                 uid: int | None = None, seccomp_fd: int | None = None,
                 cgroup: bool = False) -> list[str]:
    """The full argv: prlimit (rlimits bwrap and everything under it inherit) + bwrap
    [+ setpriv down to `uid`, as root] + argv, run in the worktree. With `cgroup` the build's
    memory is the cgroup's to bound; without it each process's address space is."""
    root = os.geteuid() == 0
    if root and uid is None:
        uid = NOBODY
    cpu = max(1, int(limits.timeout_s))
    rlimits = [f"--cpu={cpu}", f"--nproc={limits.max_procs}", "--core=0",
               f"--fsize={limits.disk_mb << 20}"]
    if not cgroup:
        rlimits.append(f"--as={limits.memory_mb << 20}")
    spaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try"] if root else ["--unshare-all"]
    args = ["prlimit", *rlimits, "--", bwrap(), *spaces, "--die-with-parent", "--new-session",
            "--clearenv", "--hostname", "labwarden-build", *system_binds(),
            "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp"]
    for ro in limits.readonly_paths:
        args += [*parent_dirs(str(ro)), "--ro-bind", str(ro), str(ro)]
    args += [*parent_dirs(SRC), "--bind", str(tree), SRC, "--bind", str(out), OUT]
    tool_bins = [str(ro / "bin") for ro in limits.readonly_paths if (ro / "bin").is_dir()]
    env = {"PATH": ":".join([*tool_bins, PATH]), "HOME": "/tmp", "TMPDIR": "/tmp",
           "LANG": "C.UTF-8"}
    for key, value in env.items():
        args += ["--setenv", key, value]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", SRC, "--"]
    if root:
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return [*args, *argv]


def hand_over(paths: Sequence[Path], uid: int = NOBODY) -> None:
    """Give the writable paths to the build's uid (when the server is root): the build writes
    there and nowhere else. Symlinks are not followed."""
    if os.geteuid() != 0:
        return
    for top in paths:
        os.lchown(top, uid, uid)
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, uid)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the group and wait until the sandbox's pid namespace is gone (no cgroup: not root).
    Its init (bwrap's child, not ours to wait for) is killed with the group; the kernel kills the
    rest of the namespace as that init exits, which lags behind the outer bwrap's death -- on a
    loaded host a setsid'd process of the build was still alive after `proc.wait()`. A pidfd of
    the init turns readable only once every process of its namespace has been reaped."""
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


def disk_usage(paths: Sequence[Path], pids: Sequence[int] = ()) -> int:
    """Bytes the files under `paths` occupy (allocated blocks; symlinks not followed; iterative,
    so no depth defeats it), plus files that `pids` hold open after unlinking them."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(p) for p in paths]
    while stack:
        top = stack.pop()
        with contextlib.suppress(OSError), os.scandir(top) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    if st.st_nlink == 0 and (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_blocks * 512
    return total


class _DiskWatch:
    """Kills the build when the worktree and /build/out together pass `limit` bytes. One statvfs
    per poll; a walk only when the host's free space fell by more than the build may still write
    (then at most once a second)."""

    def __init__(self, paths: Sequence[Path], limit: int):
        self.paths = paths
        self.limit = limit
        self.used = disk_usage(paths)
        self.free0 = self.free()
        self.next_walk = 0.0
        self.over = False

    def free(self) -> int:
        st = os.statvfs(self.paths[0])
        return st.f_bavail * st.f_frsize

    def check(self, pids: Sequence[int]) -> bool:
        """True once the build is over its limit."""
        if self.free0 - self.free() + self.used <= self.limit or time.monotonic() < self.next_walk:
            return False
        now = disk_usage(self.paths, pids)
        self.next_walk = time.monotonic() + 1.0
        if now > self.limit:
            self.over = True
            return True
        self.used, self.free0 = now, self.free()
        return False


class _Sink:
    """The build's output, read from a pipe: the first `cap` bytes go to the log, the last
    TAIL_BYTES are kept; the rest is read and dropped (the build never blocks on it)."""

    def __init__(self, fd: int, log: Path, cap: int):
        self.fd, self.log, self.cap = fd, log, cap
        self.written = self.dropped = 0
        self.tail = bytearray()
        self.thread = threading.Thread(target=self._drain, name="build-output", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        with self.log.open("wb") as f:
            while chunk := os.read(self.fd, 1 << 20):
                keep = chunk[:max(0, self.cap - self.written)]
                if keep:
                    f.write(keep)
                    self.written += len(keep)
                self.dropped += len(chunk) - len(keep)
                self.tail += chunk
                del self.tail[:-TAIL_BYTES]
            os.close(self.fd)
            if self.dropped:
                f.write(f"\n[labwarden: build.log stopped at [build] log_mb = {self.cap >> 20} "
                        f"MiB; {self.dropped} bytes after it were dropped; the last "
                        f"{len(self.tail)} bytes of the output follow]\n".encode())
                f.write(self.tail)

    def join(self) -> str:
        self.thread.join()
        return self.tail.decode(errors="replace")


def _hits(limits: Limits, events: dict[str, int], disk_over: bool, output: str,
          host_free: int) -> list[LimitHit]:
    """The limits that refused the build something. /tmp's is told by its error: a device full
    while the host's disk (the worktree's and /build/out's) is not can only be /tmp."""
    hits = []
    if events.get("pids", 0):
        hits.append(LimitHit(key="max_procs", line=f"{events['pids']} forks refused at [build] "
                             f"max_procs = {limits.max_procs} (processes and threads of the "
                             "whole build)", remedy="fork fewer processes, or raise [build] "
                             "max_procs"))
    if events.get("oom_kill", 0):
        hits.append(LimitHit(key="memory_mb", line=f"the build used more than [build] memory_mb "
                             f"= {limits.memory_mb} MiB (every process together, /tmp's files "
                             f"included): the kernel killed {events['oom_kill']} of its "
                             "processes", remedy="use less memory, or raise [build] memory_mb"))
    if disk_over or "File size limit exceeded" in output or "File too large" in output:
        hits.append(LimitHit(key="disk_mb", line=f"the build wrote more than [build] disk_mb = "
                             f"{limits.disk_mb} MiB (its worktree and /build/out together, or one "
                             "file): " + ("it was killed" if disk_over else
                                          "the kernel refused the file"),
                             remedy="write less, or raise [build] disk_mb"))
    if "No space left on device" in output and host_free > 1 << 30:  # not the host's disk
        hits.append(LimitHit(key="tmp_mb", line=f"/tmp is full: it holds at most [build] tmp_mb "
                             f"= {limits.tmp_mb} MiB", remedy="write less to /tmp (or write to "
                             "/build/out), or raise [build] tmp_mb"))
    return hits


def _cgroup(name: str, limits: Limits) -> tenancy.Cgroup:
    """The build's cgroup, named after its uid. One left by a build whose processes outlived the
    kill (or a dead server) may refuse the new limits (v1 memory: a limit above the old
    memory+swap one is EINVAL): then that one is removed and, if it stays, a fresh name taken."""
    try:
        return tenancy.Cgroup.create(name, pids_max=limits.max_procs,
                                     memory_bytes=limits.memory_mb << 20)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        tenancy.Cgroup.create(name).remove()  # its cgroup2 directory: emptied and removed
    for hierarchy in ("pids", "memory"):
        for stale in tenancy.CGROUP_ROOT.glob(f"{hierarchy}/**/labwarden/{name}"):
            with contextlib.suppress(OSError):
                stale.rmdir()
    try:
        return tenancy.Cgroup.create(name, pids_max=limits.max_procs,
                                     memory_bytes=limits.memory_mb << 20)
    except OSError:
        return tenancy.Cgroup.create(f"{name}-{os.getpid()}-{time.monotonic_ns()}",
                                     pids_max=limits.max_procs, memory_bytes=limits.memory_mb << 20)


def run(argv: Sequence[str], *, tree: Path, out: Path, limits: Limits, log: Path,
        stop: threading.Event | None = None) -> Outcome:
    """Run `argv` confined in `tree` (seen as SRC), writing `out` (seen as OUT); its output goes
    to `log` (outside the sandbox, up to `limits.log_mb`) and its tail is returned. Never leaves
    a process behind: on timeout, `stop` or the disk limit, the build's cgroup is killed."""
    from labwarden.lab.host import seccomp  # libseccomp is loaded only where builds run

    tenant = os.geteuid() == 0 and tenancy.available()
    lease = tenancy.lease_uid("build") if tenant else None
    group: tenancy.Cgroup | None = None
    filter_fd = -1
    try:
        if lease is not None:
            group = _cgroup(f"build-{lease.uid}", limits)
        filter_fd = seccomp.build_filter(limits.disk_mb << 20)
        full = command_line(argv, tree, out, limits, uid=lease.uid if lease else None,
                            seccomp_fd=filter_fd, cgroup=group is not None)
        if group is not None:
            full = group.enter(full)
        hand_over([tree, out], lease.uid if lease else NOBODY)
        return _run(full, tree=tree, out=out, limits=limits, log=log, stop=stop, group=group,
                    filter_fd=filter_fd, uid=lease.uid if lease else None)
    finally:
        if filter_fd >= 0:
            os.close(filter_fd)
        if group is not None:
            group.remove()
        if lease is not None:
            lease.release()


def _run(full: list[str], *, tree: Path, out: Path, limits: Limits, log: Path,
         stop: threading.Event | None, group: tenancy.Cgroup | None, filter_fd: int,
         uid: int | None) -> Outcome:
    t0 = time.monotonic()
    timed_out = stopped = False
    watch = _DiskWatch([tree, out], limits.disk_mb << 20)
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=write_end,
                                stderr=subprocess.STDOUT, start_new_session=True, env={},
                                pass_fds=[filter_fd])
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    sink = _Sink(read_end, log, limits.log_mb << 20)
    try:
        while proc.poll() is None:
            if stop is not None and stop.is_set():
                stopped = True
                break
            if time.monotonic() - t0 > limits.timeout_s:
                timed_out = True
                break
            if watch.check(group.pids() if group is not None else []):
                break
            try:
                proc.wait(timeout=DISK_POLL_S)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if group is not None:
            group.kill()  # every process of the build, the pid namespace's included
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        elif proc.poll() is None:
            _kill(proc)
    output = sink.join()
    events = group.events() if group is not None else {}
    return Outcome(returncode=proc.returncode, output=output, timed_out=timed_out,
                   stopped=stopped, duration_s=round(time.monotonic() - t0, 3), uid=uid,
                   limits_hit=_hits(limits, events, watch.over, output, watch.free()),
                   log_capped=sink.dropped > 0)
