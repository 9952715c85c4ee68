"""Where the qlab keeps things: the image cache (shared, outside git) and a qlab's state dir."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "LABWARDEN_QLAB_CACHE"


def cache_dir() -> Path:
    """The image cache: $LABWARDEN_QLAB_CACHE, else $XDG_CACHE_HOME/labwarden/qlab (~/.cache/...).
    Shared by every checkout and worktree of this user: an image is built once per package set."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "labwarden" / "qlab"


@dataclass(frozen=True)
class QlabLayout:
    """Paths of a qlab state dir (the DUT's per-instance disks, the labgrid env, the profile)."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> QlabLayout:
        return cls(Path(root).expanduser().resolve())

    @property
    def env_yaml(self) -> Path:
        return self.root / "env.yaml"

    @property
    def client_env_yaml(self) -> Path:
        """labwarden's env YAML of the target (the profile names it): no QEMUDriver, its
        strategy asks the daemon (remote.py); env_yaml is the daemon's own."""
        return self.root / "client-env.yaml"

    @property
    def lab_toml(self) -> Path:
        return self.root / "lab.toml"

    @property
    def flash_disk(self) -> Path:
        """The DUT's flash (QEMU drive serial lwflash): the firmware image sysupgrade writes."""
        return self.root / "flash.img"

    @property
    def data_disk(self) -> Path:
        """The DUT's persistent overlay (QEMU drive serial lwdata): /overlay in the guest."""
        return self.root / "data.img"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def daemon_pid(self) -> Path:
        return self.run / "qlabd.pid"

    @property
    def qemu_pid(self) -> Path:
        return self.run / "qemu.pid"

    @property
    def socket(self) -> Path:
        """The daemon's control socket (state, transitions)."""
        return self.run / "qlabd.sock"

    @property
    def state_file(self) -> Path:
        """The daemon's last reported state (JSON), for `qlab status` without a round trip."""
        return self.run / "state.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def console_log(self) -> Path:
        """The guest's first serial port: kernel and init messages."""
        return self.logs / "console.log"

    @property
    def daemon_log(self) -> Path:
        return self.logs / "qlabd.log"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def known_hosts(self) -> Path:
        return self.keys / "known_hosts"

    @property
    def src(self) -> Path:
        """Git repository of the firmware sources (as the vlab's)."""
        return self.root / "src"

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"
