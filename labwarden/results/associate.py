"""What `associate` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AssociateOutput(BaseModel):
    associated: int = Field(description="clients the load was asked to hold")
    datamodel_count: int | None = Field(description="clients the DUT itself counts (None: the "
                                        "DUT has no clients reader, so nothing was verified)")
    per_radio: list[int] = Field(description="datamodel count per VAP, in VAP order (empty: the "
                                 "reader gives a total only)")
    even_split: bool = Field(description="max - min per radio <= 1 over all radios")
    duration_s: float
    note: str | None = Field(None, description="why the count was not verified, when it was not")
    healed: list[str] = Field(default_factory=list, description="topology changes made before "
                              "holding (a reboot's drift, healed as [policy] heal allows)")
