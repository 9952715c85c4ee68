"""Per-session budgets: tokens, dollars, wall time, tool calls (the flash rate is per DUT, across
sessions: guardrails/flashrate.py).

A tool call takes its slot at the door (`admit`), checked and counted in one step with no await
between, so concurrent calls can never all pass a check that only one of them may; every call
counts, refused and malformed ones included. Model usage is added by whoever calls the model
(the agent), so a budget stops further calls whatever the client is. A call still running when
the wall time runs out is stopped by the runner (`time_left`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from labwarden.lab.config import BudgetSection

REMEDY = ("stop and report what was done: this session's budget is spent (a person may start "
          "another session with a larger [policy.budgets] in the lab profile)")


@dataclass
class BudgetState:
    limits: BudgetSection
    started: float = field(default_factory=time.monotonic)
    tool_calls: int = 0
    tokens: int = 0
    dollars: float = 0.0

    def add_model_usage(self, tokens: int, dollars: float) -> None:
        self.tokens += tokens
        self.dollars += dollars

    def exceeded(self, calls: bool = True) -> str | None:
        """The first exhausted budget, described; None if another model call (or, with `calls`,
        another tool call) may proceed. Takes nothing."""
        lim = self.limits
        if calls and lim.tool_calls is not None and self.tool_calls >= lim.tool_calls:
            return f"tool calls: {self.tool_calls} of {lim.tool_calls} used"
        if lim.wall_time_s is not None and time.monotonic() - self.started >= lim.wall_time_s:
            return f"wall time: {time.monotonic() - self.started:.0f} s of {lim.wall_time_s:g} s used"
        if lim.tokens is not None and self.tokens >= lim.tokens:
            return f"tokens: {self.tokens} of {lim.tokens} used"
        if lim.dollars is not None and self.dollars >= lim.dollars:
            return f"dollars: ${self.dollars:.2f} of ${lim.dollars:.2f} used"
        return None

    def admit(self) -> str | None:
        """Check and take one tool call's slot, atomically (no await in here); the exhausted
        budget, described, when the call may not run (nothing is taken then)."""
        over = self.exceeded()
        if over is None:
            self.tool_calls += 1
        return over

    def time_left(self) -> float | None:
        """Seconds of wall time left (None: no wall-time budget)."""
        if self.limits.wall_time_s is None:
            return None
        return max(0.0, self.limits.wall_time_s - (time.monotonic() - self.started))
