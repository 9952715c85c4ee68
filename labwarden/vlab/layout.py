"""Where everything of one vlab lives inside its state directory (one place, so nothing guesses)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labwarden.lab.statedir import StateDir

SERVICES = ("stad", "stamon")
"""Processes the DUT's process manager starts and respawns, in start order."""


@dataclass(frozen=True)
class VlabLayout(StateDir):
    """Paths of a vlab state dir. The DUT's filesystem is the state dir itself: its paths are
    absolute host paths, which the lab profile names like any real DUT's paths. What every local
    lab keeps (src, builds, keys, logs, data, lab.toml) is StateDir's."""

    # DUT filesystem
    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs"

    @property
    def overlay(self) -> Path:
        return self.root / "overlay"

    @property
    def config_dir(self) -> Path:
        return self.root / "etc" / "config"

    @property
    def openwrt_release(self) -> Path:
        return self.root / "etc" / "openwrt_release"

    @property
    def sysfs(self) -> Path:
        return self.root / "sys"

    @property
    def cpufreq_dir(self) -> Path:
        return self.sysfs / "devices" / "system" / "cpu"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def socket(self) -> Path:
        """stad's RPC socket, in a directory of its own: the only one the confined services
        write (vlab/confine.py)."""
        return self.run_dir / "sta" / "stad.sock"

    # host side
    @property
    def loadgen(self) -> Path:
        """The load side (station simulator); not part of the DUT image."""
        return self.root / "loadgen"

    @property
    def host_key(self) -> Path:
        return self.keys / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.keys / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.keys / "authorized_keys"

    @property
    def dutd_pid(self) -> Path:
        return self.run_dir / "dutd.pid"

    @property
    def ssh_port_file(self) -> Path:
        return self.run_dir / "ssh.port"

    @property
    def stasim_pid(self) -> Path:
        return self.run_dir / "stasim.pid"

    def binary(self, name: str) -> Path:
        """The DUT's binary as the process manager resolves it: overlay first, like overlayfs."""
        for base in (self.overlay, self.rootfs):
            path = base / "usr" / "sbin" / name
            if path.exists():
                return path
        return self.rootfs / "usr" / "sbin" / name

    def library_path(self) -> str:
        return f"{self.overlay / 'usr' / 'lib'}:{self.rootfs / 'usr' / 'lib'}"

    def dut_env(self) -> dict[str, str]:
        """Environment of every DUT process and SSH session."""
        return {
            "VLAB_ROOT": str(self.root),
            "PATH": ":".join(
                [
                    str(self.rootfs / "sbin"),
                    str(self.rootfs / "usr" / "sbin"),
                    str(self.rootfs / "usr" / "bin"),
                    "/usr/sbin:/usr/bin:/sbin:/bin",
                ]
            ),
            "LD_LIBRARY_PATH": self.library_path(),
            "HOME": str(self.root),
            "LANG": "C",
        }
