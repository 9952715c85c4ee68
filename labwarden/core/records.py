"""Results (measurements, sweeps, gates, attributions, symbolizations) as records with ids, kept on
disk under the lab's data dir and addressable later; raw data lives beside them as artifacts."""

from __future__ import annotations

import json
import os
import re
import stat
import uuid
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from labwarden.core.errors import LabError
from labwarden.core.paths import is_regular_file, within

M = TypeVar("M", bound=BaseModel)
_ID = re.compile(r"[a-z]{2,12}-[0-9a-f]{12}")

# Format of the stored records (every kind: prof, swp, exp, bis, sat, tsw, run, cal), written as each
# file's top-level "record_format" key, as the transcript writes its event schema version. Do NOT
# rename or remove a field of a stored record model, nor change what it means, without bumping
# it; adding a field with a default keeps it (an older record reads with the default). A record
# of a newer format is refused with RecordUnreadable (the file and the remedy); an older one
# reads as it is, or through a migration in `parse_record` when a bump needs one.
# History: 1 (2026-11) the first versioned format. Records written before it have no
# "record_format" key and the same shape (every field added since has a default): they read as 1.
RECORD_FORMAT = 1
FORMAT_KEY = "record_format"

MADE_BY = {"prof": "the `measure` tool", "swp": "the `sweep` tool", "exp": "the `experiment` tool",
           "bis": "the `bisect` tool", "sat": "the `saturate` tool",
           "tsw": "the `traffic_sweep` tool", "run": "`labwarden run`", "cal": "the `calibrate` tool"}
"""What writes each kind: the remedy for a record that cannot be read is to make it again."""


class RecordNotFound(LabError):
    """No record of that kind and id; the remedy names the latest ones."""

    kind = "invalid_input"

    def __init__(self, kind: str, rid: str, known: list[str]):
        super().__init__(f"no {kind} record {rid!r}",
                         f"known {kind} ids: {', '.join(known[-8:]) or 'none yet'}")


class RecordUnreadable(LabError):
    """A record file that this labwarden cannot read: a newer format, or not the model's shape."""

    kind = "tool"

    def __init__(self, path: Path, why: str, remedy: str):
        super().__init__(f"record {path}: {why}", remedy)


def _again(path: Path) -> str:
    kind = path.stem.split("-")[0]
    return f"run {MADE_BY[kind]} again to make it anew" if kind in MADE_BY else \
        "make the record again"


def parse_record(text: str, cls: type[M], path: Path) -> M:
    """A stored record's JSON as `cls`, after checking its format (`path` names it in errors)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordUnreadable(path, f"not JSON ({exc})", _again(path) + " (the file is damaged)") \
            from None
    if not isinstance(data, dict):
        raise RecordUnreadable(path, "not a JSON object", _again(path) + " (the file is damaged)")
    fmt = data.pop(FORMAT_KEY, 1)  # no key: written before records had a format; same shape as 1
    if type(fmt) is not int or not 1 <= fmt <= RECORD_FORMAT:
        raise RecordUnreadable(
            path, f"record format {fmt!r}, and this labwarden reads formats 1 to {RECORD_FORMAT}",
            "it was written by a newer labwarden: read it with that version (upgrade this one), "
            f"or {_again(path)}")
    try:  # from JSON text, not the dict: JSON's rules (a list is a tuple, strict inputs hold)
        return cls.model_validate_json(json.dumps(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(record)"
        raise RecordUnreadable(
            path, f"does not read as a {cls.__name__} ({where}: {first['msg']})",
            f"the file was changed by hand or by another program: restore it, or {_again(path)}") \
            from None


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
        body = json.loads(record.model_dump_json())  # the model's JSON rules (inf/nan: null)
        tmp.write_text(json.dumps({FORMAT_KEY: RECORD_FORMAT, **body}, indent=1, ensure_ascii=False))
        tmp.replace(path)
        return path

    def load(self, kind: str, rid: str, cls: type[M]) -> M:
        """The record, in its current format (RecordUnreadable: a newer format, a damaged file)."""
        path = self.path(kind, rid)
        return parse_record(path.read_text(), cls, path)

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
