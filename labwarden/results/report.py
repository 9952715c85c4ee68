"""What `report` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReportOutput(BaseModel):
    path: str
    stages: list[str]
    comparisons: int
    gates_passed: list[bool] = Field(description="per gate_check: no gate failed (gates not "
                                     "applicable to this lab do not count)")
    bytes: int
