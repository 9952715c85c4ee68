"""A stock SSH server as a DUT's front door: Debian's OpenSSH `sshd` or `dropbear` on 127.0.0.1,
with its own host key, config and client key, and a DUT's userland seen only by its sessions.

The server runs in a mount namespace of its own (`unshare --mount --propagation private`, root
only), where a few files are bind-mounted over the host's, so the host's real /etc is never
touched: /etc/passwd (root's shell is busybox `ash`, its home the server's state dir),
/etc/shells (dropbear refuses a shell not listed there), an OpenWrt-like /etc/profile (prints a
banner to stdout and resets PATH) and /bin/sh (busybox). A reboot's new boot id is a file
bind-mounted over /proc/sys/kernel/random/boot_id. Everything else -- perf, /proc, tracefs, the
processes measured -- is the host's, so a vlab can be reached through it unchanged.

Used by the tests and bench/device_rtt.py: what a real router's sshd does that the vlab's own
asyncssh server does not (a login shell for sessions without a command, no SIGHUP for sessions
without a terminal) is then exercised for real.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import asyncssh

from labwarden.lab.dut.endpoint import SshEndpoint

ServerKind = Literal["openssh", "dropbear"]
SERVERS: tuple[ServerKind, ...] = ("openssh", "dropbear")
BUSYBOX = "/bin/busybox"
SSHD = "/usr/sbin/sshd"
DROPBEAR = "/usr/sbin/dropbear"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
DROPBEAR_SFTP = "/usr/lib/sftp-server"
"""Where Debian's dropbear looks for its SFTP subsystem (compiled in; OpenWrt's is the same)."""

BANNER = """  _______                     ________        __
 |       |.-----.-----.-----.|  |  |  |.----.|  |_
 |   -   ||  _  |  -__|     ||  |  |  ||   _||   _|
 |_______||   __|_____|__|__||________||__|  |____|
          |__| W I R E L E S S   F R E E D O M
 -----------------------------------------------------
 OpenWrt 23.05.3, r23809-234f1a2efa
 -----------------------------------------------------
"""
"""OpenWrt's banner: its revision looks like a git hash, which is how it fooled a parser once."""

OPENWRT_PROFILE = """#!/bin/sh
[ -e /tmp/.failsafe ] && export FAILSAFE=1
[ -f {banner} ] && cat {banner}
export PATH="/usr/sbin:/usr/bin:/sbin:/bin"
export HOME=$(grep -e "^${{USER:-root}}:" /etc/passwd | cut -d ":" -f 6)
export HOME=${{HOME:-/root}}
export PS1='\\u@\\h:\\w\\$ '
"""
"""OpenWrt's /etc/profile in essence: the banner on stdout, then PATH reset."""


def unavailable(kind: ServerKind) -> str | None:
    """None when this host can run `kind` as a DUT's server here; else why not (for a skip)."""
    if os.geteuid() != 0:
        return "a stock sshd in its own mount namespace needs root"
    needs = {"openssh": (SSHD, SFTP_SERVER), "dropbear": (DROPBEAR, "/usr/bin/dropbearkey")}[kind]
    for path in (*needs, BUSYBOX):
        if not os.path.exists(path):
            return f"{path} is missing: run scripts/setup-system.sh (apt-get install " \
                   "openssh-server dropbear-bin busybox)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is missing"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class StockSsh:
    """One running stock SSH server (call `stop()`, or use it as a context manager)."""

    kind: ServerKind
    root: Path
    port: int
    host_key: str = field(repr=False)
    client_key: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    binds: list[tuple[str, str]] = field(default_factory=list)
    init: str | None = None
    """A DUT init script run as `sh INIT ROOT SERVER_ARGV...` instead of the server itself: it
    starts the server and the DUT's services (and may reboot them all)."""

    @property
    def boot_id_file(self) -> Path:
        return self.root / "boot_id"

    @property
    def log(self) -> Path:
        return self.root / f"{self.kind}.log"

    def endpoint(self) -> SshEndpoint:
        return SshEndpoint(host="127.0.0.1", port=self.port, user="root", key=str(self.client_key),
                           host_key=self.host_key)

    def start(self, timeout: float = 10) -> None:
        """Start the server in its namespace; returns once its port accepts connections."""
        script = _namespace_script(self)
        log = self.log.open("ab")
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                                      "/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True,
                                     preexec_fn=_default_signals)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-600:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} did not listen on 127.0.0.1:{self.port} within {timeout:g} s")

    def stop(self) -> None:
        """Stop the server and every session it runs (its process group)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def new_boot_id(self) -> str:
        """Write a new boot id in place (the bind mount follows the inode, not the name)."""
        value = str(uuid.uuid4())
        with self.boot_id_file.open("r+") as f:
            f.write(value + "\n")
            f.truncate()
        return value

    def __enter__(self) -> StockSsh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _write_keys(root: Path) -> tuple[Path, str]:
    """Client key (+ authorized_keys in root's home) and the server's ed25519 host key."""
    keys = root / "keys"
    home = root / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    keys.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    os.chmod(home / ".ssh", 0o700)
    client = asyncssh.generate_private_key("ssh-ed25519")
    client_path = keys / "id_ed25519"
    client.write_private_key(str(client_path))
    os.chmod(client_path, 0o600)
    auth = home / ".ssh" / "authorized_keys"
    auth.write_bytes(client.export_public_key())
    os.chmod(auth, 0o600)
    host = asyncssh.generate_private_key("ssh-ed25519")
    host_path = keys / "ssh_host_ed25519_key"
    host.write_private_key(str(host_path))
    os.chmod(host_path, 0o600)
    return client_path, host.export_public_key().decode().split()[0] + " " + \
        host.export_public_key().decode().split()[1]


def _dropbear_key(root: Path) -> Path:
    """The host key in dropbear's own format (converted from the OpenSSH one)."""
    out = root / "keys" / "dropbear_ed25519_host_key"
    subprocess.run(["dropbearconvert", "openssh", "dropbear",
                    str(root / "keys" / "ssh_host_ed25519_key"), str(out)],
                   check=True, capture_output=True)
    return out


def _sshd_config(s: StockSsh) -> Path:
    cfg = s.root / "sshd_config"
    cfg.write_text(f"""Port {s.port}
ListenAddress 127.0.0.1
HostKey {s.root / "keys" / "ssh_host_ed25519_key"}
PidFile {s.root / "sshd.pid"}
AuthorizedKeysFile {s.root / "home" / ".ssh" / "authorized_keys"}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PrintMotd no
PrintLastLog no
UseDNS no
Subsystem sftp {SFTP_SERVER}
""")
    return cfg


def _userland(s: StockSsh, profile: str, shell_path: str) -> None:
    """The DUT's /etc files the namespace mounts over the host's."""
    etc = s.root / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "banner").write_text(BANNER)
    (etc / "profile").write_text(profile.format(banner=shlex.quote(str(etc / "banner"))))
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == "root" and len(f) == 7:
            f[5], f[6] = str(s.root / "home"), shell_path
            line = ":".join(f)
        lines.append(line)
    (etc / "passwd").write_text("\n".join(lines) + "\n")
    (etc / "shells").write_text(Path("/etc/shells").read_text() + shell_path + "\n")
    s.boot_id_file.write_text(Path("/proc/sys/kernel/random/boot_id").read_text())
    lib = s.root / "usr-lib"  # dropbear's compiled-in SFTP path, as on OpenWrt
    lib.mkdir(exist_ok=True)
    link = lib / Path(DROPBEAR_SFTP).name
    if not link.is_symlink():
        link.symlink_to(SFTP_SERVER)


