"""`labwarden lab check PROFILE`: does this profile describe a lab that works? First the schema
(every invalid key, with its remedy), then the DUT, one row per check: SSH reachable with the
pinned host key, a shell answering, perf, tracefs/uprobes (when the profile declares uprobes),
the target running, `--version`'s form (when `[target] prints_git_hash` says it prints the
hash), the flash path dry-run, the build command run confined (a real build), and `[build]
artifacts` found in its output.

Each row is ok, a problem (with the remedy that fixes it) or skipped (not applicable, and why).
Nothing here talks SSH itself: the DUT is the profile's Device (runtime/session.open_device),
the build is the tools' own (lab/host/builds.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Literal

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.core.errors import LabError
from labwarden.lab.config import (
    CommandFlashSection,
    LabgridFlashSection,
    LabProfile,
    ProfileError,
    SysupgradeFlashSection,
)
from labwarden.lab.dut import procs, uprobes
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError, HostKeyMismatch, Unreachable
from labwarden.lab.host import builder, builds
from labwarden.runtime.labinit import HOST_KEY_ALGS, SHELL_PROBE, describe_shell, shell_facts
from labwarden.runtime.session import open_device

Status = Literal["ok", "problem", "skipped"]
HASH = re.compile(r"\b[0-9a-f]{7,40}\b")


class CheckRow(BaseModel):
    """One check: what was checked, its outcome, what was seen, and how to fix a problem."""

    check: str = Field(description="schema, place (a fleet place's profile), ssh, shell, perf, "
                       "uprobes, target, version, flash, build, artifacts")
    status: Status
    detail: str
    remedy: str | None = None
    lines: list[str] = Field(default_factory=list, description="what the failing step printed "
                             "(a build's last lines)")


class CheckReport(BaseModel):
    """The outcome of `labwarden lab check`: ok only when no row is a problem."""

    profile: str
    ok: bool
    rows: list[CheckRow]

    def problems(self) -> list[CheckRow]:
        return [r for r in self.rows if r.status == "problem"]


def _ok(check: str, detail: str) -> CheckRow:
    return CheckRow(check=check, status="ok", detail=detail)


def _problem(check: str, detail: str, remedy: str | None, lines: list[str] | None = None) -> CheckRow:
    return CheckRow(check=check, status="problem", detail=detail, remedy=remedy, lines=lines or [])


def _skip(check: str, why: str) -> CheckRow:
    return CheckRow(check=check, status="skipped", detail=why)


def schema_rows(path: Path) -> tuple[LabProfile | None, list[CheckRow]]:
    """The profile, or one problem row per invalid key (ProfileError's own messages)."""
    try:
        prof = LabProfile.from_file(path)
    except ProfileError as exc:
        return None, [_problem("schema", p, exc.remedy) for p in exc.problems]
    return prof, [_ok("schema", f"{path}: every key valid")]


async def check(path: Path, *, build: bool = True, fresh: bool = False) -> CheckReport:
    """Check the profile at `path` and the lab it describes; `build=False` skips the build,
    `fresh=True` runs the build command even when this commit and recipe were built before."""
    prof, rows = schema_rows(path)
    if prof is not None:
        rows += await dut_rows(prof)
        if build:
            rows += await build_rows(prof, fresh=fresh)
        else:
            rows.append(_skip("build", "not run (--skip-build)"))
    return CheckReport(profile=str(path), ok=all(r.status != "problem" for r in rows), rows=rows)


async def _presented_key(host: str, port: int, alg: str | None = None) -> str | None:
    """The host key the DUT presents (`type base64`; of type `alg` when given), read without
    logging in; None if it cannot be read."""
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(
            host, port, config=None, server_host_key_algs=[alg] if alg else list(HOST_KEY_ALGS)),
            10)
    except (OSError, asyncssh.Error, ValueError):
        return None
    return key.export_public_key().decode().split("\n")[0].strip() if key is not None else None


async def _ssh_row(prof: LabProfile, dev: Device) -> CheckRow:
    ep = dev.endpoint
    try:
        await dev.connect()
    except HostKeyMismatch as exc:
        presented = await _presented_key(ep.host, ep.port,
                                         ep.host_key.split()[0] if ep.host_key else None)
        remedy = exc.remedy
        if presented and prof.dut.backend == "ssh":
            parts = presented.split()
            remedy = (f"the DUT at {ep.host}:{ep.port} presents {parts[0]} ...{parts[1][-16:]}. "
                      "If this is your DUT (compare with its console: `dropbearkey -y -f "
                      "/etc/dropbear/dropbear_ed25519_host_key` on OpenWrt, `ssh-keygen -lf "
                      "/etc/ssh/ssh_host_ed25519_key.pub` on Debian), pin it in [dut.ssh]: "
                      f"host_key = \"{parts[0]} {parts[1]}\"; otherwise another machine "
                      "answers there: do not connect")
        return _problem("ssh", exc.problem, remedy)
    except Unreachable as exc:
        remedy = exc.remedy
        if prof.dut.backend == "ssh":
            remedy = (f"nothing answers SSH at {ep.host} port {ep.port}: set [dut.ssh] port to "
                      "the port the DUT's SSH server listens on (22 unless changed: `netstat "
                      "-ltn` on the DUT shows it) and host to its address; " + exc.remedy)
        return _problem("ssh", exc.problem, remedy)
    except DeviceError as exc:  # the client key refused, a bad pin
        return _problem("ssh", exc.problem, exc.remedy)
    return _ok("ssh", f"{ep.user}@{ep.host}:{ep.port}, host key pinned and accepted")


