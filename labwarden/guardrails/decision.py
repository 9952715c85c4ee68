"""Guard decisions: allow, heal (changed something, said what) or refuse with a code from a
closed set, a reason and a remedy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

RefusalCode = Literal[
    "invalid_input",          # the arguments do not match the tool's schema
    "unsafe_argument",        # control characters, option injection, shell-looking identifiers
    "unsafe_path",            # outside the allowed roots, symlink escape, prefix look-alike
    "suspect_not_allowed",    # SIGSTOP of something not on the profile's allowlist
    "lease_held",             # another session holds the DUT
    "board_unknown",          # a flash failed or was interrupted: only a health check may run
    "board_bad",              # a health check failed: a person must clear it
    "fingerprint_unverified", # measuring or acting on an image nobody verified since the flash
    "env_unpinned",           # governor/boost not pinned and healing is off
    "topology_drifted",       # VAPs/channels/process manager drifted and healing is off
    "budget_exceeded",        # tokens, dollars, wall time, tool calls or flashes per hour
    "tool_unknown",           # no such tool: nothing covers it, so it is refused
]


class GuardDecision(BaseModel):
    tool: str
    decision: Literal["allow", "heal", "refuse"]
    code: RefusalCode | None = None
    reason: str = ""
    remedy: str | None = None
    changes: list[str] = Field(default_factory=list, description="what a heal changed")


class Refused(Exception):
    def __init__(self, decision: GuardDecision):
        self.decision = decision
        super().__init__(f"{decision.code}: {decision.reason}")


def refuse(tool: str, code: RefusalCode, reason: str, remedy: str) -> Refused:
    return Refused(GuardDecision(tool=tool, decision="refuse", code=code, reason=reason, remedy=remedy))
