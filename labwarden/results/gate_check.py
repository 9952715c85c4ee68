"""What `gate_check` returns: its spec's `output`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.experiments import Gate

GateName = Literal["cpu_monotonic", "unknown_frames", "assoc_matches_datamodel",
                   "conditions_verified", "rss_bounded", "functional_parity",
                   "offered_load_parity", "declared_parity", "saturation_confirmed",
                   "load_on_target", "same_question"]


class CheckedGate(Gate):
    """A gate as gate_check reports it: core's Gate, its name one of GateName (a stored
    experiment keeps core's Gate, whose name is any string, so older records stay readable)."""

    name: GateName


class GateOutput(BaseModel):
    sweep_id: str = Field(description="the record judged: a sweep (swp-) or a saturation run (sat-)")
    passed: bool = Field(description="no gate failed (not-applicable gates are listed apart)")
    failed: list[GateName]
    not_applicable: list[GateName] = Field(default_factory=list)
    gates: list[CheckedGate]
