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
    left_flashed: str | None = Field(None, description="the build the board is left running "
                                     "(verified): good's -- the base; a bisection keeps nothing")
    left_flashed_why: str | None = None
