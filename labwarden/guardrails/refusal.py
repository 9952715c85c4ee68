"""A refusal: the guard's "no", as a LabError carrying the decision the transcript stores."""

from __future__ import annotations

from labwarden.core.errors import LabError
from labwarden.core.events import GuardDecision, RefusalCode


class Refused(LabError):
    """The guard refused a call; `decision` is the guard_decision event that says why."""

    kind = "refused"

    def __init__(self, decision: GuardDecision):
        self.decision = decision
        super().__init__(decision.reason, decision.remedy or "", code=decision.code,
                         kind="invalid_input" if decision.code == "invalid_input" else "refused")


def refuse(tool: str, code: RefusalCode, reason: str, remedy: str) -> Refused:
    return Refused(GuardDecision(tool=tool, decision="refuse", code=code, reason=reason, remedy=remedy))
