"""What `report` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReportOutput(BaseModel):
    path: str
    stages: list[str]
    comparisons: int = Field(description="A/B comparisons shown, an experiment's own included")
    gates_passed: list[bool] = Field(description="per gate_check (an experiment's own included; "
                                     "a sweep checked twice counts once): no gate failed (gates "
                                     "not applicable to this lab do not count)")
    bytes: int
    sessions: list[str] = Field(default_factory=list, description="the transcript sessions the "
                                "report reads, oldest first")
