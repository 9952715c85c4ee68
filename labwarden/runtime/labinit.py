"""`labwarden lab init --ssh USER@HOST[:PORT] --repo PATH`: a starting lab profile, written by
probing the box -- its host key (pinned on first use), the shell and busybox, perf, tracefs,
the flash command, the processes that could be the target (busiest first) -- and the repo (a
build command guessed from its Makefile). Every guessed value carries a comment saying it is a
guess; the profile is validated before it is written. `labwarden lab check` is the next step.

The DUT is reached through the profile's own Device (lab/dut): the same pinned-key client every
tool uses.
"""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.dut.errors import DeviceError

KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
"""The user's keys tried in order when --key is not given (~/.ssh/...)."""

HOST_KEY_ALGS = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                 "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")
"""The host key types asked for, preferred first (asking for asyncssh's whole default list,
certificates included, makes dropbear drop the handshake)."""

SYSTEM = frozenset({
    "init", "systemd", "systemd-journal", "systemd-udevd", "systemd-logind", "systemd-resolve",
    "systemd-network", "systemd-timesyn", "dbus-daemon", "sshd", "dropbear", "sftp-server",
    "sh", "ash", "bash", "busybox", "sleep", "cat", "procd", "ubusd", "logd", "logread",
    "netifd", "odhcpd", "odhcp6c", "udhcpc", "dnsmasq", "rpcd", "uhttpd", "crond", "cron",
    "ntpd", "sysntpd", "hotplug2", "klogd", "syslogd", "rsyslogd", "agetty", "getty", "login",
    "containerd", "dockerd", "tini", "unshare", "nsenter", "timeout", "ps", "top", "tail",
})
"""Processes that are the system's, not a firmware's daemon to measure."""

PROBE = r"""
echo "sh=$(readlink -f /bin/sh)"
echo "says=$( (/bin/sh --help 2>&1) | head -n 1)"
echo "busybox=$(command -v busybox)"
echo "perf=$(command -v perf)"
echo "sysupgrade=$(command -v sysupgrade)"
echo "path=$PATH"
[ -e /etc/openwrt_release ] && echo "openwrt=1"
for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
  [ -e "$d/uprobe_events" ] && { echo "tracefs=$d"; break; }
done
read -r up _ < /proc/uptime
echo "uptime=$up"
for s in /proc/[0-9]*/stat; do
  d=${s%/stat}
  [ -e "$d/exe" ] || continue
  read -r l < "$s" 2>/dev/null || continue
  comm=${l#*\(}; comm=${comm%)*}
  set -- ${l##*)}
  exe=$(readlink "$d/exe" 2>/dev/null)
  [ -n "$exe" ] && echo "proc=${d#/proc/} ${12} ${13} ${20} $exe|$comm"
done
"""
"""One `sh -c` on the DUT (POSIX sh: busybox ash is enough). A /proc/PID/stat line after its
`)`: field 3 is the 1st word, so utime (14) is the 12th, stime (15) the 13th, starttime (22)
the 20th."""


SHELL_PROBE = ('echo "sh=$(readlink -f /bin/sh)"; echo "says=$( (/bin/sh --help 2>&1) | head -n 1)"; '
               'echo "busybox=$(command -v busybox)"; echo "path=$PATH"')
"""What answers as /bin/sh (busybox says so in its --help's first line), busybox, PATH."""


def shell_facts(stdout: str) -> dict[str, str]:
    facts: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("sh", "says", "busybox", "path"):
            facts[key] = value.strip()
    return facts


def describe_shell(facts: dict[str, str]) -> str:
    sh = facts.get("sh") or "/bin/sh"
    said = facts.get("says", "")
    kind = "busybox ash" if said.startswith("BusyBox") else Path(sh).name
    bb = facts.get("busybox")
    return (f"/bin/sh is {kind} ({sh})" + (f"; busybox at {bb}" if bb else "; no busybox in PATH")
            + f"; PATH={facts.get('path', '?')}")


class Candidate(BaseModel):
    name: str = Field(description="/proc/PID/comm")
    pid: int
    exe: str
    cpu_pct: float = Field(description="CPU share since it started (utime+stime over its age)")


class InitResult(BaseModel):
    path: str
    target: str
    candidates: list[Candidate]
    guesses: list[str] = Field(description="what was guessed, each also a comment in the file")


class Probe(BaseModel):
    host_key: str
    sh: str | None = None
    busybox: str | None = None
    perf: str | None = None
    sysupgrade: str | None = None
    path: str | None = None
    openwrt: bool = False
    tracefs: str | None = None
    candidates: list[Candidate] = Field(default_factory=list)


