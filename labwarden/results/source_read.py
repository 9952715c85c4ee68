"""What `source_read` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SourceReadOutput(BaseModel):
    commit: str
    path: str
    start: int
    end: int = Field(description="last line returned")
    total_lines: int
    lines: list[str] = Field(description="'NNNN| text', numbered")
    next_start: int | None = Field(description="the next line to read; None at the end of the file")