async def _shell_row(dev: Device) -> CheckRow:
    try:
        res = await dev.run(["sh", "-c", SHELL_PROBE], timeout=10)
    except DeviceError as exc:
        return _problem("shell", exc.problem, exc.remedy)
    facts = shell_facts(res.stdout)
    if res.exit_status != 0 or "path" not in facts:
        return _problem("shell", f"`sh -c` exited {res.exit_status}: {quote(res.stderr.strip(), 200)}",
                        "the DUT needs a POSIX sh (busybox ash is enough) for the login user")
    return _ok("shell", describe_shell(facts))


async def _perf_row(prof: LabProfile, dev: Device) -> CheckRow:
    perf = prof.target.perf
    try:
        res = await dev.run([perf, "--version"], timeout=15)
    except DeviceError as exc:
        return _problem("perf", exc.problem, exc.remedy)
    if res.exit_status == 0 and res.stdout.strip():
        return _ok("perf", f"{perf}: {quote(res.stdout.strip().splitlines()[0], 80)}")
    said = (res.stderr or res.stdout).strip()
    return _problem(
        "perf", f"`{perf} --version` on the DUT exited {res.exit_status}: "
        f"{quote(said, 200) if said else 'no output'}",
        "install perf on the DUT (OpenWrt: `opkg install perf`; Debian: `apt-get install "
        "linux-perf`); if it is installed, set [target] perf to its full path, or add its "
        "directory to PATH in [dut] env (commands run without a login shell)")


async def _uprobes_row(prof: LabProfile, dev: Device) -> CheckRow:
    if not prof.target.uprobes:
        return _skip("uprobes", "the profile declares no [target] uprobes")
    tracefs = prof.dut.paths.tracefs
    why = await uprobes.dut_available(dev, tracefs)
    if why is None:
        return _ok("uprobes", f"{tracefs}/uprobe_events writable ({len(prof.target.uprobes)} "
                   "counter(s) declared)")
    return _problem("uprobes", why, f"mount tracefs on the DUT (`mount -t tracefs nodev "
                    f"{tracefs}`) and log in as root, or set [dut.paths] tracefs to where it is "
                    "mounted (/sys/kernel/debug/tracing on older kernels); or drop [target] uprobes")


async def _target_rows(prof: LabProfile, dev: Device) -> list[CheckRow]:
    name = prof.target.process
    try:
        proc = await procs.instance(dev, name, prof.target.pidfile(name))
    except DeviceError as exc:
        return [_problem("target", exc.problem, exc.remedy)]
    if proc is None:
        how = (f"its pid file {prof.target.pidfile(name)}" if prof.target.pidfile(name)
               else "/proc/PID/comm")
        return [_problem("target", f"{name} is not running (looked for it by {how})",
                         f"start {name} on the DUT, or flash a build that starts it (`labwarden "
                         "call build`, then `labwarden call flash` with its build_id); if another "
                         "name runs, set [target] process to its name as /proc/PID/comm shows it "
                         "(at most 15 characters) or fix [target] pidfiles"),
                _skip("version", f"{name} is not running")]
    rows = [_ok("target", f"{name} runs as pid {proc.pid}")]
    if not prof.target.prints_git_hash:
        rows.append(_skip("version", "[target] prints_git_hash is off: `--version` is never run"))
        return rows
    try:
        res = await dev.run([f"/proc/{proc.pid}/exe", "--version"], timeout=10)
    except DeviceError as exc:
        rows.append(_problem("version", exc.problem, exc.remedy))
        return rows
    text = (res.stdout or res.stderr).strip()
    if res.exit_status == 0 and HASH.search(text):
        rows.append(_ok("version", f"`{name} --version` prints a git hash: {quote(text, 80)}"))
    else:
        rows.append(_problem(
            "version", f"`{name} --version` exited {res.exit_status} printing {quote(text, 120)}: "
            "no git hash (7 to 40 hex digits)",
            "set [target] prints_git_hash = false (the running binaries' sha256 and ELF "
            "build-id prove the image without it), or make the daemon print its hash"))
    return rows


def _host_executable(argv0: str) -> str | None:
    if "/" in argv0:
        path = Path(argv0).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(argv0)


