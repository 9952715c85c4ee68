"""What `flash` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FlashOutput(BaseModel):
    flashed: bool
    build_id: str
    overlay_wiped: bool = Field(description="the DUT's overlay holds no file after the flash")
    duration_s: float
