"""The one shape of a failure a person or a model can act on: what went wrong and what to do."""

from __future__ import annotations


class LabError(RuntimeError):
    """Base of labwarden's failures: `problem` (what went wrong) and `remedy` (what to do)."""

    def __init__(self, problem: str, remedy: str):
        self.problem = problem
        self.remedy = remedy
        super().__init__(f"{problem}\n  remedy: {remedy}")