async def _flash_row(prof: LabProfile, dev: Device) -> CheckRow:
    fl = prof.flash
    if isinstance(fl, LabgridFlashSection):
        return _skip("flash", f"a labgrid strategy (to state {fl.state}): not dry-run here")
    if isinstance(fl, CommandFlashSection):
        argv0 = fl.command[0] if fl.command else ""
        found = _host_executable(argv0)
        unknown = sorted({m for a in fl.command for m in re.findall(r"\{(\w*)\}", a)}
                         - {"image", "host", "port", "user"})
        if found is None:
            return _problem("flash", f"[flash] command: {argv0!r} is not an executable on this "
                            "host", "set [flash] command to your flasher's argv (its first "
                            "element an executable path on this host)")
        if unknown:
            return _problem("flash", f"[flash] command names {{{unknown[0]}}}: not filled in",
                            "use only {image} {host} {port} {user} in [flash] command")
        return _ok("flash", f"host flasher {found} is executable (not run)")
    assert isinstance(fl, SysupgradeFlashSection)
    cmd = fl.command[0] if fl.command else "sysupgrade"
    try:
        res = await dev.run(["sh", "-c", 'command -v "$1"', "sh", cmd], timeout=10)
        tmp = await dev.run(["test", "-d", prof.dut.paths.tmp, "-a", "-w", prof.dut.paths.tmp])
    except DeviceError as exc:
        return _problem("flash", exc.problem, exc.remedy)
    if res.exit_status != 0 or not res.stdout.strip():
        return _problem("flash", f"{cmd} is not found on the DUT ([flash] kind = {fl.kind!r})",
                        "install the DUT's flash command, set [flash] command to its path, or "
                        "use [flash] kind = \"command\" for a flasher run on this host")
    if tmp.exit_status != 0:
        return _problem("flash", f"{prof.dut.paths.tmp} is not a writable dir on the DUT (the "
                        "image is uploaded there)", "set [dut.paths] tmp to a writable dir")
    return _ok("flash", f"{quote(res.stdout.strip())} on the DUT; images go to {prof.dut.paths.tmp} "
               "(not run)")


async def dut_rows(prof: LabProfile) -> list[CheckRow]:
    """The DUT's rows: SSH first; the rest only once SSH answers (each then says its own)."""
    try:
        opened = open_device(prof, connect=False)
        dev = await opened.__aenter__()
    except LabError as exc:  # a fleet profile, a labgrid place not acquired, a bad pin
        return [_problem("ssh", exc.problem, exc.remedy)]
    try:
        rows: list[CheckRow] = []
        if prof.dut.place is not None and dev.place is not None:  # a fleet place's own profile:
            try:  # its DUT is touched only while the place is held (released on the way out)
                await dev.place.hold()
                rows.append(_ok("place", f"{prof.dut.place.name} held at {prof.dut.place.coordinator}"))
            except LabError as exc:
                return [_problem("place", exc.problem, exc.remedy)]
        rows.append(await _ssh_row(prof, dev))
        if rows[-1].status != "ok":
            return rows + [_skip(c, "SSH does not answer") for c in
                           ("shell", "perf", "uprobes", "target", "version", "flash")]
        rows.append(await _shell_row(dev))
        rows.append(await _perf_row(prof, dev))
        rows.append(await _uprobes_row(prof, dev))
        rows += await _target_rows(prof, dev)
        rows.append(await _flash_row(prof, dev))
        return rows
    finally:
        await opened.__aexit__(None, None, None)


async def build_rows(prof: LabProfile, *, fresh: bool = False) -> list[CheckRow]:
    """The build command run confined, as `build` runs it (a real build: cached when this very
    commit and recipe were built before, unless `fresh`: then built in a scratch dir beside
    the builds and removed), then [build] artifacts looked up in its output."""
    repo = Path(prof.build.repo).expanduser()
    if not (repo / ".git").exists():
        return [_problem("build", f"[build] repo {repo} is not a git repository",
                         "set [build] repo to your firmware's git checkout"),
                _skip("artifacts", "no build")]
    recipe = builds.recipe(prof)
    scratch = None
    if fresh:
        recipe.builds.mkdir(parents=True, exist_ok=True)
        scratch = recipe.builds / f".check-{os.getpid()}"
        recipe.builds = scratch
    try:
        return await _built_rows(prof, recipe, repo)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


async def _built_rows(prof: LabProfile, recipe: builder.BuildRecipe, repo: Path) -> list[CheckRow]:
    try:
        manifest, cached = await builds.compiled(recipe, [], "HEAD")
    except builder.BuildError as exc:
        if exc.stage == "package":
            return [_ok("build", "the build command exited 0"),
                    _problem("artifacts", exc.problem, exc.remedy, exc.lines)]
        return [_problem("build", f"{exc.stage} failed: `{' '.join(prof.build.command)}` in "
                         f"{repo} (HEAD), confined", exc.remedy, exc.lines[-20:]),
                _skip("artifacts", "the build failed")]
    except LabError as exc:
        return [_problem("build", exc.problem, exc.remedy, exc.lines[-20:]),
                _skip("artifacts", "the build failed")]
    return [_ok("build", f"build {manifest.build_id} of {manifest.git_hash[:12]}"
                + (" (cached: this commit and recipe were built before)" if cached else "")),
            _ok("artifacts", ", ".join(f"{a.name} -> {a.path}" for a in manifest.artifacts))]
