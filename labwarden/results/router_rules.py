"""What `router_rules` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RouterRulesOutput(BaseModel):
    before: str = Field(description="the config's rules and mode before (quoted DUT text)")
    after: str = Field(description="the reload command's state line after (quoted DUT text)")
    rules: int
    mode: str
    wireguard: bool
