"""What `env_pin` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceText
from labwarden.lab.knobs import KnobState


class EnvPinOutput(BaseModel):
    changes: list[DeviceText] = Field(description="what was changed, one line each")
    knobs: list[KnobState] = Field(description="the pinned state after the changes")
