"""What labwarden knows about the board between calls: health, what was flashed, what was
verified. One JSON file in the lab's data dir, replaced atomically on every change."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

BoardHealth = Literal["good", "unknown", "bad"]


class LabState(BaseModel):
    version: int = 1
    board_health: BoardHealth = "good"
    health_reason: str | None = None
    flashed_build: str | None = Field(None, description="build id of the last successful flash")
    flashed_at: datetime | None = None
    verified_build: str | None = Field(None, description="build id verified since the last flash")
    verified_at: datetime | None = None

    @classmethod
    def load(cls, data_dir: Path) -> LabState:
        path = data_dir / "labstate.json"
        if not path.exists():
            return cls()
        return cls.model_validate_json(path.read_text())

    def save(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / f"labstate.json.{os.getpid()}"
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(data_dir / "labstate.json")

    def record_flash(self, build_id: str) -> None:
        self.flashed_build = build_id
        self.flashed_at = datetime.now(UTC)
        self.verified_build = None
        self.verified_at = None

    def fingerprint_ok(self) -> bool:
        return self.flashed_build is not None and self.verified_build == self.flashed_build
