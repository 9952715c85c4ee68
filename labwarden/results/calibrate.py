"""What `calibrate` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import Field

from labwarden.core.calibration import Calibration


class CalibrateOutput(Calibration):
    """The calibration (core/calibration.py) with where and on what it was measured; the windows
    themselves are in the record."""

    calibration_id: str = Field(description="the stored record (kind cal)")
    build_id: str = Field(description="the verified build the windows ran on")
    place: str | None = Field(None, description="the fleet place (None off a fleet)")
    workload: str = Field(description="the workload point the windows held (the densest)")
    switch_s: float | None = Field(description="seconds of one switch of image the design was "
                                   "chosen on (None: none measured yet)")