def parse_address(ssh: str) -> tuple[str, str, int]:
    """USER@HOST[:PORT] (a bracketed IPv6 host: USER@[::1]:PORT) -> (user, host, port)."""
    m = re.fullmatch(r"(?:([^@\s]+)@)?(\[[^\]]+\]|[^:@\s]+)(?::(\d+))?", ssh.strip())
    if m is None:
        raise LabError(f"--ssh {ssh!r} is not USER@HOST[:PORT]", "e.g. --ssh root@192.168.1.1:22")
    user, host, port = m.group(1) or "root", m.group(2).strip("[]"), int(m.group(3) or 22)
    if not 1 <= port <= 65535:
        raise LabError(f"--ssh {ssh!r}: port {port} is not 1..65535", "e.g. --ssh root@192.168.1.1:22")
    return user, host, port


def default_key() -> Path:
    for name in KEYS:
        path = Path.home() / ".ssh" / name
        if path.is_file():
            return path
    raise LabError("no SSH key found (~/.ssh/id_ed25519, id_ecdsa or id_rsa)",
                   "pass --key PATH (a private key file the DUT accepts; the ssh agent is not used)")


async def _host_key(host: str, port: int) -> str:
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(
            host, port, config=None, server_host_key_algs=list(HOST_KEY_ALGS)), 15)
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        raise LabError(f"{host}:{port} does not answer SSH: {exc}",
                       "check the address and port of the DUT's SSH server (22 unless changed)") \
            from exc
    if key is None:
        raise LabError(f"{host}:{port} presented no host key", "check the address and port")
    return " ".join(key.export_public_key().decode().split()[:2])


def _kv(text: str) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    procs: list[str] = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "proc":
            procs.append(value)
        else:
            values[key] = value.strip()
    return values, procs


def _candidates(procs: list[str], uptime_s: float, ticks: int = 100) -> list[Candidate]:
    found: dict[str, Candidate] = {}
    for line in procs:
        head, _, comm = line.partition("|")
        parts = head.split(" ", 4)
        if len(parts) < 5 or comm in SYSTEM or comm.startswith(("kworker", "systemd")):
            continue
        try:
            pid, utime, stime, start = (int(p) for p in parts[:4])
        except ValueError:
            continue
        age = max(uptime_s - start / ticks, 1.0)
        pct = round(100 * (utime + stime) / ticks / age, 2)
        best = found.get(comm)
        if best is None or pct > best.cpu_pct:
            found[comm] = Candidate(name=comm, pid=pid, exe=parts[4], cpu_pct=pct)
    return sorted(found.values(), key=lambda c: -c.cpu_pct)


async def probe(user: str, host: str, port: int, key: Path) -> Probe:
    host_key = await _host_key(host, port)
    ep = SshEndpoint(host=host, port=port, user=user, key=str(key), host_key=host_key)
    try:
        async with Device(ep, retries=1) as dev:
            res = await dev.run(["sh", "-c", PROBE], timeout=30, cap=1 << 20)
            tck = await dev.run(["getconf", "CLK_TCK"], timeout=10)
    except DeviceError as exc:
        raise LabError(exc.problem, exc.remedy) from exc
    values, procs = _kv(res.stdout)
    ticks = int(tck.stdout.strip()) if tck.exit_status == 0 and tck.stdout.strip().isdigit() else 100
    return Probe(host_key=host_key, sh=describe_shell(values),
                 busybox=values.get("busybox") or None, perf=values.get("perf") or None,
                 sysupgrade=values.get("sysupgrade") or None, path=values.get("path") or None,
                 openwrt=values.get("openwrt") == "1", tracefs=values.get("tracefs") or None,
                 candidates=_candidates(procs, float(values.get("uptime", "0") or 0), ticks))


def guess_build(repo: Path) -> tuple[list[str], str]:
    """The build command and why it was guessed."""
    makefile = next((repo / n for n in ("Makefile", "makefile", "GNUmakefile")
                     if (repo / n).is_file()), None)
    if makefile is None:
        return (["make", "O={out}"], "a guess: no Makefile in the repo -- write the argv that "
                "builds your firmware into {out}")
    text = makefile.read_text(errors="replace")
    argv = ["make"]
    if re.search(r"^\s*O\s*[?:]?=|\$\(O\)", text, re.M):
        argv.append("O={out}")
        why = f"a guess from {makefile.name}: it writes its outputs to $(O)"
    else:
        argv += ["DESTDIR={out}", "install"]
        why = (f"a guess: {makefile.name} has no O= output dir; this assumes `make install` "
               "honours DESTDIR -- the outputs must land at the top of {out}")
    if "GIT_HASH" in text:
        argv.append("GIT_HASH={git_hash}")
    return argv, why


def _built_names(repo: Path) -> set[str]:
    """Words of the repo's Makefile (its targets and programs: `$(O)/logfilt` names logfilt)."""
    for name in ("Makefile", "makefile", "GNUmakefile"):
        if (repo / name).is_file():
            return set(re.findall(r"[A-Za-z_][\w.+-]*", (repo / name).read_text(errors="replace")))
    return set()


