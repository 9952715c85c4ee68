"""Results (profiles, sweeps, gates, attributions, symbolizations) as records with ids, kept on
disk under the lab's data dir and addressable later; raw data lives beside them as artifacts."""

from __future__ import annotations

import os
import re
import stat
import uuid
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from labwarden.core.errors import LabError
from labwarden.core.paths import is_regular_file, within

M = TypeVar("M", bound=BaseModel)
_ID = re.compile(r"[a-z]{2,12}-[0-9a-f]{12}")


class RecordNotFound(LabError):
    """No record of that kind and id; the remedy names the latest ones."""

    kind = "invalid_input"

    def __init__(self, kind: str, rid: str, known: list[str]):
        super().__init__(f"no {kind} record {rid!r}",
                         f"known {kind} ids: {', '.join(known[-8:]) or 'none yet'}")


class RecordStore:
    def __init__(self, data_dir: Path):
        self.root = data_dir / "records"
        self.artifacts = data_dir / "artifacts"

    @staticmethod
    def new_id(kind: str) -> str:
        return f"{kind}-{uuid.uuid4().hex[:12]}"

    def _path(self, kind: str, rid: str) -> Path:
        """The record's file, resolved inside records/<kind>/ (a planted symlink out of it is
        refused, core/paths.py)."""
        if not _ID.fullmatch(rid) or not rid.startswith(kind + "-"):
            raise RecordNotFound(kind, rid[:64], self.ids(kind))
        return within(self.root / kind, f"{rid}.json", what="record id")

    def path(self, kind: str, rid: str) -> Path:
        """The record's file, resolved and contained; RecordNotFound when there is none."""
        path = self._path(kind, rid)
        if not is_regular_file(path):
            raise RecordNotFound(kind, rid, self.ids(kind))
        return path

    def save(self, kind: str, rid: str, record: BaseModel) -> Path:
        path = self._path(kind, rid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(record.model_dump_json(indent=1))
        tmp.replace(path)
        return path

    def load(self, kind: str, rid: str, cls: type[M]) -> M:
        return cls.model_validate_json(self.path(kind, rid).read_text())

    def ids(self, kind: str) -> list[str]:
        """Ids of the kind's records, oldest first. Only regular files count: a symlink planted
        in the directory (dangling, or pointing anywhere) is not a record."""
        d = self.root / kind
        stamped = []
        for p in d.glob("*.json") if d.is_dir() else []:
            try:
                st = p.lstat()
            except OSError:  # gone while listing
                continue
            if stat.S_ISREG(st.st_mode):
                stamped.append((st.st_mtime, p.stem))
        return [rid for _, rid in sorted(stamped)]

    def artifact_dir(self, rid: str) -> Path:
        path = within(self.artifacts, rid, what="record id")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def artifact(self, rid: str, name: str | None = None) -> Path:
        """An artifact file of a record (or its directory), resolved inside artifacts/<rid>/."""
        if not _ID.fullmatch(rid):
            raise RecordNotFound("artifact", rid[:64], [])
        base = within(self.artifacts, rid, what="record id")
        return base if name is None else within(base, name, what="artifact name")
