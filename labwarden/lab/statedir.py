"""The state dir of a lab labwarden brings up itself (`vlab up`, `qlab up`): the paths every such
lab keeps in the same places -- the firmware's git repository, its builds, the SSH keys, the logs,
labwarden's records and the lab profile written for it. Each lab kind's layout adds its own."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from labwarden.lab.boardstate import BoardState


@dataclass(frozen=True)
class StateDir:
    """Paths of one lab's state dir, resolved once (symlinks followed) at `at()`."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> Self:
        return cls(Path(root).expanduser().resolve())

    @property
    def src(self) -> Path:
        """Git repository of the firmware sources (what `build` checks out and patches)."""
        return self.root / "src"

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def known_hosts(self) -> Path:
        return self.keys / "known_hosts"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def data_dir(self) -> Path:
        """labwarden's records for this lab (the profile's [lab] data_dir)."""
        return self.root / "data"

    @property
    def lab_toml(self) -> Path:
        """The lab profile `up` writes for this lab."""
        return self.root / "lab.toml"

    def record_first_flash(self, build_id: str, seconds: float | None = None) -> None:
        """`up` programmed `build_id`: the board state says flashed, not yet verified (the
        first `fingerprint_verify` proves it). `seconds`: what the programming took, when it
        is what a flash here costs (the first verify adds its own: the lab's switch_s)."""
        state = BoardState.load(self.data_dir)
        state.record_flash(build_id)
        state.flash_s = None if seconds is None else round(seconds, 2)
        state.save(self.data_dir)


@contextmanager
def torn_down_on_failure(root: Path, down: Callable[[Path], object]) -> Iterator[None]:
    """The body of an `up`: whatever fails in it (Ctrl-C included), `down(root)` stops what it
    started before the failure propagates, so a failed `up` leaves no process behind."""
    try:
        yield
    except BaseException:
        down(root)
        raise
