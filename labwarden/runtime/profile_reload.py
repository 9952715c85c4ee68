"""A server picks up an edited lab profile without a restart (runtime/session.LabHub).

Before each request the hub asks its `ProfileWatch` whether the profile file changed (a stat;
the bytes are read and hashed only when its mtime or size moved). A changed file is validated
first: a valid one is used from the next call on, an invalid one is refused -- the profile in
use is kept -- and either way the change is logged as a Note in every open transcript session,
so the story of a session does not split at an edit.

What cannot change under a running server is refused the same way, with the reason: the data
dir (records, transcripts and the board state live there), and a [dut] change on a DUT reached
through labgrid or a fleet place (their connection is held at the coordinator), or while a
session holds the DUT's lease.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from labwarden.lab.config import LabProfile

AUTHOR = "labwarden"
"""The Note's author."""


@dataclass
class ProfileWatch:
    """The profile file a server runs on, and what it last looked like."""

    path: Path | None
    stamp: tuple[int, int] | None = None
    digest: str | None = None
    refused: str | None = None
    """The digest of the last content refused (each refused edit is logged once)."""

    @classmethod
    def of(cls, profile: LabProfile) -> ProfileWatch:
        src = profile.source
        path = Path(src) if src and src != "<profile>" and Path(src).is_file() else None
        watch = cls(path)
        if path is not None:
            watch.stamp = _stamp(path)
            watch.digest = _digest(path.read_bytes())
        return watch

    def changed(self) -> str | None:
        """The new content's digest when the file's content changed since it was last seen
        (accepted or refused), else None. Cheap when nothing changed: one stat."""
        if self.path is None:
            return None
        stamp = _stamp(self.path)
        if stamp is None or stamp == self.stamp:
            return None
        try:
            digest = _digest(self.path.read_bytes())
        except OSError:
            return None  # being replaced: the next request looks again
        self.stamp = stamp
        if digest in (self.digest, self.refused):
            return None
        return digest


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


SECTIONS = tuple(name for name in LabProfile.model_fields if name != "source")


def changed_sections(old: LabProfile, new: LabProfile) -> list[str]:
    """The top-level sections whose values differ ([gates], [dut], ...)."""
    return [s for s in SECTIONS if getattr(old, s) != getattr(new, s)]


def cannot_apply(old: LabProfile, new: LabProfile, *, lease_held: bool) -> str | None:
    """Why `new` cannot replace `old` under a running server (None: it can)."""
    if old.data_dir() != new.data_dir():
        return (f"[lab] data_dir moved ({old.data_dir()} -> {new.data_dir()}): records and "
                "transcripts live there; restart `labwarden serve` to use it")
    if old.dut != new.dut:
        reached = {old.dut.backend, new.dut.backend}
        if reached != {"ssh"} or old.dut.place is not None or new.dut.place is not None:
            return ("[dut] changed on a DUT reached through labgrid or a fleet place (held at "
                    "the coordinator): restart `labwarden serve` to use it")
        if lease_held:
            return ("[dut] changed while a session holds the DUT's lease: edit the file again "
                    "once no call holds it")
    return None
