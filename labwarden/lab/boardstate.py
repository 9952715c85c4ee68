"""What labwarden knows about the board between calls: health, what was flashed, what was
verified. One JSON file in the lab's data dir (`labstate.json`), replaced atomically on every
change; `BoardStateFile` reads it once per change (the guard looks at it on every call)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.devtext import UNTRUSTED_NOTE

BoardHealth = Literal["good", "unknown", "bad"]
FILE = "labstate.json"


class BoardState(BaseModel):
    version: int = 1
    board_health: BoardHealth = "good"
    health_reason: str | None = Field(None, json_schema_extra={"x-untrusted": UNTRUSTED_NOTE},
                                      description="why the board is not good; DUT output in it "
                                      "(a failed flash's stderr) is quoted and marked")
    flashed_build: str | None = Field(None, description="build id of the last successful flash")
    flashed_at: datetime | None = None
    verified_build: str | None = Field(None, description="build id verified since the last flash")
    verified_at: datetime | None = None
    flash_s: float | None = Field(None, description="seconds the last flash took (until its "
                                  "fingerprint_verify turns it into switch_s)")
    switch_s: float | None = Field(None, description="seconds of the last switch of image here "
                                   "(flash + fingerprint verify), measured: whether the next A/B "
                                   "interleaves (core/schedule.py)")

    @classmethod
    def load(cls, data_dir: Path) -> BoardState:
        path = data_dir / FILE
        if not path.exists():
            return cls()
        return cls.model_validate_json(path.read_text())

    def save(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / f"{FILE}.{os.getpid()}"
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(data_dir / FILE)

    def record_flash(self, build_id: str) -> None:
        self.flashed_build = build_id
        self.flashed_at = datetime.now(UTC)
        self.verified_build = None
        self.verified_at = None

    def fingerprint_ok(self) -> bool:
        return self.flashed_build is not None and self.verified_build == self.flashed_build


class BoardStateFile:
    """The board state of one data dir, re-read only when the file changed."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._path = str(data_dir / FILE)  # stat()ed on every call
        self._cache: tuple[tuple[int, int, int], BoardState] | None = None

    def peek(self) -> BoardState:
        """The state as stored, shared: read it, never change it (`copy()` for that)."""
        try:
            st = os.stat(self._path)
            stamp = (st.st_mtime_ns, st.st_ino, st.st_size)  # save() renames a new file in
        except FileNotFoundError:
            return BoardState()
        if self._cache is None or self._cache[0] != stamp:
            self._cache = (stamp, BoardState.load(self.data_dir))
        return self._cache[1]

    def copy(self) -> BoardState:
        """The state as a copy to change and `save()`."""
        return self.peek().model_copy(deep=True)

    def save(self, state: BoardState) -> None:
        state.save(self.data_dir)
