"""What `bisect` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BisectOutput(BaseModel):
    bisect_id: str
    outcome: str = Field(description="found | no_regression | undecided | failed")
    first_bad: str | None
    first_bad_subject: str | None
    regression: str | None = Field(description="bad against good, as the rule saw it")
    steps: list[str] = Field(description="commit: side (verdict, delta)")
    commits: int
    reason: str
    seconds: float
