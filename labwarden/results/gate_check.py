"""What `gate_check` returns: its spec's `output`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.experiments import GateResult

GateName = Literal["cpu_monotonic", "unknown_frames", "assoc_matches_datamodel",
                   "conditions_verified", "rss_bounded", "functional_parity",
                   "offered_load_parity", "declared_parity", "saturation_confirmed",
                   "load_on_target", "same_question"]


class Gate(GateResult):
    """A gate of gate_check: one of GateName, with core/experiments' one status."""

    name: GateName


class GateOutput(BaseModel):
    sweep_id: str = Field(description="the record judged: a sweep (swp-) or a saturation run (sat-)")
    passed: bool = Field(description="no gate failed (not-applicable gates are listed apart)")
    failed: list[GateName]
    not_applicable: list[GateName] = Field(default_factory=list)
    gates: list[Gate]
