"""What `attribute` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AttributeOutput(BaseModel):
    suspect: str
    suspect_pid: int
    before_pct: float = Field(description="target CPU before the pause, % of one core")
    during_pct: float = Field(description="target CPU while the suspect was paused")
    after_pct: float = Field(description="target CPU after the suspect resumed")
    drop_pct: float = Field(description="(before - during) / before, %")
    resumed: bool = Field(description="the suspect runs again, same instance (pid + start time)")
    resumed_after_s: float = Field(description="from releasing the pause to seeing it run")
    resumed_by: str = Field(description="release (we stopped the helper) | deadline | "
                            "hangup | session lost | helper exited | sigcont (last resort) | none")
    pause_held: bool = Field(description="the suspect stayed paused for the whole window; if not, "
                             "during_pct mixes paused and running time")
    window_s: float
    notes: list[str] = Field(default_factory=list)
