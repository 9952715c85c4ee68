"""What `sweep` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.measurements import SweepPoint


class SweepOutput(BaseModel):
    sweep_id: str
    label: str | None
    build_id: str | None
    points: list[SweepPoint]
    cleanup_count: int | None = Field(description="the DUT's client count after disassociating "
                                      "(None: the DUT has no clients reader)")
    idle_note: str | None
