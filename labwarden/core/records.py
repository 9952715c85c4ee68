"""Results (profiles, sweeps, gates, attributions, symbolizations) as records with ids, kept on
disk under the lab's data dir and addressable later; raw data lives beside them as artifacts."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from labwarden.core.errors import LabError

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
        if not _ID.fullmatch(rid) or not rid.startswith(kind + "-"):
            raise RecordNotFound(kind, rid, self.ids(kind))
        return self.root / kind / f"{rid}.json"

    def save(self, kind: str, rid: str, record: BaseModel) -> Path:
        path = self._path(kind, rid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(record.model_dump_json(indent=1))
        tmp.replace(path)
        return path

    def load(self, kind: str, rid: str, cls: type[M]) -> M:
        path = self._path(kind, rid)
        if not path.is_file():
            raise RecordNotFound(kind, rid, self.ids(kind))
        return cls.model_validate_json(path.read_text())

    def ids(self, kind: str) -> list[str]:
        d = self.root / kind
        return sorted((p.stem for p in d.glob("*.json")), key=lambda s: (d / f"{s}.json").stat().st_mtime) \
            if d.is_dir() else []

    def artifact_dir(self, rid: str) -> Path:
        path = self.artifacts / rid
        path.mkdir(parents=True, exist_ok=True)
        return path
