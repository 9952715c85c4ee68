"""Per-session budgets: tokens, dollars, wall time, tool calls, flashes per hour.

Counters live in the session; model usage is added by whoever calls the model (the agent) so
a budget stops further calls whatever the client is. Which calls count as flashes is the tool's
spec (`counts_as_flash`), never its name."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from labwarden.core.spec import ToolSpec
from labwarden.lab.config import BudgetSection


@dataclass
class BudgetState:
    limits: BudgetSection
    started: float = field(default_factory=time.monotonic)
    tool_calls: int = 0
    tokens: int = 0
    dollars: float = 0.0
    flashes: list[float] = field(default_factory=list)

    def add_model_usage(self, tokens: int, dollars: float) -> None:
        self.tokens += tokens
        self.dollars += dollars

    def exceeded(self, spec: ToolSpec | None = None) -> str | None:
        """The first exhausted budget, described; None if the call (a tool's, or a model call
        when `spec` is None) may proceed."""
        lim = self.limits
        if lim.tool_calls is not None and self.tool_calls >= lim.tool_calls:
            return f"tool calls: {self.tool_calls} of {lim.tool_calls} used"
        if lim.wall_time_s is not None and time.monotonic() - self.started >= lim.wall_time_s:
            return f"wall time: {time.monotonic() - self.started:.0f} s of {lim.wall_time_s:g} s used"
        if lim.tokens is not None and self.tokens >= lim.tokens:
            return f"tokens: {self.tokens} of {lim.tokens} used"
        if lim.dollars is not None and self.dollars >= lim.dollars:
            return f"dollars: ${self.dollars:.2f} of ${lim.dollars:.2f} used"
        if spec is not None and spec.counts_as_flash and lim.flashes_per_hour is not None:
            recent = [t for t in self.flashes if time.monotonic() - t < 3600]
            if len(recent) >= lim.flashes_per_hour:
                return f"flashes: {len(recent)} in the last hour (limit {lim.flashes_per_hour})"
        return None

    def took(self, spec: ToolSpec, ok: bool) -> None:
        """Count a call that ran (after it ran: a flash counts only when it succeeded)."""
        if spec.counts_as_flash and ok:
            self.flashes.append(time.monotonic())