def _q(value: object) -> str:
    return json.dumps(value)


def render(user: str, host: str, port: int, key: Path, repo: Path, out: Path, found: Probe,
           target: str | None) -> tuple[str, InitResult]:
    guesses: list[str] = []
    cands = found.candidates
    built = _built_names(repo)
    ours = [c for c in cands if c.name in built or Path(c.exe).name in built]
    cands = ours + [c for c in cands if c not in ours]  # what the repo builds comes first
    chosen = next((c for c in cands if c.name == target), None) if target else \
        (cands[0] if cands else None)
    name = target or (chosen.name if chosen else "CHANGE-ME")
    listed = ", ".join(f"{c.name} ({c.cpu_pct:g}%)" for c in cands[:10]) or "none found"
    target_note = ("given with --target" if target else
                   "a guess: the busiest process the repo's Makefile names" if ours else
                   "a guess: the busiest process that is not the system's")
    guesses.append(f"[target] process = {name}: {target_note}")
    command, build_why = guess_build(repo)
    guesses.append(f"[build] command: {build_why}")
    exe = chosen.exe if chosen is not None else f"/usr/sbin/{name}"
    art_key = Path(exe).name
    guesses.append(f"[build] artifacts: {art_key} -> {exe} (where {name} runs from)")
    flash_kind = "sysupgrade"
    flash_note = (f"{found.sysupgrade} found on the DUT" if found.sysupgrade else
                  "a guess: no sysupgrade in the DUT's PATH -- install it, or use kind = "
                  "\"command\" with your flasher's argv (run on this host)")
    perf = found.perf or "perf"
    perf_note = (f"found on the DUT at {found.perf}" if found.perf else
                 "a guess: perf was not found on the DUT -- install it there (OpenWrt: opkg "
                 "install perf) or set its full path here")
    tracefs = found.tracefs or "/sys/kernel/tracing"
    data = out.parent.resolve()
    lines = [
        f"# A starting lab profile written by `labwarden lab init` from {user}@{host}:{port} and",
        f"# {repo}. Values marked 'a guess' were guessed: read each. Then run",
        f"#   labwarden lab check {out}",
        f"# The DUT: {found.sh}" + ("; OpenWrt" if found.openwrt else ""),
        "",
        "[lab]",
        f"name = {_q(host if port == 22 else f'{host}-{port}')}  # a guess: any name you like",
        'kind = "real"',
        "",
        "[dut]",
        'backend = "ssh"',
        "",
        "[dut.ssh]",
        f"host = {_q(host)}",
        f"port = {port}",
        f"user = {_q(user)}",
        f"key = {_q(str(key))}",
        "# pinned on first use by `lab init`: compare with the DUT's own key on its console",
        f"host_key = {_q(found.host_key)}",
        "",
        "[dut.paths]",
        f"tracefs = {_q(tracefs)}" + ("  # found on the DUT" if found.tracefs else
                                       "  # a guess: no uprobe_events found on the DUT"),
        "",
        "[build]",
        f"repo = {_q(str(repo))}",
        f"builds = {_q(str(data / 'builds'))}",
        f"command = {_q(command)}  # {build_why}",
        f"artifacts = {{ {_q(art_key)} = {_q(exe.lstrip('/'))} }}  # a guess: the target's "
        "executable (a file at the top of {out} -> its path on the DUT)",
        "",
        "[flash]",
        f"kind = {_q(flash_kind)}  # {flash_note}",
        "",
        "[load]",
        'kind = "none"  # a guess: no clients to hold; see README for stasim, command, iperf3',
        "",
        "[target]",
        f"process = {_q(name)}  # {target_note}",
        f"# candidates (CPU since each started): {listed}",
        f"perf = {_q(perf)}  # {perf_note}",
        "# uprobes = { calls = \"function_name\" }  # counters: any symbol of the build",
        "",
    ]
    text = "\n".join(lines)
    LabProfile.from_dict(tomllib.loads(text), out)  # what is written validates
    return text, InitResult(path=str(out), target=name, candidates=cands[:10], guesses=guesses)


async def init(ssh: str, repo: Path, out: Path, *, key: Path | None = None,
               target: str | None = None, force: bool = False) -> InitResult:
    if out.exists() and not force:
        raise LabError(f"{out} exists", "pass --out NEW_FILE, or --force to overwrite it")
    user, host, port = parse_address(ssh)
    key = (key or default_key()).expanduser().resolve()
    repo = repo.expanduser().resolve()
    found = await probe(user, host, port, key)
    text, result = render(user, host, port, key, repo, out.resolve(), found, target)
    if not (repo / ".git").exists():
        result.guesses.append(f"{repo} is not a git repository: [build] repo must be one")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return result
