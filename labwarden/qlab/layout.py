"""Where the qlab keeps things: the image cache (shared, outside git) and a qlab's state dir
(its layout: the paths every local lab keeps, lab/statedir.py, and the qlab's own)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from labwarden.lab.statedir import StateDir

CACHE_ENV = "LABWARDEN_QLAB_CACHE"


def cache_dir() -> Path:
    """The image cache: $LABWARDEN_QLAB_CACHE, else $XDG_CACHE_HOME/labwarden/qlab (~/.cache/...).
    Shared by every checkout and worktree of this user: an image is built once per package set."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "labwarden" / "qlab"


@dataclass(frozen=True)
class QlabLayout(StateDir):
    """Paths of a qlab state dir: the DUT's per-instance disks, the labgrid env, the daemon's
    run files, and what every local lab keeps (StateDir)."""

    @property
    def env_yaml(self) -> Path:
        return self.root / "env.yaml"

    @property
    def client_env_yaml(self) -> Path:
        """labwarden's env YAML of the target (the profile names it): no QEMUDriver, its
        strategy asks the daemon (remote.py); env_yaml is the daemon's own."""
        return self.root / "client-env.yaml"

    @property
    def flash_disk(self) -> Path:
        """The DUT's flash (QEMU drive serial lwflash): the firmware image sysupgrade writes."""
        return self.root / "flash.img"

    @property
    def data_disk(self) -> Path:
        """The DUT's persistent overlay (QEMU drive serial lwdata): /overlay in the guest."""
        return self.root / "data.img"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def daemon_pid(self) -> Path:
        return self.run_dir / "qlabd.pid"

    @property
    def qemu_pid(self) -> Path:
        return self.run_dir / "qemu.pid"

    @property
    def socket(self) -> Path:
        """The daemon's control socket (state, transitions)."""
        return self.run_dir / "qlabd.sock"

    @property
    def state_file(self) -> Path:
        """The daemon's last reported state (JSON), for `qlab status` without a round trip."""
        return self.run_dir / "state.json"

    @property
    def console_log(self) -> Path:
        """The guest's first serial port: kernel and init messages."""
        return self.logs / "console.log"

    @property
    def daemon_log(self) -> Path:
        return self.logs / "qlabd.log"