def _default_signals() -> None:
    """A DUT boots with every signal at its default: one ignored by whatever started us (`nohup`
    ignores SIGHUP) would stay ignored in the DUT's init, and a POSIX shell cannot trap a
    signal ignored on entry -- the logfilt DUT's reboot (SIGHUP to its init) never happened."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _namespace_script(s: StockSsh) -> str:
    r = s.root
    q = shlex.quote
    binds = [(str(r / "etc" / "passwd"), "/etc/passwd"), (str(r / "etc" / "shells"), "/etc/shells"),
             (str(r / "etc" / "profile"), "/etc/profile"), (BUSYBOX, "/bin/sh"),
             (str(s.boot_id_file), "/proc/sys/kernel/random/boot_id"), *s.binds]
    lines = ["set -e", "mkdir -p /run/sshd"]  # sshd's privilege separation dir (empty)
    lines += [f"mount --bind {q(src)} {q(dst)}" for src, dst in binds]
    if s.kind == "openssh":
        server = f"{SSHD} -D -e -f {q(str(_sshd_config(s)))}"
    else:
        # /usr/lib/sftp-server: overlay the host's /usr/lib with a dir holding only that link
        lines.append(f"mount -t overlay overlay -o lowerdir={q(str(r / 'usr-lib'))}:/usr/lib /usr/lib")
        server = (f"{DROPBEAR} -F -E -s -p 127.0.0.1:{s.port} -r "
                  f"{q(str(_dropbear_key(s.root)))} -P {q(str(r / 'dropbear.pid'))}")
    lines.append(f"exec /bin/sh {q(s.init)} {q(str(r))} {server}" if s.init else f"exec {server}")
    return "\n".join(lines)


def start(kind: ServerKind, root: Path, *, profile: str = OPENWRT_PROFILE,
          binds: list[tuple[str, str]] | None = None, port: int | None = None,
          init: str | None = None) -> StockSsh:
    """Set up `root` (keys, DUT /etc files) and start `kind` on 127.0.0.1 as a DUT would run it:
    root's login shell busybox ash, /etc/profile printing a banner and resetting PATH. `binds`:
    more (source, target) bind mounts inside the namespace; `init`: a DUT init script that
    starts the server (see StockSsh.init)."""
    why = unavailable(kind)
    if why:
        raise RuntimeError(why)
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    client, host_key = _write_keys(root)
    shell_dir = root / "bin"
    shell_dir.mkdir(exist_ok=True)
    ash = shell_dir / "ash"
    if not ash.is_symlink():
        ash.symlink_to(BUSYBOX)  # busybox runs the applet named by argv[0] ("-ash" at login)
    server = StockSsh(kind=kind, root=root, port=port or free_port(), host_key=host_key,
                      client_key=client, binds=list(binds or []), init=init)
    _userland(server, profile, str(ash))
    server.start()
    return server
